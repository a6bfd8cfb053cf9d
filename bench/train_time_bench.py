"""Time to train, `pulumi up` against the hand-run path, on N-host labs (issue 11,
items 1 and 2): from an empty lab (no swarm) to the first training step logged,

  (a) `pulumi up` of a stack for the N lab hosts (the real engine), then a no-op
      `pulumi preview`, a no-op `pulumi up` and `pulumi preview --refresh`;
  (b) `bench/handrun.py`'s deploy.sh (swarm init/join, labels, image, secrets,
      `docker stack deploy`, hostfile from `tasks.<service>`, `deepspeed --hostfile`),

each on a fresh lab, and prints a markdown table with the command that produced it.

    scripts/bootstrap && . scripts/env.sh && python bench/train_time_bench.py --hosts 2 4 8 --runs 2

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

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_bench as eb
import handrun

from infra.config import stack_file_yaml

ROOT = eb.ROOT
GPUS = 2


def stack_config(hosts: int, run: str) -> dict[str, Any]:
    """The dev stack's config for lab hosts 1..hosts (namespaced keys, no secrets)."""
    cfg: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    template = cfg["deepspeed-swarm:hosts"][0]
    cfg["deepspeed-swarm:hosts"] = [
        {
            **template,
            "name": f"lab-h{i}",
            "address": f"10.213.0.{10 + i}",
            "docker_host": f"unix:///var/lib/dss-lab/h{i}/docker.sock",
            "role": "manager" if i <= (3 if hosts >= 3 else 1) else "worker",
            "gpus": {"count": GPUS, "model": "fake-gpu"},
        }
        for i in range(1, hosts + 1)
    ]
    cfg["deepspeed-swarm:training"].update(run_name=run, steps=5000, checkpoint_every=1000)
    cfg.pop("deepspeed-swarm:secrets")  # encrypted for the dev stack's passphrase
    return cfg


def pulumi_run(hosts: int, tag: str) -> dict[str, float]:
    """Path (a) on a fresh lab: cold `up` to the first step, then the no-op operations."""
    stack = f"bench-h{hosts}"
    stack_file = ROOT / f"Pulumi.{stack}.yaml"
    stack_file.write_text(stack_file_yaml(stack_config(hosts, f"{tag}-pulumi")))
    eb.lab("down")
    eb.lab("up", "--hosts", str(hosts), "--gpus", str(GPUS))
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dss-bench-state-") as state:
        pulumi = eb.Pulumi(Path(state), stack)
        try:
            pulumi("stack", "init")
            pulumi("config", "set", "--secret", "--path", "secrets.wandb_api_key", "bench-dummy")
            out["cold"] = eb.timed(lambda: (pulumi("up", "--yes", "--skip-preview"),
                                            eb.first_step_logged(run=f"{tag}-pulumi")))  # fmt: skip
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
            stack_file.unlink(missing_ok=True)
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
            script = handrun.write(
                cfg, stack_file, "10.213.0.1:5000/deepspeed-swarm/handrun:latest",
                Path(tmp) / "handrun", {"wandb_api_key": "bench-dummy"},
            )  # fmt: skip

            def deploy() -> None:
                proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"deploy.sh exited {proc.returncode}:\n{proc.stdout[-2000:]}"
                                     f"\n{proc.stderr[-3000:]}")  # fmt: skip
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
            print(json.dumps({"hosts": n, "pulumi": engine[-1], "script": script[-1]}),
                  file=sys.stderr, flush=True)  # fmt: skip
        rows.append((n, engine, script))
    cmd = shlex.join(["python", "bench/train_time_bench.py", *sys.argv[1:]])
    cores = len(os.sched_getaffinity(0))
    print(f"`{cmd}` (median of {a.runs} runs, each path on a fresh lab; {GPUS} fake GPUs "
          f"and one CPU rank per host; {platform.machine()}, {cores} cores)\n")  # fmt: skip
    head = ["hosts", "`pulumi up` to first step (s)", "deploy.sh to first step (s)", "ratio",
            "no-op `preview` (s)", "no-op `up --skip-preview` (s)", "no-op `up` / cold",
            "`preview --refresh` (s)"]  # fmt: skip
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
