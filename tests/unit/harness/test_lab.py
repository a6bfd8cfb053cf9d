"""harness.lab: the lab as tests and benchmarks reach it (no lab needed here)."""

from __future__ import annotations

import pytest
from dss_train.checkpoints import tag_for_step

from harness.lab import (
    LAB_ROOT,
    Resume,
    docker_argv,
    host_index,
    resumes_in,
    run_log,
    shared,
    socket,
)

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


def test_resumes_are_read_from_rank_zeros_lines() -> None:
    """Each `resumed from <checkpoint>, next step N` line, in order, with the
    checkpoint's step read from the image's own folder name."""
    text = (
        "[dss-train] joined\n"
        f"[dss-train] resumed from /data/checkpoints/r/{tag_for_step(10)}, next step 11\n"
        "[rank1] noise\n"
        f"[dss-train] resumed from /data/checkpoints/r/{tag_for_step(45)}, next step 46\n"
    )
    found = resumes_in(text)
    assert [r.next_step for r in found] == [11, 46]
    assert [r.checkpoint_step for r in found] == [10, 45]


def test_a_checkpoint_folder_without_a_step_has_none() -> None:
    """A folder not named `step_<N>` gives no checkpoint step, not a wrong one."""
    assert Resume("/data/checkpoints/r/latest", 3).checkpoint_step is None
    assert resumes_in("no resume here") == []
