"""Engine benchmark on the dev stack (2 lab hosts x 2 fake GPUs, the real Pulumi
engine): `pulumi up` from nothing to the first training step, a no-op `preview` and
`up`, `refresh --preview-only`, `preview --refresh`, `destroy`; and the toolchain
build (cold, as recorded when it was built, and a warm re-run). Prints a markdown
table with the command that produced it.

    scripts/bootstrap && . scripts/env.sh && python bench/engine_bench.py [--runs 2]

Uses its own stack (`bench-dev`, the dev stack's config, state in a temp folder)
and brings the lab up and down itself; the image bases must exist (images/prepare).
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
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
STACK = "bench-dev"
RUN = "bench"
LAB_ROOT = Path(os.environ.get("DSS_LAB_ROOT", "/var/lib/dss-lab"))
sys.path.insert(0, str(ROOT))

from infra.config import stack_file_yaml  # noqa: E402


def timed(fn: Callable[[], object]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


class Pulumi:
    """`pulumi ... --stack <stack>` with a throwaway backend and passphrase."""

    def __init__(self, state: Path, stack: str = STACK) -> None:
        self.stack = stack
        self.env = dict(os.environ, PULUMI_BACKEND_URL=f"file://{state}",
                        PULUMI_CONFIG_PASSPHRASE="bench")  # fmt: skip

    def __call__(self, *args: str) -> None:
        argv = ["pulumi", *args, "--stack", self.stack, "--non-interactive", "--cwd", str(ROOT)]
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
                             f"\n{proc.stderr[-2000:]}")  # fmt: skip


def first_step_logged(timeout: float = 900, run: str = RUN) -> None:
    """Wait until run `run` has logged a training step on the lab's shared /data."""
    log = LAB_ROOT / "shared" / "logs" / run / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().strip():
            return
        time.sleep(0.5)
    raise SystemExit(f"no training step logged in {log} within {timeout:.0f} s")


def lab(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def one_run(state: Path) -> dict[str, float]:
    """Every operation once, on a fresh lab and a fresh stack."""
    lab("down")
    lab("up", "--hosts", "2", "--gpus", "2")
    cfg = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    cfg["deepspeed-swarm:training"].update(run_name=RUN, steps=5000)
    cfg.pop("deepspeed-swarm:secrets")  # encrypted for the dev stack's passphrase
    stack_file = ROOT / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(stack_file_yaml(cfg))
    pulumi = Pulumi(state)
    out: dict[str, float] = {}
    try:
        pulumi("stack", "init")
        pulumi("config", "set", "--secret", "--path", "secrets.wandb_api_key", "bench-dummy")
        out["up (nothing -> first training step)"] = timed(
            lambda: (pulumi("up", "--yes", "--skip-preview"), first_step_logged())
        )
        out["preview (no-op)"] = timed(lambda: pulumi("preview", "--expect-no-changes"))
        out["up (no-op)"] = timed(lambda: pulumi("up", "--yes", "--expect-no-changes"))
        # As the cold `up` above: without the preview `up` runs first by default.
        out["up --skip-preview (no-op)"] = timed(
            lambda: pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")
        )
        out["refresh --preview-only"] = timed(
            lambda: pulumi("refresh", "--preview-only", "--expect-no-changes")
        )
        out["preview --refresh"] = timed(lambda: pulumi("preview", "--refresh",
                                                        "--expect-no-changes"))  # fmt: skip
        out["destroy"] = timed(lambda: pulumi("destroy", "--yes", "--skip-preview"))
        pulumi("stack", "rm", "--yes", "--force")
    finally:
        stack_file.unlink(missing_ok=True)
        lab("down")
    return out


def toolchain_rows() -> list[tuple[str, str]]:
    """Cold build times as toolchain/build recorded them, and a warm re-run now."""
    rec = Path(os.environ["DSS_TOOLCHAIN"]) / "build-times"
    rows = []
    if rec.exists():
        times = dict(line.split() for line in rec.read_text().splitlines() if line.strip())
        total = sum(float(v) for k, v in times.items() if k != "total")
        rows.append(("toolchain/build, cold (go build per binary, recorded)",
                     ", ".join(f"{k} {v} s" for k, v in times.items() if k != "total")
                     + f"; {times.get('total', f'{total:.0f}')} s in all"))  # fmt: skip
    warm = timed(lambda: subprocess.run([str(ROOT / "toolchain" / "build")], check=True,
                                        capture_output=True))  # fmt: skip
    rows.append(("toolchain/build, warm (all present)", f"{warm:.1f} s"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    if shutil.which("pulumi") is None:
        raise SystemExit("pulumi is not on PATH: run `. scripts/env.sh` (after scripts/bootstrap)")
    runs = []
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="dss-bench-state-") as state:
            runs.append(one_run(Path(state)))
    cmd = shlex.join(["python", "bench/engine_bench.py", *sys.argv[1:]])
    print(f"`{cmd}` ({a.runs} runs; dev stack config, 2 lab hosts x 2 fake GPUs; "
          f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores)\n")  # fmt: skip
    print("| operation | median (s) | runs (s) |")
    print("| --- | --- | --- |")
    for key in runs[0]:
        xs = [r[key] for r in runs]
        print(f"| `pulumi {key}` | {statistics.median(xs):.1f} | "
              f"{', '.join(f'{x:.1f}' for x in xs)} |")  # fmt: skip
    print("\n| toolchain | time |\n| --- | --- |")
    for what, value in toolchain_rows():
        print(f"| {what} | {value} |")
    print(json.dumps({"runs": runs}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
