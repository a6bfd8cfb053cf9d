"""Scaling benchmark: how the program's evaluation grows with hosts. The whole
`__main__.py` runs under Pulumi mocks (no engine, no hosts) for a generated
N-host prod-like stack (8 GPUs per host, 3 managers); each size runs in its own
process so its peak memory is its own. Prints a markdown table and the per-host
slope of a least-squares line through the times.

    .venv/bin/python -m bench.scale_bench [--hosts 8 64 256 1024] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import runpy
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from harness import ROOT


def known_hosts(config: dict[str, Any]) -> str:
    """A dummy key for every host: the launch's connection pins each ssh:// host's key
    from the known_hosts file while the program runs (infra/components/remote.py)."""
    return "".join(f"{h['address']} ssh-ed25519 dummy-{h['name']}\n" for h in config["hosts"])


def stack(n: int, key_file: str, known_hosts_file: str = "~/.ssh/known_hosts") -> dict[str, Any]:
    """A valid prod-like config of n hosts (3 managers, or 1 below 3 hosts)."""
    managers = 3 if n >= 3 else 1
    hosts = [
        {
            "name": f"gpu-{i:04d}",
            "address": f"10.{100 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}",
            "docker_host": f"ssh://root@gpu-{i:04d}.train.internal",
            "role": "manager" if i < managers else "worker",
            "gpus": {"count": 8, "model": "H100-SXM"},
            "nic": "ens1f0np0",
            "rdma_interface": "mlx5_0",
        }
        for i in range(n)
    ]
    return {
        "hosts": hosts,
        "network": {
            "mtu": 9000,
            "underlay_mtu": 9100,
            "subnet": "10.250.0.0/16",
            "data_plane": "host",
        },
        "image": {"registry": "registry.train.internal:5000"},
        "training": {"gpus_per_node": 8, "ds_config": "/opt/dss/ds_config.json"},
        # The launch reads the key file while the program runs (a dummy here).
        "preflight": {"ssh_private_key_file": key_file},
        # As prod: host keys checked (infra/config/rules/ssh.py), here against dummies.
        "ssh": {"known_hosts_file": known_hosts_file},
    }


def one(n: int) -> dict[str, Any]:
    """Evaluate the program once for n hosts (in this process); count resources."""
    import pulumi
    from pulumi.runtime.stack import wait_for_rpcs
    from pulumi.runtime.sync_await import _sync_await

    # The unit tests' mocks: outputs as real providers return them (roster entries
    # for every host included, so the hostfile and launch lines are rendered).
    from tests.unit.infra.samples import Mocks, set_stack_config

    mocks = Mocks()
    pulumi.runtime.set_mocks(mocks, project="deepspeed-swarm", stack="scale", preview=True)
    key = tempfile.NamedTemporaryFile("w", suffix="-dummy-key")  # noqa: SIM115  # lives for the run
    key.write("dummy")
    key.flush()
    hosts_file = tempfile.NamedTemporaryFile("w", suffix="-known-hosts")  # noqa: SIM115  # lives for the run
    hosts_file.write(known_hosts(stack(n, key.name)))
    hosts_file.flush()
    set_stack_config(stack(n, key.name, hosts_file.name))
    t0 = time.perf_counter()
    runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
    _sync_await(wait_for_rpcs())
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"hosts": n, "resources": len(mocks.resources), "seconds": seconds, "peak_mib": peak}


def measure(n: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale_bench", "--one", str(n)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.mean(xs), statistics.mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[8, 64, 256, 1024])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one)))
        return 0
    rows: list[dict[str, Any]] = []
    for n in a.hosts:
        runs = [measure(n) for _ in range(a.runs)]
        row = {
            "hosts": n,
            "resources": runs[0]["resources"],
            "seconds": statistics.median(r["seconds"] for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs),
            "runs": [r["seconds"] for r in runs],
        }
        rows.append(row)
    cmd = shlex.join(["python", "-m", "bench.scale_bench", *sys.argv[1:]])
    print(
        f"`{cmd}` (median of {a.runs} runs, Pulumi mocks, prod-like hosts with 8 GPUs; "
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores)\n"
    )
    print("| hosts | resources | evaluation (s) | runs (s) | peak RSS (MiB) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        each = ", ".join(f"{x:.2f}" for x in r["runs"])
        cells = f"{r['hosts']} | {r['resources']} | {r['seconds']:.2f} | {each}"
        print(f"| {cells} | {r['peak_mib']:.0f} |")
    if len(rows) > 1:
        hosts = [float(r["hosts"]) for r in rows]
        per_host = slope(hosts, [r["seconds"] for r in rows]) * 1000
        res = slope(hosts, [float(r["resources"]) for r in rows])
        print(f"\nslope: {per_host:.1f} ms and {res:.1f} resources per host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
