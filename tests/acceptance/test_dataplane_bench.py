"""bench.dataplane_bench: a smoke run with --quick (2 lab hosts, 1 MB, one round); the
full numbers are in docs/benchmarks.md. It starts and takes down its own lab.

Part of scripts/acceptance, not of scripts/test: it checks a benchmark, not the program
(whose data planes tests/acceptance/test_dataplane_dev.py covers), and its minutes (about 8
with the training rows) keep the CI run under its 60-minute budget."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import ROOT

pytestmark = [pytest.mark.acceptance, pytest.mark.lab, pytest.mark.timeout(900)]

NETWORKS = (
    "overlay MTU 9000",
    "overlay MTU 1500",
    "host network",
    "task, overlay 9000",
    "task, host data plane",
)


def _tables(text: str) -> list[dict[str, list[str]]]:
    """Each table's rows by their first cell (header and separator rows included), in
    the order printed: TCP, all-reduce, training."""
    tables: list[dict[str, list[str]]] = []
    for block in text.split("\n\n"):
        rows = {
            cells[0]: cells[1:]
            for line in block.splitlines()
            if line.startswith("| ")
            for cells in [[x.strip() for x in line.strip().strip("|").split("|")]]
        }
        if rows:
            tables.append(rows)
    return tables


def test_dataplane_bench_quick() -> None:
    """TCP, a 2-rank gloo all-reduce and 2-rank DeepSpeed training run over both overlays
    and host networking, in containers and in Swarm tasks (the overlay and the host data
    plane), with the MTUs the networks promise, positive rates, and the lab left down."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    argv = [sys.executable, "-m", "bench.dataplane_bench", "--quick"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=840, cwd=ROOT)
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    tcp, allreduce, train = _tables(proc.stdout)
    mtus = {net: int(tcp[net][0]) for net in NETWORKS}
    assert mtus == dict(zip(NETWORKS, (8950, 1450, 9100, 8950, 9100), strict=True)), proc.stdout
    for net in NETWORKS:
        assert float(tcp[net][1]) > 0, f"{net}: no TCP throughput\n{proc.stdout}"
    gloo = allreduce["1 MB"]
    # iters, one cell per network, one ratio to host-to-host per other network
    assert len(gloo) == 1 + len(NETWORKS) + len(NETWORKS) - 1, proc.stdout
    assert all(float(cell.split()[0]) > 0 for cell in gloo[1 : 1 + len(NETWORKS)]), proc.stdout
    assert all(cell.endswith("%") for cell in gloo[1 + len(NETWORKS) :]), proc.stdout
    # The training rows: the interface the ranks used, "eth0 (8950)", with the MTU of
    # the network, then samples/s above zero.
    used = {net: int(train[net][0].rsplit("(", 1)[1].rstrip(")")) for net in NETWORKS}
    assert used == mtus, proc.stdout
    assert all(float(train[net][1]) > 0 for net in NETWORKS), proc.stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "dsslab-" not in netns, f"lab left up: {netns}"
