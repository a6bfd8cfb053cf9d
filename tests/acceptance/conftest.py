"""Acceptance on eight hosts (issue 8): the 9-host lab, the `lab8` stack's config
under a throwaway stack, the real engine, and a results table (report.py).

The fixtures reuse the engine suite's (tests/engine/conftest.py): the pinned
engine check, throwaway stacks that are destroyed and removed afterwards.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import ROOT
from harness.jobs import remove_job
from harness.lab import docker, host_index, lab_cli, lab_status, shared
from harness.stack import Stack
from tests.acceptance.report import RESULTS, Row, record
from tests.engine.conftest import MakeStack, code, engine, lab, make_stack, monitoring_images

__all__ = ["code", "engine", "lab", "make_stack", "monitoring_images"]
"""The engine suite's fixtures, found by pytest by name."""

HOSTS = 9
"""lab-h1..h9: eight training hosts and the spare (Pulumi.lab8.yaml)."""
SPARE = "lab-h9"
RUN = "accept8"
SECRET = "wandb-acceptance-3b9d51c7-never-printed"


@pytest.fixture(scope="module")
def lab9() -> Iterator[dict[str, Any]]:
    """The 9-host lab with 8 fake GPUs each (no swarm: the program forms it)."""
    lab_cli("down", check=False)
    for sub in ("checkpoints", "logs", ".dss"):
        shutil.rmtree(shared(sub, RUN), ignore_errors=True)
    try:
        lab_cli("up", "--hosts", str(HOSTS), "--gpus", "8")
        yield lab_status()
    finally:
        lab_cli("down", check=False)


def pytest_sessionstart(session: pytest.Session) -> None:
    """One table per run: each module brings its own lab, and every module's rows stay."""
    RESULTS.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the item, for the `report` fixture."""
    outcome: Any = yield  # pluggy's result object (pytest exports no type for it)
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The test fills `figure` and `command`; its row is recorded with pass/FAIL."""
    # The docstring's first sentence names the check.
    doc = " ".join((request.function.__doc__ or request.node.name).split())
    check = doc.split(". ")[0].rstrip(".")
    # A test collected again by another module (test_takeover_host.py) keeps a row of
    # its own there: rows are kept by check.
    where = request.module.__name__.rsplit(".", 1)[-1]
    if where != request.function.__module__.rsplit(".", 1)[-1]:
        check = f"{check} ({where})"
    entry = {"check": check, "figure": "", "command": ""}
    yield entry
    rep = getattr(request.node, "rep_call", None)
    passed = rep is not None and rep.passed
    record(Row(entry["check"], "pass" if passed else "FAIL", entry["figure"], entry["command"]))


def task_container(node: str, task_id: str) -> str:
    """The container id of a swarm task on its node."""
    out = docker(
        host_index(node), "ps", "-q", "--filter", f"label=com.docker.swarm.task.id={task_id}"
    )
    assert out.strip(), f"task {task_id}: no container on {node}"
    return out.split()[0]


JOB_SCRIPT = str(ROOT / "scripts" / "job")
"""The job command, as a person runs it."""


def job_cli(cluster: Stack, *args: str, timeout: int = 900) -> str:
    """`scripts/job <args>` with the cluster's backend: its stdout (into the cluster's
    transcript too); it must exit 0."""
    proc = subprocess.run([JOB_SCRIPT, *args], env=cluster.env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    cluster.record(proc.stdout, proc.stderr)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def clear_job_files(job: str) -> None:
    """Job `job`'s checkpoints, logs and run files on the lab's data dir, removed (a
    run of an earlier session must not pass for this one's)."""
    for sub in ("checkpoints", "logs", ".dss"):
        shutil.rmtree(shared(sub, job), ignore_errors=True)


@contextlib.contextmanager
def job_cluster(
    make_stack: MakeStack, name: str, config: dict[str, Any], job: str
) -> Iterator[Stack]:
    """Cluster stack `name` with `config` (a cluster, no run of its own), up, with job
    `job`'s checkpoints, logs and run files cleared first; the job removed afterwards
    in any case (make_stack then destroys the cluster)."""
    clear_job_files(job)
    s = make_stack(name, {**config, "deepspeed-swarm:kind": "cluster"}, {"wandb_api_key": SECRET})
    s.pulumi("up", "--yes", "--skip-preview")
    try:
        yield s
    finally:
        remove_job(s, job)


EXAMPLE = ROOT / "examples" / "deepspeed-tutorial"
"""DeepSpeed's getting-started tutorial in its shape (docs/design/bring-your-script.md)."""


def tutorial_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorial example, copied as it is into a code dir of its own."""
    dest = tmp_path_factory.mktemp("tutorial") / "deepspeed-tutorial"
    shutil.copytree(EXAMPLE, dest)
    return dest


TUTORIAL_SAVE_EVERY = 10
TUTORIAL_COMMAND = [
    "deepspeed", "train.py", "--deepspeed", "--deepspeed_config", "ds_config.json",
    "--steps", "100000", "--save_interval", str(TUTORIAL_SAVE_EVERY),
]  # fmt: skip
"""The tutorial's command as its README types it, with a long run and a short save
interval (the script's own options)."""
TUTORIAL_STEP = re.compile(r"^(?:\S+: )?step (\d+) loss ", re.MULTILINE)
"""A step rank 0 of the tutorial printed (`step N loss X`, every 10)."""


def tutorial_steps(job: str) -> list[int]:
    """The steps job `job`'s rank 0 printed so far (the tutorial's `step N loss X`)."""
    log = shared("logs", job, "launcher.log")
    text = log.read_text(errors="replace") if log.exists() else ""
    return [int(m) for m in TUTORIAL_STEP.findall(text)]
