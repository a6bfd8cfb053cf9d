"""The release check: a live stack deployed by the previous commit upgrades to this
checkout's program as a no-op.

The dev stack is brought up, training, by the program as it was at the commit in
`tests/engine/upgrade_from` (extracted with `git archive`, run with the same toolchain
and Python env). Then this checkout's program takes the same stack and state over:
`pulumi preview --expect-no-changes` exits 0, `pulumi up --expect-no-changes` changes
nothing and restarts no Swarm task and no training process, `refresh` (which reads
every dynamic resource through the provider pickled in the old state) is clean, and
`destroy` by the new program removes what the old one made.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import ROOT
from harness.configs import dev_config
from harness.lab import (
    client,
    logged_steps,
    resumes_in,
    run_log,
    running_training_tasks,
    training_processes,
)
from harness.stack import Stack, project_env, restarting
from harness.waits import wait_for
from infra.components.image import image_tag
from infra.components.services import warmup_replicas
from infra.config.models import Image
from infra.layout import WARMUP_SERVICE
from infra.providers.health import HEALTH_KEYS
from infra.task.ranks import SCRIPT_ENV
from tests.engine.conftest import MakeStack
from tests.engine.test_stack import changed_paths

pytestmark = pytest.mark.engine

RUN = "upgradetest"
HOSTS = 2
"""The dev stack's lab hosts, every one active."""
SECRET = "wandb-upgrade-3d1f-not-for-logs"
Snapshot = tuple[dict[str, set[str]], dict[str, set[str]]]
"""Running task ids per training service, and training processes per task container."""


SETTINGS_ENV = "DSS_CKPT_EVERY="
"""A line of the launch's environment file (infra/render/command.py run_variables),
in a state whose launch hands train.py its settings that way."""


def upgrade_from() -> str:
    """The commit the live stack is deployed with (DSS_UPGRADE_FROM overrides the file)."""
    pinned = [
        line.strip()
        for line in (ROOT / "tests" / "engine" / "upgrade_from").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return os.environ.get("DSS_UPGRADE_FROM") or pinned[0]


def extract(commit: str, dest: Path) -> Path:
    """The project as it was at `commit`, in `dest` (no .git: it cannot touch this repo)."""
    archive = dest.with_suffix(".tar")
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), commit],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, (
        f"cannot extract the upgrade base {commit} (tests/engine/upgrade_from): "
        f"{proc.stderr.strip()}; a shallow clone lacks it, fetch the history"
    )
    dest.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    # The same locked Python env when the lock is unchanged; otherwise the base's own.
    if (dest / "uv.lock").read_bytes() == (ROOT / "uv.lock").read_bytes():
        (dest / ".venv").symlink_to(ROOT / ".venv")
    else:
        subprocess.run(
            ["uv", "sync", "--frozen", "--quiet", "--python", "3.11"], cwd=dest, check=True
        )
    # Its image context as its own `scripts/dev` would stage it (the wheelhouse is
    # git-ignored and part of the content tag; the bases are cached by content).
    subprocess.run([str(dest / "images" / "prepare")], env=project_env(), check=True)
    return dest


