"""The transport benchmark (issue 45): the dev stack on N lab hosts, each host's engine
reached over its unix socket and over ssh:// (sshd at OpenSSH's default limits,
strict host keys, one shared connection per host), side by side in one run. Times a
no-op `preview` with no shared connection alive (cold: every master to start) and with
them alive (warm), a no-op `up`, and `refresh --preview-only`; counts the logins the
hosts' sshd accepted during the cold preview (every SSH handshake is one). Prints a
markdown table with the command that produced it.

    scripts/bootstrap && . scripts/env.sh && python -m bench.ssh_bench [--hosts 2 8]

Each (hosts, transport) pair gets a fresh lab (`lab up --hosts N --gpus 2`) and its own
stack (`bench-ssh`, state in a temp folder), deployed and training before anything is
timed; the lab goes down after. Host facts and the launch use SSH under both transports
(only the Docker engines' transport differs), so the unix rows also count handshakes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.engine_bench import SECRETS, bench_stack, first_step_logged, lab, timed
from harness.configs import dev_on_hosts, on_transport
from harness.sshd import end_masters, login_counts
from lab import config as c

STACK = "bench-ssh"
RUN = "benchssh"
TRANSPORTS = ("unix", "ssh")


def one_pair(hosts: int, transport: str, state: Path, repeat: int) -> dict[str, Any]:
    """Deploy on a fresh lab, then time each no-op operation `repeat` times."""
    lab("down")
    lab("up", "--hosts", str(hosts), "--gpus", "2")
    config = on_transport(dev_on_hosts(hosts, 2, run_name=RUN, steps=100000), transport)
    stack = bench_stack(STACK, state, config)
    pulumi = stack.pulumi
    out: dict[str, Any] = {}

    def preview() -> None:
        pulumi("preview", "--expect-no-changes")

    try:
        stack.init(SECRETS)
        pulumi("up", "--yes", "--skip-preview")
        first_step_logged(run=RUN)
        cold: list[float] = []
        for n in range(repeat):
            end_masters(config, range(1, hosts + 1))
            before = login_counts(hosts)
            cold.append(timed(preview))
            if n == 0:
                after = login_counts(hosts)
                out["handshakes per host, cold preview"] = [
                    a - b for a, b in zip(after, before, strict=True)
                ]
        out["preview, cold"] = cold
        before = login_counts(hosts)
        out["preview, warm"] = [timed(preview) for _ in range(repeat)]
        out["handshakes per host, warm preview"] = [
            a - b for a, b in zip(login_counts(hosts), before, strict=True)
        ]
        out["up (no-op)"] = [
            timed(lambda: pulumi("up", "--yes", "--expect-no-changes")) for _ in range(repeat)
        ]
        out["refresh --preview-only"] = [
            timed(lambda: pulumi("refresh", "--preview-only", "--expect-no-changes"))
            for _ in range(repeat)
        ]
        pulumi("stack", "rm", "--yes", "--force")
    finally:
        stack.config_file.unlink(missing_ok=True)
        lab("down")
    return out


def _cell(key: str, value: list[Any]) -> str:
    if key.startswith("handshakes"):
        return f"max {max(value)}, sum {sum(value)}"
    runs = ", ".join(f"{v:.1f}" for v in value)
    return f"{statistics.median(value):.1f} ({runs})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--repeat", type=int, default=3, help="times each operation (median)")
    a = ap.parse_args()
    for n in a.hosts:
        if not 2 <= n <= c.MAX_HOSTS:
            raise SystemExit(f"--hosts {n}; allowed: 2..{c.MAX_HOSTS}")
    results: dict[str, dict[str, Any]] = {}
    for n in a.hosts:
        for how in TRANSPORTS:
            with tempfile.TemporaryDirectory(prefix="dss-bench-state-") as state:
                results[f"{n} {how}"] = one_pair(n, how, Path(state), a.repeat)
    cmd = shlex.join(["python", "-m", "bench.ssh_bench", *sys.argv[1:]])
    print(
        f"`{cmd}` (dev stack config on N lab hosts x 2 fake GPUs, training; sshd at "
        f"OpenSSH's default limits; {platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores)\n"
    )
    keys = list(next(iter(results.values())))
    print(f"Times: median of {a.repeat} (each run), seconds; handshakes: logins the hosts'")
    print("sshd accepted during one preview, summed over hosts and the most on one.\n")
    print("| operation | " + " | ".join(f"{k}" for k in results) + " |")
    print("| --- |" + " --- |" * len(results))
    for key in keys:
        print(f"| {key} | " + " | ".join(_cell(key, r[key]) for r in results.values()) + " |")
    med = {k: {op: statistics.median(r[op]) for op in ("preview, warm", "preview, cold")}
           for k, r in results.items()}  # fmt: skip
    for n in a.hosts:
        ratio = med[f"{n} ssh"]["preview, warm"] / med[f"{n} unix"]["preview, warm"]
        cold = med[f"{n} ssh"]["preview, cold"] / med[f"{n} unix"]["preview, cold"]
        print(f"\n{n} hosts: ssh/unix preview, warm {ratio:.2f}x, cold {cold:.2f}x", end="")
    print()
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
