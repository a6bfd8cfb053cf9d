"""Engine benchmark on the dev stack (2 lab hosts x 2 fake GPUs, the real Pulumi
engine): `pulumi up` from nothing to the first training step, a no-op `preview` and
`up`, `refresh --preview-only`, `preview --refresh`, `destroy`; and the toolchain
build (cold, as recorded when it was built, and a warm re-run). Prints a markdown
table with the command that produced it.

    scripts/bootstrap && . scripts/env.sh && python -m bench.engine_bench [--runs 2]

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
from typing import Any

from harness import ROOT
from harness.configs import dev_config
from harness.lab import lab_cli, run_log
from harness.stack import Stack
from harness.waits import wait_for

STACK = "bench-dev"
RUN = "bench"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


SECRETS = {"wandb_api_key": "bench-dummy"}


def bench_stack(name: str, workdir: Path, config: dict[str, Any]) -> Stack:
    """A throwaway stack with its state in `workdir`, not yet initialised: commands run
    without a time limit and print nothing (stdout is the table's)."""
    return Stack(name, workdir, config, timeout=None, echo=False)


def first_step_logged(timeout: float = 900, run: str = RUN) -> None:
    """Wait until run `run` has logged a training step on the lab's shared /data."""
    log = run_log(run, "metrics.jsonl")
    wait_for(
        f"a training step logged in {log}",
        lambda: log.exists() and log.read_text().strip(),
        timeout,
        interval=0.5,
    )


def lab(*args: str) -> None:
    """`python -m lab <args>` (its stderr on the terminal)."""
    lab_cli(*args, capture=False, timeout=None)


def one_run(state: Path) -> dict[str, float]:
    """Every operation once, on a fresh lab and a fresh stack."""
    lab("down")
    lab("up", "--hosts", "2", "--gpus", "2")
    out: dict[str, float] = {}
    stack = bench_stack(STACK, state, dev_config(run_name=RUN, steps=5000))
    pulumi = stack.pulumi
    try:
        stack.init(SECRETS)

        def cold_up() -> None:
            pulumi("up", "--yes", "--skip-preview")
            first_step_logged()

        out["up (nothing -> first training step)"] = timed(cold_up)
        out["preview (no-op)"] = timed(lambda: pulumi("preview", "--expect-no-changes"))
        out["up (no-op)"] = timed(lambda: pulumi("up", "--yes", "--expect-no-changes"))
        # As the cold `up` above: without the preview `up` runs first by default.
        out["up --skip-preview (no-op)"] = timed(
            lambda: pulumi("up", "--yes", "--skip-preview", "--expect-no-changes")
        )
        out["refresh --preview-only"] = timed(
            lambda: pulumi("refresh", "--preview-only", "--expect-no-changes")
        )
        out["preview --refresh"] = timed(
            lambda: pulumi("preview", "--refresh", "--expect-no-changes")
        )
        out["destroy"] = timed(lambda: pulumi("destroy", "--yes", "--skip-preview"))
        pulumi("stack", "rm", "--yes", "--force")
    finally:
        stack.config_file.unlink(missing_ok=True)
        lab("down")
    return out


def toolchain_rows() -> list[tuple[str, str]]:
    """Cold build times as toolchain/build recorded them, and a warm re-run now."""
    rec = Path(os.environ["DSS_TOOLCHAIN"]) / "build-times"
    rows = []
    if rec.exists():
        times = dict(line.split() for line in rec.read_text().splitlines() if line.strip())
        total = sum(float(v) for k, v in times.items() if k != "total")
        each = ", ".join(f"{k} {v} s" for k, v in times.items() if k != "total")
        total_s = times.get("total", f"{total:.0f}")
        rows.append(
            ("toolchain/build, cold (go build per binary, recorded)", f"{each}; {total_s} s in all")
        )
    build = [str(ROOT / "toolchain" / "build")]
    warm = timed(lambda: subprocess.run(build, check=True, capture_output=True))
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
    cmd = shlex.join(["python", "-m", "bench.engine_bench", *sys.argv[1:]])
    print(
        f"`{cmd}` ({a.runs} runs; dev stack config, 2 lab hosts x 2 fake GPUs; "
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores)\n"
    )
    print("| operation | median (s) | runs (s) |")
    print("| --- | --- | --- |")
    for key in runs[0]:
        xs = [r[key] for r in runs]
        runs_s = ", ".join(f"{x:.1f}" for x in xs)
        print(f"| `pulumi {key}` | {statistics.median(xs):.1f} | {runs_s} |")
    print("\n| toolchain | time |\n| --- | --- |")
    for what, value in toolchain_rows():
        print(f"| {what} | {value} |")
    print(json.dumps({"runs": runs}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
