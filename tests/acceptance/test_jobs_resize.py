"""Grow and shrink a running job through its stack (issue 47, item 4), with the real
engine on the 2-host dev lab (2 hosts x 2 fake GPUs).

Job R (2 nodes x 1 GPU, the project's train.py, launch mode no_ssh so that one node is
a valid size) trains past a checkpoint; `scripts/job resize R --nodes 1` writes its
file (nodes 1, its master's host alone) and runs `up`: the worker goes, the launch
relaunches at world size 1 and train.py resumes from the checkpoint, the optimizer
state re-sharded through DeepSpeed's universal checkpoint; `job gpus` shows lab-h2
free, and the job's preview is a no-op. `resize R --nodes 2` grows it back onto lab-h2
the same way. The tests depend on this order.

Then job T, the DeepSpeed tutorial as a user brings it (examples/deepspeed-tutorial:
its own command, ZeRO stage 2, its own save_checkpoint/load_checkpoint), 1 x 1 beside
R: `resize T --nodes 2` is refused, naming the ds_config's key (DeepSpeed would not
load its ZeRO checkpoint at world size 2), and nothing changes. Its ds_config given
`"checkpoint": {"load_universal": true}` and T submitted again as it is (the refusal's
way out), the resize goes through: the supervisor makes the newest checkpoint
universal before the start (infra/task/universal.py) and the script, unchanged,
resumes from it at world size 2. (A grow: a shrink of an SSH-less command job leaves
the run's stop marker set by the removed node's stop, which its `up` runs after the
new launch; docs/jobs.md, "Resizing a job".)
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import ROOT
from harness.configs import dev_config
from harness.jobs import remove_job
from harness.lab import launcher_log_since, launcher_log_size, logged_steps, shared
from harness.stack import Pulumi, Stack
from harness.waits import wait_for
from infra.config import stack_file_values
from infra.layout import PROJECT
from jobs import command
from tests.acceptance.conftest import (
    TUTORIAL_COMMAND,
    TUTORIAL_SAVE_EVERY,
    TUTORIAL_STEP,
    clear_job_files,
    tutorial_copy,
)
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

CLUSTER = "test-resize-cluster"
JOB = "test-resize"
SECRET = "wandb-resize-7c41d2"
EVERY = 10
"""Checkpoint interval (steps)."""


@pytest.fixture(scope="module")
def cluster(lab: dict[str, Any], make_stack: MakeStack) -> Stack:
    """The dev lab as a cluster stack (no run of its own)."""
    config = dev_config(steps=100000, checkpoint_every=EVERY)
    config[f"{PROJECT}:kind"] = "cluster"
    s = make_stack(CLUSTER, config, {"wandb_api_key": SECRET})
    s.pulumi("up", "--yes", "--skip-preview")
    return s


@pytest.fixture(scope="module")
def job(cluster: Stack, code: Path) -> Iterator[Pulumi]:
    """R submitted on both hosts and trained past its first checkpoint; removed
    afterwards in any case."""
    spec = command.JobSpec(name=JOB, cluster=CLUSTER, code_dir=code, steps=100000,
                           checkpoint_every=EVERY, nodes=2, gpus_per_node=1,
                           extra={"launch_mode": "no_ssh"})  # fmt: skip
    try:
        command.submit(spec, env=cluster.env, out=cluster.record)
        wait_for("R past its first checkpoint",
                 lambda: max(logged_steps(JOB), default=0) > EVERY + 2, 900, 2)  # fmt: skip
        yield Pulumi(JOB, env=cluster.env)
    finally:
        remove_job(cluster, JOB)


def _cli(cluster: Stack, *args: str) -> str:
    """`scripts/job <args>` as a person runs it; its stdout. It must exit 0."""
    proc = subprocess.run([str(ROOT / "scripts" / "job"), *args], env=cluster.env,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    cluster.record(proc.stdout, proc.stderr)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def _resized(
    cluster: Stack, job: Pulumi, nodes: int, before: int, report: dict[str, str]
) -> list[str]:
    """Resize R to `nodes` and wait until it trains past its resume at world size
    `nodes`, re-sharded from `before`; the rank map's hosts. Fills the report's row."""
    offset = launcher_log_size(JOB)
    t0 = time.monotonic()
    said = _cli(cluster, "resize", JOB, "--nodes", str(nodes))
    resize_s = time.monotonic() - t0
    assert f"{before} -> {nodes} node(s)" in said, said
    line = (f"world size changed {before} -> {nodes}: weights resumed, optimizer state "
            "re-sharded (universal checkpoint)")  # fmt: skip
    wait_for(f"R resumed at world size {nodes}",
             lambda: line in launcher_log_since(JOB, offset), 900, 2)  # fmt: skip
    resumed = max(logged_steps(JOB), default=0)
    wait_for("a step after the resume", lambda: max(logged_steps(JOB)) > resumed, 600, 2)
    step_s = time.monotonic() - t0
    training = stack_file_values(command.stack_file(JOB).read_text())["training"]
    assert training["nodes"] == nodes and len(training["hosts"]) == nodes, training
    outputs = json.loads(job.run("stack", "output", "--json").stdout)
    hosts = sorted({e["node"] for e in outputs["rankMap"]})
    assert hosts == sorted(training["hosts"]), (hosts, training)
    job.run("preview", "--expect-no-changes")
    report["figure"] = (
        f"{before} -> {nodes} node(s) on {', '.join(hosts)}: resize exited in {resize_s:.0f} s, "
        f"first step after the re-sharded resume {step_s:.0f} s after it began; preview no-op"
    )
    report["command"] = f"scripts/job resize {JOB} --nodes {nodes}"
    return hosts


def _held(cluster: Stack) -> list[str]:
    """The hosts `job gpus` names R's tasks on."""
    rows = _cli(cluster, "gpus", CLUSTER).splitlines()[1:]
    return sorted(r.split()[0] for r in rows if f"job {JOB}:" in r)


