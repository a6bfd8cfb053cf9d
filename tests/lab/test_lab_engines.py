"""The lab runs a chosen docker engine: engine 28 (sid's docker.io 28.5.2) as a swarm."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness.waits import wait_for
from infra import layout
from lab import config as c
from lab import engines
from lab.down import down
from lab.engine_install import is_installed
from tests.lab.conftest import Lab, _require_root, start_lab

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]

ENGINE = engines.get("28")
HOSTS = 2
GPUS = 2


@pytest.fixture(scope="module")
def lab28() -> Iterator[Lab]:
    """A 2-host swarm on engine 28, 2 fake GPUs each; always torn down."""
    _require_root()
    # scripts/bootstrap installs it (scripts/install-engines): missing is a failure.
    assert is_installed(ENGINE), "engine 28 is not installed: run scripts/install-engines"
    root = c.lab_root()
    try:
        yield start_lab(HOSTS, GPUS, c.DEFAULT_MTU, engine=ENGINE.name)
    finally:
        problems = down(root)
        assert not problems, f"lab down left: {problems}"


def _server(lab: Lab, i: int) -> dict[str, Any]:
    p = lab.docker(i, "version", "--format", "{{json .Server}}")
    out = json.loads(p.stdout)
    assert isinstance(out, dict)
    return out


def test_every_host_runs_engine_28(lab28: Lab) -> None:
    """`docker version` of each host reports 28.5.2 with sid's containerd and runc."""
    for i in range(1, lab28.hosts + 1):
        srv = _server(lab28, i)
        assert srv["Version"].startswith(ENGINE.version), f"{c.host_name(i)}: {srv['Version']}"
        parts = {k["Name"]: k["Version"] for k in srv.get("Components") or []}
        assert parts.get("containerd", "").startswith("2.1.9"), f"{c.host_name(i)}: {parts}"
        assert parts.get("runc", "").startswith("1.3.6"), f"{c.host_name(i)}: {parts}"


def test_status_json_names_the_engine(lab28: Lab) -> None:
    """`lab status --json` reports engine 28 and the daemons' own version."""
    p = subprocess.run(
        [sys.executable, "-m", "lab", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, f"lab status failed: {p.stderr}"
    st = json.loads(p.stdout)
    assert st["engine"] == "28", f"status names engine {st['engine']!r}"
    assert [v[: len(ENGINE.version)] for v in st["server_versions"]] == [ENGINE.version], (
        f"daemons report {st['server_versions']}"
    )


def _running_tasks(lab: Lab, svc: str) -> list[dict[str, Any]]:
    ids = lab.docker(1, "service", "ps", svc, "-q", "--no-trunc").stdout.split()
    if not ids:
        return []
    tasks = json.loads(lab.docker(1, "inspect", *ids).stdout)
    return [t for t in tasks if t["Status"]["State"] == "running"]


def _gpu_service_on_every_node(lab28: Lab, svc: str, *net: str) -> None:
    """A service reserving all of a node's fake GPUs, one task per node: each runs and
    gets exactly its node's GPU UUIDs."""
    lab28.docker(
        1,
        "service",
        "create",
        "-d",
        "--name",
        svc,
        "--endpoint-mode",
        "dnsrr",
        *net,
        "--replicas",
        str(lab28.hosts),
        "--replicas-max-per-node",
        "1",
        "--generic-resource",
        f"{layout.GPU_RESOURCE}={lab28.gpus}",
        lab28.image,
        "sleep",
        "3600",
    )
    try:

        def all_running() -> list[dict[str, Any]] | None:
            running = _running_tasks(lab28, svc)
            return running if len(running) == lab28.hosts else None

        tasks = wait_for(f"{lab28.hosts} running tasks of {svc}", all_running, 90, interval=0.5)
        nodes = {
            n["ID"]: n["Description"]["Hostname"]
            for n in json.loads(
                lab28.docker(1, "node", "inspect", *{t["NodeID"] for t in tasks}).stdout
            )
        }
        assert sorted(nodes.values()) == [c.host_name(i) for i in range(1, lab28.hosts + 1)]
        for t in tasks:
            host = nodes[t["NodeID"]]
            i = int(host.removeprefix("lab-h"))
            cid = t["Status"]["ContainerStatus"]["ContainerID"]
            env = json.loads(
                lab28.docker(i, "inspect", "--format", "{{json .Config.Env}}", cid).stdout
            )
            key = f"DOCKER_RESOURCE_{layout.GPU_RESOURCE}="
            got: list[str] = next(
                (e.removeprefix(key).split(",") for e in env if e.startswith(key)), []
            )
            assert sorted(got) == sorted(c.gpu_uuids(i, lab28.gpus)), f"{host} got GPUs {got}"
    finally:
        lab28.docker(1, "service", "rm", svc, check=False)


def test_gpu_service_runs_on_every_node(lab28: Lab) -> None:
    """A service reserving every fake GPU of a node runs one task on each node with its GPUs."""
    _gpu_service_on_every_node(lab28, "gpu-every-node")


def test_gpu_service_on_a_fresh_overlay_needs_no_warmup(lab28: Lab) -> None:
    """On 28 GPU tasks that are the first on their nodes to use a new overlay run; 20.10
    rejects them for good (the reason for infra's `ds-net-warmup` service)."""
    net = "ov-fresh"
    lab28.docker(1, "network", "create", "-d", "overlay", "--attachable", net)
    try:
        _gpu_service_on_every_node(lab28, "gpu-fresh-overlay", "--network", net)
    finally:
        wait_for(
            f"network {net} to be removable",
            lambda: lab28.docker(1, "network", "rm", net, check=False).returncode == 0,
            30,
            interval=0.5,
        )