def expected_changes(stack: Stack) -> dict[str, set[str]]:
    """What this checkout changes on a live stack the base deployed, per resource name
    (URN suffix): the property paths its preview may name. Read from the live swarm and
    the stack's state, so it empties by itself once the base already deploys the same.

    - `ds-net-warmup` loses its tasks on an engine without the overlay defect
      (issue 18; infra/components/services.py `warmup_replicas`): a replica change of
      a service no training task depends on at run time.
    - The run's record (issue 20, infra/providers/run.py) is new: created, it reads
      the run and starts nothing; the launch command's scripts gain the supervisor
      (its update re-runs the idempotent launch script, which keeps the running
      launcher) and the stop marker.
    - The collective gate (issue 21, infra/providers/gate.py) is new: created under a
      live run it is `skipped` (it measures only before a launch).
    - The host facts expect healthy GPUs (issue 21, infra/providers/health.py): their
      update re-reads each host over SSH, nothing on it changes.
    - The stop signals the ranks before the launchers (infra/task/ranks.py), so a stop
      keeps its final checkpoint: the launch's `delete` changes, an update that re-runs
      the idempotent launch script and keeps the running launcher.
    - The image's train.py is launched as a command like any (issue 44): no flags
      injected, its run's settings in the launch's environment file. The launch's
      `create` changes, an update that keeps the running launcher; the preview says
      the run keeps its command line until its next relaunch (delivery/impact.py).
    - A new training image (any byte under `images/` changed since the base, e.g.
      issue 20's universal checkpoint): built, the services roll onto it, the roster
      reads the new tasks and the launch is replaced. This one restarts training, and
      the preview says so (`test_up_after_upgrade_restarts_nothing`).
    """
    out: dict[str, set[str]] = {}
    if image_changed(stack):
        out["image-build"] = {"build.contextDigest", "imageName"}
        for service in ("train-master", "train-worker", "train-net-warmup"):
            out[service] = {"taskSpec.containerSpec.image"}
        out["launch-roster"] = {"image_ref", "task_spec_digest"}
        out["launch-gate-allreduce"] = {"tasks"}
        out["launch-run"] = {"<replace>"}
        out["launch-run-state"] = {"tasks", "launched"}
    api: Any = client(1).api  # docker-py's low-level API is untyped
    engine = {"docker_version": str(client(1).version()["Version"])}
    (warmup,) = api.services(filters={"name": WARMUP_SERVICE})
    replicas = int(warmup["Spec"]["Mode"]["Replicated"]["Replicas"])
    if replicas != warmup_replicas(HOSTS, [engine] * HOSTS):
        out.setdefault("train-net-warmup", set()).add("mode.replicated.replicas")
    state = stack.state_text()
    if "launch-run-state" not in state:
        out["launch-run-state"] = {"<create>"}
        out["launch-run"] = {"create", "delete"}
    # A replaced launch (a new image) shows as `<replace>` alone: its changed `delete`
    # is part of the replacement, not an update of its own.
    if SCRIPT_ENV not in state and out.get("launch-run") != {"<replace>"}:
        out.setdefault("launch-run", set()).add("delete")
    # The launch hands train.py its settings as DSS_* variables in the run's environment
    # file (issue 44): the base's launch script injected them as flags.
    if SETTINGS_ENV not in state and out.get("launch-run") != {"<replace>"}:
        out.setdefault("launch-run", set()).add("create")
    if "launch-gate-allreduce" not in state:
        out["launch-gate"] = {"<create>"}
        out["launch-gate-allreduce"] = {"<create>"}
    if "gpu_xid_errors" not in state:
        for i in range(1, HOSTS + 1):
            out[f"facts-lab-h{i}"] = {
                *(f"expected.{k}" for k in HEALTH_KEYS),
                "gpu_health",
                "remedy",
            }
    return out


_ROLLS: dict[str, bool] = {}


def image_changed(stack: Stack) -> bool:
    """Whether this checkout's training image differs from the one the base deployed:
    its content tag (infra/components/image.py) was not in the stack's state before
    the new program's first `up` (read once: the `up` puts it there)."""
    if stack.name not in _ROLLS:
        _ROLLS[stack.name] = image_tag(ROOT, Image()) not in stack.state_text()
    return _ROLLS[stack.name]


def proposed_changes(preview_json: str, stack_name: str) -> dict[str, set[str]]:
    """Every change a `pulumi preview --json` of stack `stack_name` proposes: resource
    name (URN suffix after the stack's name) -> the input paths it changes (`<op>` where
    it is not an update). A job's read of its cluster's stack is not a change."""
    out: dict[str, set[str]] = {}
    for st in json.loads(preview_json).get("steps", []):
        if st["op"] in ("same", "read"):
            continue
        name = st["urn"].rsplit("::", 1)[1].removeprefix(f"{stack_name}-")
        old = (st.get("oldState") or {}).get("inputs")
        new = (st.get("newState") or {}).get("inputs")
        # `__provider` is a dynamic resource's serialised provider (the engine's, not a
        # property of the resource): new with any change to the program's code.
        paths = (
            {p for p in changed_paths(old, new) if p != "__provider"}
            if st["op"] == "update"
            else {f"<{st['op']}>"}
        )
        out.setdefault(name, set()).update(paths)
    return out