def test_shrink_resumes_on_the_master_alone(
    cluster: Stack, job: Pulumi, report: dict[str, str]
) -> None:
    """2 -> 1 node: the master's host alone, resumed from the checkpoint, re-sharded."""
    assert _resized(cluster, job, 1, 2, report) == ["lab-h1"]
    assert _held(cluster) == ["lab-h1"]


def test_grow_resumes_on_both_hosts(cluster: Stack, job: Pulumi, report: dict[str, str]) -> None:
    """1 -> 2 nodes: lab-h2 added (its GPU free), resumed from the checkpoint, re-sharded."""
    assert _resized(cluster, job, 2, 1, report) == ["lab-h1", "lab-h2"]
    assert _held(cluster) == ["lab-h1", "lab-h2"]


TUTORIAL_JOB = "test-resize-tut"


def _tutorial(cluster: Stack, code: Path) -> None:
    """Submit T (the tutorial in `code`, 1 x 1 beside R, SSH-less so that one node is
    a valid size)."""
    spec = command.JobSpec(name=TUTORIAL_JOB, cluster=CLUSTER, code_dir=code, nodes=1,
                           gpus_per_node=1, command=TUTORIAL_COMMAND,
                           extra={"launch_mode": "no_ssh"})  # fmt: skip
    command.submit(spec, env=cluster.env, out=cluster.record)


def _saved(job: str) -> int:
    """The step of job `job`'s newest checkpoint as its `latest` names it (0: none)."""
    latest = shared("checkpoints", job, "latest")
    text = latest.read_text().strip() if latest.exists() else ""
    return int(text.removeprefix("global_step")) if text else 0


def test_a_users_zero_script_resizes_once_it_loads_universal_checkpoints(
    cluster: Stack, tmp_path_factory: pytest.TempPathFactory, report: dict[str, str]
) -> None:
    """T refused a resize while its config would make DeepSpeed refuse the checkpoint;
    resized once the config loads universal checkpoints, resumed at world size 2."""
    code = tutorial_copy(tmp_path_factory)
    clear_job_files(TUTORIAL_JOB)
    try:
        _tutorial(cluster, code)
        wait_for("T's first checkpoint", lambda: _saved(TUTORIAL_JOB) or None, 900, 2)
        before = command.stack_file(TUTORIAL_JOB).read_text()
        proc = subprocess.run(
            [str(ROOT / "scripts" / "job"), "resize", TUTORIAL_JOB, "--nodes", "2"],
            env=cluster.env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        cluster.record(proc.stdout, proc.stderr)
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "key zero_optimization.stage: 2 partitions the optimizer state" in proc.stderr
        assert command.stack_file(TUTORIAL_JOB).read_text() == before
        config = json.loads((code / "ds_config.json").read_text())
        config["checkpoint"] = {"load_universal": True}
        (code / "ds_config.json").write_text(json.dumps(config, indent=2))
        saved = _saved(TUTORIAL_JOB)
        _tutorial(cluster, code)  # as it is: its code changed, so its run relaunches
        wait_for("T saving after the relaunch", lambda: _saved(TUTORIAL_JOB) > saved, 900, 2)
        offset = launcher_log_size(TUTORIAL_JOB)
        t0 = time.monotonic()
        said = _cli(cluster, "resize", TUTORIAL_JOB, "--nodes", "2")
        assert "1 -> 2 node(s)" in said, said
        resumed = re.compile(r"resumed at step (\d+) from \S+/global_step(\d+)_universal/")
        found = wait_for("T resumed at world size 2 from a universal checkpoint",
                         lambda: resumed.search(launcher_log_since(TUTORIAL_JOB, offset)),
                         900, 2)  # fmt: skip
        step = int(found[1])
        assert int(found[2]) == step and step % TUTORIAL_SAVE_EVERY == 0, found[0]

        def after() -> bool:
            return max(_steps_since(TUTORIAL_JOB, offset), default=0) > step

        wait_for("T's step after the resume", after, 600, 2)
        step_s = time.monotonic() - t0
        log = launcher_log_since(TUTORIAL_JOB, offset)
        assert f"universal: global_step{step} converted" in log, log[-3000:]
        try:
            Pulumi(TUTORIAL_JOB, env=cluster.env).run("preview", "--expect-no-changes")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_evidence(TUTORIAL_JOB, offset)}") from None
    finally:
        remove_job(cluster, TUTORIAL_JOB)
    report["figure"] = (
        f"the tutorial (ZeRO 2) 1 -> 2 node(s): refused as it came; with load_universal, "
        f"resumed at step {step} from global_step{step}_universal, first step after it "
        f"{step_s:.0f} s after the resize began; preview no-op"
    )
    report["command"] = f"scripts/job resize {TUTORIAL_JOB} --nodes 2 (before and after)"


def _steps_since(job: str, offset: int) -> list[int]:
    """The tutorial's steps in job `job`'s launcher log after byte `offset`."""
    return [int(m) for m in TUTORIAL_STEP.findall(launcher_log_since(job, offset))]


def _evidence(job: str, offset: int) -> str:
    """What the run left on the data dir since byte `offset` of its launcher log: the
    log's tail and its exit records (why a preview found the run failed)."""
    logs = shared("logs", job)
    records = {p.name: p.read_text() for p in sorted(logs.glob("exit.*.json"))}
    return (
        f"exit records: {records}\nlauncher.log since:\n{launcher_log_since(job, offset)[-4000:]}"
    )
