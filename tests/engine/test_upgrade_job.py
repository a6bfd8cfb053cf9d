"""The release check for a job stack: a job the previous commit's program submitted,
training on its cluster, is taken over by this checkout's program without a restart.

The cluster stack (`kind: cluster`) is deployed and the job submitted by the program
and the job command as they were at `tests/engine/upgrade_from` (as
tests/engine/test_upgrade.py extracts it). Then this checkout's program previews the
job's stack with only the changes it means to make (below), `up` makes them with no
Swarm task of the job replaced and no training process restarted, and the next preview
and a refresh are clean. The cluster stack's own upgrade is the single stack's
(test_upgrade.py); here it stays as the base deployed it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.configs import dev_config
from harness.lab import logged_steps, running_training_tasks, training_processes
from harness.stack import Pulumi, Stack
from harness.waits import wait_for
from infra.layout import PROJECT, training_service_names
from infra.task.ranks import SCRIPT_ENV
from jobs import command
from tests.engine.conftest import MakeStack
from tests.engine.test_upgrade import SETTINGS_ENV, extract, proposed_changes, upgrade_from

pytestmark = pytest.mark.engine

CLUSTER = "test-upjob-cluster"
JOB = "test-upjob-a"
HOSTS = 2
SECRET = "wandb-upjob-5e2a-not-for-logs"
SERVICES = training_service_names(JOB)
Snapshot = tuple[dict[str, set[str]], dict[str, set[str]]]
"""The job's running task ids per service, and its training processes per container."""


def snapshot() -> Snapshot:
    return running_training_tasks(SERVICES), training_processes(HOSTS, SERVICES)


def job_stack(cluster: Stack) -> Pulumi:
    """The job's stack, with the cluster's backend and passphrase."""
    return Pulumi(JOB, env=cluster.env)


def expected_changes(cluster: Stack) -> dict[str, set[str]]:
    """What this checkout changes on the job the base deployed, per resource name (URN
    suffix after the job's name), read from the state so that it empties by itself once
    the base deploys the same.

    - The GPU-fit check (issue 22, infra/providers/fit.py) is new: created, it holds
      its inputs only and changes nothing on the swarm.
    - The stop signals the ranks before the launchers (infra/task/ranks.py): the
      launch's `delete` changes, an update that keeps the running launcher.
    - train.py's settings in the launch's environment file, not injected flags (issue
      44): the launch's `create` changes, an update that keeps the running launcher.
    """
    out: dict[str, set[str]] = {}
    state = cluster.state_text()
    if f"{JOB}-train-fit" not in state:
        out["train-fit"] = {"<create>"}
    if SCRIPT_ENV not in state:
        out["launch-run"] = {"delete"}
    if SETTINGS_ENV not in state:
        out.setdefault("launch-run", set()).add("create")
    return out


def submit_with(base: Path, cluster: Stack, code: Path) -> None:
    """The base commit's job command submits the job (its own package on PYTHONPATH,
    its own directory for the stack file)."""
    script = (
        "from pathlib import Path; from jobs import command; "
        f"command.submit(command.JobSpec(name={JOB!r}, cluster={CLUSTER!r}, "
        f"code_dir=Path({str(code)!r}), steps=100000, checkpoint_every=10))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**cluster.env, "PYTHONPATH": str(base)},
        cwd=base,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    cluster.record(proc.stdout, proc.stderr)
    assert proc.returncode == 0, (
        f"the base's submit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


@pytest.fixture(scope="module")
def upgraded(
    lab: dict[str, Any],
    make_stack: MakeStack,
    code: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Stack, Snapshot]]:
    """The cluster and the job deployed by the base commit, the job training, before the
    new program touches it; yields (cluster, the job's tasks and processes then). The
    job is destroyed before the cluster (make_stack's cleanup) in any case."""
    base = extract(upgrade_from(), tmp_path_factory.mktemp("upgrade") / "base")
    config = dev_config(steps=100000, checkpoint_every=10)
    config[f"{PROJECT}:kind"] = "cluster"
    cluster = make_stack(CLUSTER, config, {"wandb_api_key": SECRET})
    shutil.copy(cluster.config_file, base / cluster.config_file.name)
    cluster.pulumi("up", "--yes", "--skip-preview", cwd=base)
    job_file = command.stack_file(JOB)
    try:
        submit_with(base, cluster, code)
        # The stack file the base's command wrote is the job's reviewable code: the new
        # program reads the same file.
        shutil.copy(base / job_file.name, job_file)
        wait_for("three logged steps of the job", lambda: len(logged_steps(JOB)) >= 3, 600, 5)
        before = snapshot()
        assert all(before[0].values()) and all(before[1].values()), f"not training: {before}"
        yield cluster, before
    finally:
        job = job_stack(cluster)
        job.run("destroy", "--refresh", "--yes", "--skip-preview", check=False)
        job.run("stack", "rm", "--yes", "--force", check=False)
        job_file.unlink(missing_ok=True)


def test_a_job_previews_only_its_new_checks(upgraded: tuple[Stack, Snapshot]) -> None:
    """This checkout's program previews the base's live job with no change but those it
    means to make."""
    cluster, _ = upgraded
    preview = job_stack(cluster).run("preview", "--json").stdout
    cluster.record(preview)
    assert proposed_changes(preview, JOB) == expected_changes(cluster)


def test_up_of_a_job_restarts_nothing(upgraded: tuple[Stack, Snapshot]) -> None:
    """`up` with the new program replaces no task of the job and restarts no training
    process; training goes on; the next preview is a no-op."""
    cluster, before = upgraded
    job = job_stack(cluster)
    step = max(logged_steps(JOB))
    job.run("up", "--yes", "--skip-preview")
    job.run("preview", "--expect-no-changes")
    assert snapshot() == before, "a task of the job was replaced or a process restarted"
    wait_for("a step after the upgrade", lambda: max(logged_steps(JOB)) > step, 300, 5)


def test_refresh_of_an_upgraded_job_is_clean(upgraded: tuple[Stack, Snapshot]) -> None:
    """A refresh reads every resource of the job (dynamic ones through the provider the
    state holds) and finds no drift; nothing restarted."""
    cluster, before = upgraded
    job_stack(cluster).run("refresh", "--preview-only", "--expect-no-changes")
    assert snapshot() == before
