"""A service update that leaves the task spec alone restarts no task (issue 18, item 4).

The docker provider flattens a service's `env` map into ContainerSpec.Env; upstream does
it in Go map order, so any update of the service (here: only its label) sent the same
variables reordered, SwarmKit saw a new task spec and replaced every task. The project's
patch (toolchain/patches/docker/0001-sort-service-env.patch) sorts them. One small
program (tests/engine/programs/service_env_order) on a 2-host swarm: `up`, then a few
label-only `up`s; the tasks must stay the same ones and Env must be sorted throughout.

Without the patch the create-time check fails at once (Go's order is not sorted), and each
update keeps the order only when Go's randomised iteration happens to start where it did
before: a 24-key map gave 20 distinct orders in 50 flattenings (Go 1.26), so three
updates all keep it with a probability of the order of 1/30**3.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.lab import client, lab_cli, socket
from harness.stack import Pulumi, project_env
from harness.waits import wait_for
from lab.testimage import build_and_push

pytestmark = pytest.mark.engine

PROGRAM = Path(__file__).parent / "programs" / "service_env_order"
PROJECT = "dss-service-env-order"
STACK = "test-envorder"
SERVICE = "dss-envorder-test"
REPLICAS = 2
ENV = {f"DSS_ENV_{i:02d}": f"value-{i}" for i in range(24)}
LABEL = "dss.test.revision"
REVISIONS = ("2", "3", "4")
SETTLE_S = 5.0
"""How long a label-only update is watched for new tasks, after the stored task template
was found unchanged (what SwarmKit compares to decide that tasks are dirty): a safety net,
not the proof. SwarmKit's updater makes the first replacement task within a second of an
update whose template changed."""


@pytest.fixture(scope="module")
def swarm_lab() -> Iterator[None]:
    """A 2-host lab with its swarm formed (h1 the manager) and the busybox test image in
    the lab registry; always downed."""
    lab_cli("down", check=False)
    try:
        lab_cli("up", "--hosts", "2", "--swarm")
        yield
    finally:
        lab_cli("down", check=False)


@pytest.fixture(scope="module")
def image(swarm_lab: None) -> str:
    """The test image by digest (repo@sha256:...), as the lab registry serves it."""
    name = build_and_push(socket(1))
    digests = client(1).images.get(name).attrs["RepoDigests"]
    assert digests, f"{name} has no repo digest after the push"
    return str(digests[0])


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pulumi]:
    """The program's stack (own file backend and passphrase), its config written as a
    stack file beside the program; destroyed and removed after the module."""
    state = tmp_path_factory.mktemp("envorder-state")
    env = project_env()
    env.update(
        PULUMI_BACKEND_URL=f"file://{state}",
        PULUMI_CONFIG_PASSPHRASE=secrets.token_hex(16),
    )
    config = {
        "docker_host": f"unix://{socket(1)}",
        "service_name": SERVICE,
        "image": image,
        "env": ENV,
        "replicas": REPLICAS,
        "revision": "1",
    }
    # Pulumi.test-*.yaml is git-ignored; `stack init` adds the passphrase salt to it.
    stack_file = PROGRAM / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(
        yaml.safe_dump({"config": {f"{PROJECT}:{k}": v for k, v in config.items()}})
    )
    cli = Pulumi(STACK, cwd=PROGRAM, env=env, timeout=600)
    try:
        cli.run("stack", "init", "--secrets-provider", "passphrase")
        yield cli
    finally:
        cli.run("destroy", "--refresh", "--yes", "--skip-preview", check=False)
        cli.run("stack", "rm", "--yes", "--force", check=False)
        stack_file.unlink(missing_ok=True)
        shutil.rmtree(state, ignore_errors=True)


def tasks() -> list[dict[str, Any]]:
    """Every task of the service the manager knows, whatever its state (a replacement
    task shows up here as soon as the updater makes it)."""
    api: Any = client(1).api  # docker-py's low-level API is untyped
    return list(api.tasks(filters={"service": SERVICE}))


def task_ids() -> set[str]:
    """The ids of every task of the service."""
    return {t["ID"] for t in tasks()}


def running_task_ids() -> set[str]:
    """The ids of the service's running tasks."""
    return {t["ID"] for t in tasks() if t["Status"]["State"] == "running"}


def new_tasks_within(known: set[str], seconds: float) -> set[str]:
    """The tasks beyond `known` that appear within `seconds` (none: an empty set)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if new := task_ids() - known:
            return new
        time.sleep(1)
    return set()


def spec() -> dict[str, Any]:
    """The service's spec as the manager stores it."""
    api: Any = client(1).api
    return dict(api.inspect_service(SERVICE)["Spec"])


def task_template_changes() -> list[str]:
    """The task-template paths the last update changed (Spec against PreviousSpec): what
    made Swarm replace the tasks, when it did."""
    api: Any = client(1).api
    service = api.inspect_service(SERVICE)
    before = (service.get("PreviousSpec") or {}).get("TaskTemplate", {})
    return changed_paths(before, service["Spec"]["TaskTemplate"])


def changed_paths(old: Any, new: Any, prefix: str = "TaskTemplate") -> list[str]:
    """The paths whose values differ between two JSON trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            p
            for k in sorted(set(old) | set(new))
            for p in changed_paths(old.get(k), new.get(k), f"{prefix}.{k}")
        ]
    return [] if old == new else [f"{prefix}: {old!r} -> {new!r}"]


@pytest.fixture(scope="module")
def deployed(stack: Pulumi) -> tuple[Pulumi, set[str]]:
    """The service brought up with all its replicas running; the stack and the ids of
    every task it has then."""
    stack.run("up", "--yes", "--skip-preview")
    wait_for(
        f"{REPLICAS} running tasks of {SERVICE}",
        lambda: len(running_task_ids()) == REPLICAS,
        180,
    )
    return stack, task_ids()


def test_env_is_sorted_at_create(deployed: tuple[Pulumi, set[str]]) -> None:
    """The created service's ContainerSpec.Env holds every variable, sorted."""
    env = spec()["TaskTemplate"]["ContainerSpec"]["Env"]
    assert env == sorted(f"{k}={v}" for k, v in ENV.items()), f"Env as stored: {env}"


@pytest.mark.parametrize("revision", REVISIONS)
def test_label_update_keeps_the_tasks(deployed: tuple[Pulumi, set[str]], revision: str) -> None:
    """Changing only the service label updates the service and replaces no task; Env
    stays sorted."""
    stack, known = deployed
    stack.run("config", "set", "revision", revision)
    stack.run("up", "--yes", "--skip-preview")
    after = spec()
    assert after["Labels"].get(LABEL) == revision, f"the label was not updated: {after['Labels']}"
    env = after["TaskTemplate"]["ContainerSpec"]["Env"]
    assert env == sorted(env), f"the update sent Env unsorted: {env}"
    # The cause, read directly: a task template equal to the previous one leaves every
    # task clean; then no replacement task may appear either.
    changed = task_template_changes()
    assert not changed, f"a label-only update changed the task template: {changed}"
    new = new_tasks_within(known, SETTLE_S)
    assert not new, (
        f"a label-only update replaced tasks: new {sorted(new)}, had {sorted(known)}; "
        f"the update changed {task_template_changes()}"
    )
    running = running_task_ids()
    assert len(running) == REPLICAS and running <= known, f"running now: {sorted(running)}"
