"""Grow and shrink a running job through its stack (issue 47, item 4), with the real
engine on the 2-host dev lab (2 hosts x 2 fake GPUs).

Job R (2 nodes x 1 GPU, the project's train.py, launch mode no_ssh so that one node is
a valid size) trains past a checkpoint; `scripts/job resize R --nodes 1` writes its
file (nodes 1, its master's host alone) and runs `up`: the worker goes, the launch
relaunches at world size 1 and train.py resumes from the checkpoint, the optimizer
state re-sharded through DeepSpeed's universal checkpoint; `job gpus` shows lab-h2
free, and the job's preview is a no-op. `resize R --nodes 2` grows it back onto lab-h2
the same way. The tests depend on this order.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import ROOT
from harness.configs import dev_config
from harness.jobs import remove_job
from harness.lab import launcher_log_since, launcher_log_size, logged_steps
from harness.stack import Pulumi, Stack
from harness.waits import wait_for
from infra.config import stack_file_values
from infra.layout import PROJECT
from jobs import command
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
