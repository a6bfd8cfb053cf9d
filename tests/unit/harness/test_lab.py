"""harness.lab: the lab as tests and benchmarks reach it (no lab needed here)."""

from __future__ import annotations

import pytest

from harness.lab import LAB_ROOT, docker_argv, host_index, run_log, shared, socket

pytestmark = pytest.mark.unit


def test_docker_argv_targets_the_hosts_own_socket() -> None:
    """`docker -H unix://<lab root>/h<i>/docker.sock`, as lab/config.py lays hosts out."""
    assert socket(3) == LAB_ROOT / "h3" / "docker.sock"
    assert docker_argv(3) == ["docker", "-H", f"unix://{LAB_ROOT}/h3/docker.sock"]


def test_host_index_reads_the_lab_name() -> None:
    """lab-h7 is host 7."""
    assert host_index("lab-h7") == 7


def test_run_logs_live_on_the_shared_data() -> None:
    """A run's logs are under the shared /data the lab stacks mount."""
    assert run_log("demo", "metrics.jsonl") == shared("logs", "demo", "metrics.jsonl")
    assert shared("logs") == LAB_ROOT / "shared" / "logs"
