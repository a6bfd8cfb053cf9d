"""Edit to first step: one line of `train.py` changed, then `pulumi up`, until the run
logs its first step on the new code. Today's path (the image's own code: a new image,
every training service rolled, the tasks replaced) and synced code
(`training.code.dir`: the new version copied to the data dir, the launch alone
restarted in the same tasks), and a job on a cluster stack changed and submitted
again with the job command (`scripts/job submit`, docs/jobs.md), side by side in one
run on one lab.

    scripts/bootstrap && . scripts/env.sh && python -m bench.edit_bench [--stack dev|lab8]
        [--paths image,code,targeted,forked,job,job-forked]

`dev`: 2 lab hosts x 2 fake GPUs; `lab8`: the 9-host lab (8 training hosts and a spare).
Uses its own stack (`bench-edit`, the stack's config, state in a temp folder) and
brings the lab up and down itself; the image bases must exist (images/prepare). The
job path comes last, on the same lab: the single stack becomes a cluster stack
(`kind: cluster`, the documented migration: the run is deleted, the swarm, image,
overlay and secrets stay) and a job (`bench-edit-job`) is submitted on it; with
`--paths job` alone, a cluster stack (`bench-edit-cluster`) is made for it. `forked`
and `job-forked` are `code` and `job` with the fork server (`training.fork_server`,
docs/code.md): turned on, one launch warms the servers, then the line is changed. Every path
resumes from the run's newest checkpoint, so the figure is the time to the first new
step, not a cold start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.engine_bench import SECRETS, bench_stack, lab
from harness import ROOT, image_code
from harness.configs import committed
from harness.lab import logged_steps, resumes_in, run_log, service_versions
from harness.stack import Stack
from harness.waits import wait_for
from jobs.command import JobSpec, stack_file, submit
from jobs.teardown import remove

STACK = "bench-edit"
RUN = "edit"
CLUSTER, JOB = "bench-edit-cluster", "bench-edit-job"
PATHS = ("image", "code", "targeted", "forked", "job", "job-forked")
LABS = {"dev": ("2", "2"), "lab8": ("9", "8")}
"""Stack -> (`lab up --hosts`, `--gpus`)."""
IMPORT = "from dss_train.main import main"


def edit(train_py: Path, mark: str) -> None:
    """The one-line change: train.py prints `mark` as it starts."""
    text = train_py.read_text()
    train_py.write_text(text.replace(IMPORT, f"print({mark!r}, flush=True)\n{IMPORT}", 1))


def log_size(run: str = RUN) -> int:
    log = run_log(run, "launcher.log")
    return log.stat().st_size if log.exists() else 0


def first_new_step(offset: int, mark: str, timeout: float = 1200, run: str = RUN) -> int:
    """Wait for the new code's start (`mark` in launcher.log after `offset`), its
    resume, and the first step it logs; that step."""

    def resumed() -> int | None:
        text = run_log(run, "launcher.log").read_bytes()[offset:].decode(errors="replace")
        if mark not in text:
            return None
        found = resumes_in(text[text.index(mark) :])
        return found[0].next_step if found else None

    step = int(wait_for("the new code's resume", resumed, timeout, 0.5))
    wait_for(f"step {step} logged", lambda: step in logged_steps(run), timeout, 0.5)
    return step


def targets(stack: Stack) -> list[str]:
    """`--target` flags for the code's resources alone: its copy, the launch, the run's
    record (what a code change previews; docs/code.md)."""
    launch = f"urn:pulumi:{stack.name}::deepspeed-swarm::deepspeed-swarm:launch:TrainingLaunch"
    dynamic = "pulumi-python:dynamic:Resource"
    urns = [
        f"{launch}$deepspeed-swarm:code:TrainingCode${dynamic}::{stack.name}-launch-code-sync",
        f"{launch}$command:remote:Command::{stack.name}-launch-run",
        f"{launch}${dynamic}::{stack.name}-launch-run-state",
    ]
    return [arg for urn in urns for arg in ("--target", urn)]


def timed_change(
    train_py: Path, mark: str, apply: Callable[[], object], run: str = RUN
) -> dict[str, Any]:
    """Edit `train_py`, `apply` the change (an `up`, a job's submit), first new step of
    run `run`: seconds to `apply`'s return and to the step, and which services Swarm
    rolled."""
    before, offset = service_versions(), log_size(run)
    edit(train_py, mark)
    t0 = time.monotonic()
    apply()
    up_s = time.monotonic() - t0
    step = first_new_step(offset, mark, run=run)
    step_s = time.monotonic() - t0
    after = service_versions()
    rolled = sorted(n for n in after if after[n] != before.get(n))
    return {"up_s": up_s, "step_s": step_s, "step": step, "rolled": rolled}


def measure(stack: Stack, train_py: Path, mark: str, *up_args: str) -> dict[str, Any]:
    """The change by `pulumi up` on a single stack (`timed_change`)."""
    return timed_change(
        train_py, mark, lambda: stack.pulumi("up", "--yes", "--skip-preview", *up_args)
    )


def record(out: dict[str, dict[str, Any]], path: str, m: dict[str, Any]) -> None:
    """Keep one path's figures, and print them at once (stderr): a later path that
    fails does not lose them."""
    out[path] = m
    print(json.dumps({path: m}), file=sys.stderr, flush=True)


STEP_LINE = re.compile(
    r"\b(creating|created|updating|updated|deleting|deleted|replacing|replaced)\b"
)
"""The engine's lines that start or end a resource's step, in `submit`'s output."""


def measure_job(cluster: Stack, spec: JobSpec, mark: str) -> dict[str, Any]:
    """The change by the job command's submit again (`timed_change`), with where its time
    went: the engine's step lines, each with the seconds since submit started (`steps`)."""
    t0 = time.monotonic()
    steps: list[tuple[float, str]] = []

    def out(line: str) -> None:
        if STEP_LINE.search(line):
            steps.append((round(time.monotonic() - t0, 1), " ".join(line.split())))

    def apply() -> None:
        nonlocal t0
        t0 = time.monotonic()
        submit(spec, env=cluster.env, out=out)

    m = timed_change(spec.code_dir / "train.py", mark, apply, run=spec.name)
    return {**m, "steps": steps}


def job_path(cluster: Stack, work: Path, fork_server: bool = False) -> dict[str, Any]:
    """A job on the cluster stack `cluster` (up), training synced code, one line changed
    and submitted again; the job removed afterwards. `fork_server`: the job submitted
    with `--fork-server` (its first launch warms the servers)."""
    name = f"{JOB}-forked" if fork_server else JOB
    code = image_code(work / f"{name}-code")
    spec = JobSpec(
        name=name, cluster=cluster.name, code_dir=code, steps=100000, fork_server=fork_server
    )
    try:
        submit(spec, env=cluster.env, out=lambda _: None)
        wait_for("three logged steps", lambda: len(logged_steps(name)) >= 3, 1200, 2)
        m = measure_job(cluster, spec, "dss-bench: job v2")
        remove(name, env=cluster.env, out=lambda _: None)
    finally:
        stack_file(name).unlink(missing_ok=True)
    return m


def job_paths(
    cluster: Stack, work: Path, paths: Sequence[str], out: dict[str, dict[str, Any]]
) -> None:
    """The job paths asked for, one job after another on the cluster stack."""
    for path in [p for p in paths if p.startswith("job")]:
        record(out, path, job_path(cluster, work, fork_server=path == "job-forked"))


def fresh_cluster(
    state: Path, work: Path, config: dict[str, Any], paths: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The job paths alone: a cluster stack made on the lab for them, destroyed after."""
    out: dict[str, dict[str, Any]] = {}
    cluster = bench_stack(CLUSTER, state, {**config, "deepspeed-swarm:kind": "cluster"})
    try:
        cluster.init(SECRETS)
        cluster.pulumi("up", "--yes", "--skip-preview")
        job_paths(cluster, work, paths, out)
        cluster.pulumi("destroy", "--yes", "--skip-preview")
        cluster.pulumi("stack", "rm", "--yes", "--force")
    finally:
        cluster.config_file.unlink(missing_ok=True)
    return out


def one_run(
    state: Path, work: Path, stack_name: str, paths: Sequence[str]
) -> dict[str, dict[str, Any]]:
    hosts, gpus = LABS[stack_name]
    lab("down")
    lab("up", "--hosts", hosts, "--gpus", gpus)
    ctx = work / "images"
    shutil.copytree(ROOT / "images", ctx, ignore=shutil.ignore_patterns("__pycache__"))
    code = work / "code"
    code.mkdir()
    config = committed(stack_name, run_name=RUN, steps=100000, checkpoint_every=5)
    config["deepspeed-swarm:image"] = {**config["deepspeed-swarm:image"], "context": str(ctx)}
    stack = bench_stack(STACK, state, config)
    out: dict[str, dict[str, Any]] = {}
    single = [p for p in paths if not p.startswith("job")]
    try:
        if not single:
            return fresh_cluster(state, work, config, paths)
        stack.init(SECRETS)
        stack.pulumi("up", "--yes", "--skip-preview")
        wait_for("three logged steps", lambda: len(logged_steps(RUN)) >= 3, 1200, 2)
        if "image" in paths:
            record(out, "image", measure(stack, ctx / "train.py", "dss-bench: image v2"))
        # Switch the run to synced code (the image's, as it is now), then change it.
        shutil.copy(ctx / "train.py", code / "train.py")
        shutil.copytree(ctx / "dss_train", code / "dss_train")
        stack.pulumi("config", "set", "--path", "training.code.dir", str(code))
        stack.pulumi("config", "set", "--path", "training.script", "train.py")
        if {"code", "targeted", "forked"} & set(paths):
            offset = log_size()
            stack.pulumi("up", "--yes", "--skip-preview")
            first_new_step(offset, "dss-bench: image v2" if "image" in paths else "")
        if "code" in paths:
            record(out, "code", measure(stack, code / "train.py", "dss-bench: code v3"))
        if "targeted" in paths:
            # The same change with the engine told which resources it touches: the other
            # resources' diffs (the per-host preflight over SSH among them) are skipped.
            targeted = measure(stack, code / "train.py", "dss-bench: code v4", *targets(stack))
            record(out, "targeted", targeted)
            # The targeted `up` left nothing behind: a full preview proposes nothing.
            stack.pulumi("preview", "--expect-no-changes")
        if "forked" in paths:
            # The fork server on: its launch (a relaunch) starts the servers, warm after.
            stack.pulumi("config", "set", "--path", "training.fork_server", "true")
            offset = log_size()
            stack.pulumi("up", "--yes", "--skip-preview")
            first_new_step(offset, "")
            record(out, "forked", measure(stack, code / "train.py", "dss-bench: code v5"))
            stack.pulumi("config", "set", "--path", "training.fork_server", "false")
        if any(p.startswith("job") for p in paths):
            # The single stack becomes the cluster (docs/jobs.md, "Migrating a single
            # stack"): its run is deleted, its swarm, image, overlay and secrets stay.
            stack.pulumi("config", "set", "kind", "cluster")
            stack.pulumi("up", "--yes", "--skip-preview")
            job_paths(stack, work, paths, out)
        stack.pulumi("destroy", "--yes", "--skip-preview")
        stack.pulumi("stack", "rm", "--yes", "--force")
    finally:
        stack.config_file.unlink(missing_ok=True)
        lab("down")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stack", choices=sorted(LABS), default="dev")
    ap.add_argument("--paths", default=",".join(PATHS), help="a comma list of " + ", ".join(PATHS))
    a = ap.parse_args()
    paths = [p for p in a.paths.split(",") if p]
    if not paths or set(paths) - set(PATHS):
        raise SystemExit(f"--paths {a.paths!r}; allowed: a comma list of {', '.join(PATHS)}")
    if shutil.which("pulumi") is None:
        raise SystemExit("pulumi is not on PATH: run `. scripts/env.sh` (after scripts/bootstrap)")
    with tempfile.TemporaryDirectory(prefix="dss-bench-edit-") as tmp:
        (Path(tmp) / "state").mkdir()
        r = one_run(Path(tmp) / "state", Path(tmp), a.stack, paths)
    cmd = shlex.join(["python", "-m", "bench.edit_bench", *sys.argv[1:]])
    hosts, gpus = LABS[a.stack]
    print(
        f"`{cmd}` ({a.stack} stack config, {hosts} lab hosts x {gpus} fake GPUs; "
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores)\n"
    )
    print("| one line of train.py changed | `up` exits (s) | first new step (s) | rolled |")
    print("| --- | --- | --- | --- |")
    rows = {
        "image": "today: the image's code (new image, services rolled)",
        "code": "`training.code.dir` (code copied, launch restarted)",
        "targeted": "same, `up --target` the code, launch and run record only",
        "forked": "same, with the fork server (`training.fork_server`, servers warm)",
        "job": "a job stack: `scripts/job submit` again (code copied, launch restarted)",
        "job-forked": "same, the job submitted with `--fork-server` (servers warm)",
    }
    for key, what in rows.items():
        if key not in r:
            continue
        m = r[key]
        rolled = ", ".join(m["rolled"]) or "none"
        print(f"| {what} | {m['up_s']:.1f} | {m['step_s']:.1f} | {rolled} |")
    for key in ("job", "job-forked"):
        if r.get(key, {}).get("steps"):
            print(f"\nThe {key} submit, step by step (seconds since it started, the engine's "
                  "lines):\n")  # fmt: skip
            for at, line in r[key]["steps"]:
                print(f"    {at:6.1f}  {line}")
    print(json.dumps(r), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