@pytest.fixture(scope="module")
def upgraded(
    lab: dict[str, Any], make_stack: MakeStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, Snapshot]]:
    """The dev stack deployed by the base commit's program, training, before the new
    program touches it; yields (stack, tasks and processes as the base left them)."""
    base = extract(upgrade_from(), tmp_path_factory.mktemp("upgrade") / "base")
    config = dev_config(run_name=RUN, steps=100000, checkpoint_every=10)
    # The stack file the base deploys must be one the base reads: a key added since
    # the base would be popped here (it comes after the upgrade, as a user adds it).
    stack = make_stack("test-upgrade", config, {"wandb_api_key": SECRET})
    # The base program reads the same stack file (its passphrase salt and config).
    shutil.copy(stack.config_file, base / stack.config_file.name)
    stack.pulumi("up", "--yes", "--skip-preview", cwd=base)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(logged_steps(RUN)) < 3:
        time.sleep(5)
    assert len(logged_steps(RUN)) >= 3, "the base program's run logged no steps in 600 s"
    before = (running_training_tasks(), training_processes(HOSTS))
    assert all(before[0].values()) and all(before[1].values()), f"nothing training: {before}"
    image_changed(stack)  # read before the new program's `up` writes its tag
    yield stack, before
    # The new program destroys what the old one made (make_stack's cleanup).


def test_preview_after_upgrade_is_a_no_op(upgraded: tuple[Stack, Snapshot]) -> None:
    """This checkout's program previews the base commit's live stack with no change but
    those it means to make (none for most commits)."""
    stack, _ = upgraded
    preview = stack.pulumi("preview", "--json").stdout
    assert proposed_changes(preview, stack.name) == expected_changes(stack)


def test_up_after_upgrade_restarts_nothing(upgraded: tuple[Stack, Snapshot]) -> None:
    """`up` with the new program makes only the previewed changes, no Swarm task of
    training is replaced and no training process restarts (unless the image changed,
    which the preview says restarts the job); training goes on; the next preview is a
    no-op."""
    stack, (tasks, processes) = upgraded
    step = max(logged_steps(RUN))
    rolls = image_changed(stack)
    if rolls:
        # The one upgrade that restarts training: the preview must say so, as the PR
        # comment shows it, for the services and the launch.
        said = restarting(stack.plan())
        want = {f"{stack.name}-{n}" for n in ("train-master", "train-worker", "launch-run")}
        assert want <= set(said), f"a new image, yet the preview's restarts are {said}"
    launcher = run_log(RUN, "launcher.log")
    offset = launcher.stat().st_size
    if expected_changes(stack):
        stack.pulumi("up", "--yes", "--skip-preview")
        stack.pulumi("preview", "--expect-no-changes", "--diff")
    else:
        stack.pulumi("up", "--yes", "--expect-no-changes", "--skip-preview")
    if not rolls:
        assert running_training_tasks() == tasks, "a training task was replaced by the upgrade"
        assert training_processes(HOSTS) == processes, "a training process restarted"
    else:
        assert running_training_tasks() != tasks, "a new image, yet no task was replaced"
        # The old run logs steps until the roll stops it: wait for the new run's resume.
        resumed = wait_for(
            "the relaunch's resume in launcher.log",
            lambda: next(iter(resumes_in(launcher.read_bytes()[offset:].decode())), None),
            300,
            2,
        )
        assert resumed.checkpoint_step is not None, f"resumed from {resumed.checkpoint}"
        step = resumed.next_step - 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and max(logged_steps(RUN)) <= step:
        time.sleep(5)
    assert max(logged_steps(RUN)) > step, f"training stopped at step {step} after the upgrade"


def test_refresh_after_upgrade_is_clean(upgraded: tuple[Stack, Snapshot]) -> None:
    """A refresh reads every resource of the old state (dynamic ones through the
    provider pickled by the base commit) and finds no drift; nothing restarted (since
    the base, unless the image changed; by the refresh, never)."""
    stack, (tasks, processes) = upgraded
    live = (running_training_tasks(), training_processes(HOSTS))
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    stack.pulumi("preview", "--refresh", "--expect-no-changes")
    assert (running_training_tasks(), training_processes(HOSTS)) == live
    if not image_changed(stack):
        assert live == (tasks, processes)
