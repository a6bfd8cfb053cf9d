"""Time to train, `pulumi up` against the hand-run path, on N-host labs (issue 11,
items 1 and 2): from an empty lab (no swarm) to the first training step logged,

  (a) `pulumi up` of a stack for the N lab hosts (the real engine), then a no-op
      `pulumi preview`, a no-op `pulumi up` and `pulumi preview --refresh`;
  (b) `bench.handrun`'s deploy.sh (swarm init/join, labels, image, secrets,
      `docker stack deploy`, hostfile from `tasks.<service>`, `deepspeed --hostfile`),

each on a fresh lab, and prints a markdown table with the command that produced it.

    scripts/bootstrap && . scripts/env.sh && python -m bench.train_time_bench --hosts 2 4 8 --runs 2

The stack: the dev stack's config for hosts lab-h1..lab-hN (2 fake GPUs each; the
first three are managers, or the first alone under 3 hosts: Raft wants an odd
count), one rank per node (CPU, gloo), pdsh launch. Both paths build the image from
cached layers and push it to the lab's registry.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import engine_bench as eb
from bench import handrun
from harness.configs import dev_on_hosts
from infra.config import stack_file_yaml

GPUS = 2


def stack_config(hosts: int, run: str) -> dict[str, Any]:
    """The dev stack's config for lab hosts 1..hosts (namespaced keys, no secrets)."""
    return dev_on_hosts(hosts, GPUS, run_name=run, steps=5000, checkpoint_every=1000)


def pulumi_run(hosts: int, tag: str) -> dict[str, float]:
    """Path (a) on a fresh lab: cold `up` to the first step, then the no-op operations."""
    run = f"{tag}-pulumi"
    eb.lab("down")
    eb.lab("up", "--hosts", str(hosts), "--gpus", str(GPUS))
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dss-bench-state-") as state:
        stack = eb.bench_stack(f"bench-h{hosts}", Path(state), stack_config(hosts, run))
        pulumi = stack.pulumi
        try:
            stack.init(eb.SECRETS)

            def cold_up() -> None:
                pulumi("up", "--yes", "--skip-preview")
                eb.first_step_logged(run=run)

            out["cold"] = eb.timed(cold_up)
            out["preview"] = eb.timed(lambda: pulumi("preview", "--expect-no-changes"))
            # Like the cold `up`, without the preview `up` runs first by default (that
            # preview is the next column's).
            out["noop_up"] = eb.timed(
                lambda: pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")
            )
            out["preview_refresh"] = eb.timed(
                lambda: pulumi("preview", "--refresh", "--expect-no-changes")
            )
            pulumi("destroy", "--yes", "--skip-preview")
            pulumi("stack", "rm", "--yes", "--force")
        finally:
            stack.config_file.unlink(missing_ok=True)
            eb.lab("down")
    return out


def script_run(hosts: int, tag: str) -> float:
    """Path (b) on a fresh lab: deploy.sh to the first step."""
    run = f"{tag}-script"
    eb.lab("down")
    eb.lab("up", "--hosts", str(hosts), "--gpus", str(GPUS))
    try:
        with tempfile.TemporaryDirectory(prefix="dss-handrun-") as tmp:
            stack_file = Path(tmp) / "Pulumi.handrun.yaml"
            stack_file.write_text(stack_file_yaml(stack_config(hosts, run)))
            cfg = handrun.load(stack_file)
            out = Path(tmp) / "handrun"
            script = handrun.write(cfg, stack_file, handrun.IMAGE, out, eb.SECRETS)

            def deploy() -> None:
                proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(
                        f"deploy.sh exited {proc.returncode}:\n{proc.stdout[-2000:]}"
                        f"\n{proc.stderr[-3000:]}"
                    )
                eb.first_step_logged(run=run)

            return eb.timed(deploy)
    finally:
        eb.lab("down")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    if shutil.which("pulumi") is None:
        raise SystemExit("pulumi is not on PATH: run `. scripts/env.sh` (after scripts/bootstrap)")
    rows = []
    for n in a.hosts:
        engine, script = [], []
        for i in range(a.runs):
            engine.append(pulumi_run(n, f"bench-h{n}-{i}"))
            script.append(script_run(n, f"bench-h{n}-{i}"))
            # Each run as it ends: a later failure does not lose it.
            done = {"hosts": n, "pulumi": engine[-1], "script": script[-1]}
            print(json.dumps(done), file=sys.stderr, flush=True)
        rows.append((n, engine, script))
    cmd = shlex.join(["python", "-m", "bench.train_time_bench", *sys.argv[1:]])
    cores = len(os.sched_getaffinity(0))
    print(
        f"`{cmd}` (median of {a.runs} runs, each path on a fresh lab; {GPUS} fake GPUs "
        f"and one CPU rank per host; {platform.machine()}, {cores} cores)\n"
    )
    head = [
        "hosts",
        "`pulumi up` to first step (s)",
        "deploy.sh to first step (s)",
        "ratio",
        "no-op `preview` (s)",
        "no-op `up --skip-preview` (s)",
        "no-op `up` / cold",
        "`preview --refresh` (s)",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))

    def med(xs: Any) -> float:
        return float(statistics.median(list(xs)))

    def each(xs: Any) -> str:
        return ", ".join(f"{x:.0f}" for x in xs)

    for n, engine, script in rows:
        cold, hand, noop = (
            med(r["cold"] for r in engine),
            med(script),
            med(r["noop_up"] for r in engine),
        )
        cells = [
            str(n),
            f"{cold:.1f} ({each(r['cold'] for r in engine)})",
            f"{hand:.1f} ({each(script)})",
            f"{cold / hand:.2f}",
            f"{med(r['preview'] for r in engine):.1f}",
            f"{noop:.1f}",
            f"{noop / cold:.0%}",
            f"{med(r['preview_refresh'] for r in engine):.1f}",
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
