"""Lab benchmark: `lab up --swarm` and `lab down` wall time for 2 and 8 hosts, and the memory
(RSS of dockerd + containerd + sshd) each lab host costs. Prints a markdown table.

    sudo .venv/bin/python -m bench.lab_bench [--hosts 2 8] [--gpus 8] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

from harness.lab import lab_cli
from lab import config as c
from lab import sysops as s

DAEMONS = ("dockerd", "containerd", "sshd")


def _cli(*args: str) -> float:
    """Seconds `python -m lab <args>` took."""
    t0 = time.monotonic()
    lab_cli(*args, capture=False, timeout=None)
    return time.monotonic() - t0


def _runs(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} (runs: {', '.join(f'{x:.1f}' for x in xs)})"


def _host_rss_mib(i: int) -> float:
    """RSS of the daemons in host i's own cgroup (containers live in child cgroups)."""
    procs = Path("/sys/fs/cgroup/pids") / c.cgroup_name(i) / "cgroup.procs"
    pids = [int(x) for x in procs.read_text().split()]
    return sum(s.rss_kib(p) for p in pids if s.comm(p) in DAEMONS) / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    _cli("down")
    rows = []
    for n in a.hosts:
        ups, downs, mems = [], [], []
        for _ in range(a.runs):
            ups.append(_cli("up", "--hosts", str(n), "--gpus", str(a.gpus), "--swarm"))
            time.sleep(2)  # let the daemons settle before reading RSS
            mems.append(statistics.mean(_host_rss_mib(i) for i in range(1, n + 1)))
            downs.append(_cli("down"))
        rows.append((n, ups, downs, mems))
    cmd = shlex.join(["python", "-m", "bench.lab_bench", *sys.argv[1:]])
    print(
        f"`{cmd}` ({a.runs} runs each, {a.gpus} fake GPUs/host; "
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores)\n"
    )
    print(
        "| hosts | lab up --swarm (s) | lab down (s) | RSS dockerd+containerd+sshd per host (MiB) |"
    )
    print("| --- | --- | --- | --- |")
    for n, ups, downs, mems in rows:
        print(f"| {n} | {_runs(ups)} | {_runs(downs)} | {statistics.mean(mems):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
