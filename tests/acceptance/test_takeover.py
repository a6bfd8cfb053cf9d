"""Acceptance: a lost master resumes by itself (training.recovery.follow_master, issue
20), with the real engine on a 3-host lab: lab-h1 the master (a Swarm worker, so that
losing it keeps the swarm's one manager), lab-h2 the manager and the worker, lab-h3
the spare. Tests run in file order on one stack; each records a row of the table
`scripts/acceptance` prints (tests/acceptance/report.py).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import yaml
from dss_train import checkpoints as ck

from harness.configs import HOSTS, dev_on_hosts
from harness.lab import (
    docker,
    lab_cli,
    lab_status,
    launcher_log_since,
    launcher_log_size,
    logged_steps,
    restart_events,
    shared,
    stop_checkpoint_step,
    tasks_of,
    wait_resumed,
)
from harness.stack import Stack
from harness.waits import wait_for
from infra.layout import MASTER_OK_LABEL
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

RUN = "takeover"
MANAGER = 2
"""lab-h2: the swarm's one manager, which sees the master's host go."""
MASTER, SPARE = "lab-h1", "lab-h3"
CHECKPOINT_EVERY = 10
SECRET = "wandb-takeover-5c1e0a7d-never-printed"

master_tasks = partial(tasks_of, "ds-master", MANAGER)


@pytest.fixture(scope="module")
def lab3() -> Iterator[dict[str, Any]]:
    """The 3-host lab with 2 fake GPUs each (no swarm: the program forms it)."""
    lab_cli("down", check=False)
    for sub in ("checkpoints", "logs", ".dss"):
        subprocess.run(["rm", "-rf", str(shared(sub, RUN))], check=False)
    try:
        lab_cli("up", "--hosts", "3", "--gpus", "2")
        yield lab_status()
    finally:
        lab_cli("down", check=False)


def takeover_config() -> dict[str, Any]:
    """The dev stack on lab-h1..h3: the master on lab-h1, a Swarm worker; lab-h2 the
    manager; lab-h3 the spare; the run follows its workers and its master."""
    cfg = dev_on_hosts(
        3,
        2,
        run_name=RUN,
        steps=100000,
        checkpoint_every=CHECKPOINT_EVERY,
        recovery={"follow_moves": True, "follow_master": True, "max_restarts": 3},
    )
    roles = {MASTER: "worker", "lab-h2": "manager", SPARE: "worker"}
    for h in cfg[HOSTS]:
        h["role"] = roles[h["name"]]
        h["spare"] = h["name"] == SPARE
    return cfg


@pytest.fixture(scope="module")
def stack(lab3: dict[str, Any], make_stack: MakeStack) -> Stack:
    return make_stack("test-takeover", takeover_config(), {"wandb_api_key": SECRET})


def master_on(node: str) -> bool:
    return (node, "Running") in master_tasks()


def link(host: int, state: str) -> None:
    subprocess.run(["ip", "link", "set", f"dssl{host}", state], check=True)


def takeovers() -> list[dict[str, Any]]:
    return [e for e in restart_events(RUN) if "takeover" in e]


def latest_checkpoint_step() -> int | None:
    found, _ = ck.select_latest(shared("checkpoints", RUN), hashes=False)
    return found[0] if found else None


def checkpoint_and_a_step_past_it() -> int:
    ckpt = wait_for("a complete checkpoint", latest_checkpoint_step, timeout=600)
    wait_for("a step past it", lambda: max(logged_steps(RUN), default=0) > ckpt, 300)
    return max(logged_steps(RUN))


def test_up_places_the_master_on_its_host(stack: Stack, report: dict[str, str]) -> None:
    """`pulumi up`: the master on its host, the master's host and the spare labelled."""
    t0 = time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    took = time.monotonic() - t0
    assert master_tasks() == [(MASTER, "Running")], master_tasks()
    label = f'{{{{index .Spec.Labels "{MASTER_OK_LABEL}"}}}}'
    labelled = [
        n
        for n in ("lab-h1", "lab-h2", "lab-h3")
        if docker(MANAGER, "node", "inspect", n, "--format", label).strip() == "true"
    ]
    assert labelled == [MASTER, SPARE], f"{MASTER_OK_LABEL} on {labelled}"
    step = checkpoint_and_a_step_past_it()
    stack.pulumi("preview", "--diff", "--expect-no-changes")
    report["figure"] = (
        f"up {took:.0f} s; ds-master on {MASTER}; training at step {step}; preview a no-op"
    )
    report["command"] = "pulumi up (training.recovery.follow_master: true)"


def test_lost_master_resumes_on_the_spare(stack: Stack, report: dict[str, str]) -> None:
    """The master's host lost mid-run: Swarm moves the master task to the spare, which
    takes the run over by itself from the last complete checkpoint, with no `pulumi up`;
    once the host is back, preview and refresh are no-ops."""
    old_master = stack.outputs()["rankMap"][0]["address"]
    checkpoint_and_a_step_past_it()
    offset, seen = launcher_log_size(RUN), len(takeovers())
    link(1, "down")
    t_loss = time.monotonic()
    before = max(logged_steps(RUN), default=0)
    try:
        wait_for(f"ds-master running on {SPARE}", lambda: master_on(SPARE), timeout=240)
        moved_after = time.monotonic() - t_loss
        resumed = wait_resumed(RUN, offset)
        to_step = time.monotonic() - t_loss
    finally:
        link(1, "up")
    lost_steps = before - resumed
    assert 0 <= lost_steps <= CHECKPOINT_EVERY, f"resumed from {resumed}, cut at {before}"
    taken = takeovers()[seen:]
    assert len(taken) == 1, f"restarts.jsonl: {restart_events(RUN)}"
    moves = [e["moved"] for e in restart_events(RUN) if e["event"] == "hostfile"]
    assert moves and list(moves[-1]) == [old_master], f"restarts.jsonl: {restart_events(RUN)}"
    hostfile = shared(".dss", RUN, "hostfile").read_text()
    assert hostfile.startswith(f"{moves[-1][old_master]} slots="), hostfile
    assert "takes the run over" in launcher_log_since(RUN, offset)
    status = ["node", "ls", "--filter", f"name={MASTER}", "--format", "{{.Status}}"]
    wait_for(f"{MASTER} Ready again", lambda: "Ready" in docker(MANAGER, *status), 180)
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    assert stack.outputs()["run"]["state"] == "running", stack.outputs()["run"]
    report["figure"] = (
        f"{MASTER} cut at step {before}; ds-master on {SPARE} after {moved_after:.0f} s; "
        f"taken over and resumed from step {resumed} ({lost_steps} steps lost, interval "
        f"{CHECKPOINT_EVERY}); first resumed step {to_step:.0f} s after the loss, "
        f"{to_step - moved_after:.0f} s after the move; preview and refresh no-ops"
    )
    report["command"] = "ip link set dssl1 down; (no pulumi up); pulumi preview; pulumi refresh"


def test_master_follows_back_when_the_spare_is_drained(
    stack: Stack, report: dict[str, str]
) -> None:
    """The spare drained (to free it again): the master task goes back to its host and
    takes the run over there; with the spare active again preview and refresh are
    no-ops."""
    checkpoint_and_a_step_past_it()
    offset, seen = launcher_log_size(RUN), len(takeovers())
    t0 = time.monotonic()
    docker(MANAGER, "node", "update", "--availability", "drain", SPARE)
    try:
        wait_for(f"ds-master running on {MASTER}", lambda: master_on(MASTER), timeout=240)
        resumed = wait_resumed(RUN, offset)
        took = time.monotonic() - t0
    finally:
        docker(MANAGER, "node", "update", "--availability", "active", SPARE)
    assert len(takeovers()[seen:]) == 1, f"restarts.jsonl: {restart_events(RUN)}"
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    report["figure"] = (
        f"ds-master back on {MASTER}; resumed from step {resumed}, first step {took:.0f} s "
        "after the drain; preview and refresh no-ops"
    )
    report["command"] = f"docker node update --availability drain {SPARE}; then active"


def move_master_off(node: str) -> str:
    """Drain `node` until the master task runs on the other master-eligible host, then
    make it active again; returns where the master runs now."""
    other = SPARE if node == MASTER else MASTER
    docker(MANAGER, "node", "update", "--availability", "drain", node)
    try:
        wait_for(f"ds-master running on {other}", lambda: master_on(other), timeout=240)
    except AssertionError as e:
        tasks = docker(MANAGER, "service", "ps", "ds-master", "ds-worker", "--no-trunc")
        raise AssertionError(f"{e}\n{tasks}") from None
    finally:
        docker(MANAGER, "node", "update", "--availability", "active", node)
    return other


def test_a_relaunch_while_the_master_is_elsewhere_stops_it_there_first(
    stack: Stack, report: dict[str, str]
) -> None:
    """A change that relaunches (training.args) while the master task runs elsewhere
    than where the run was launched: the old launch's stop finds no task on its host
    and stops the run through the data dir (no two runs), with a final checkpoint; the
    roster re-reads and the new launch starts where the master runs, from it."""
    checkpoint_and_a_step_past_it()
    launched_on = next(node for node, state in master_tasks() if state == "Running")
    offset, seen = launcher_log_size(RUN), len(takeovers())
    now_on = move_master_off(launched_on)
    wait_resumed(RUN, offset)
    assert len(takeovers()[seen:]) == 1, f"restarts.jsonl: {restart_events(RUN)}"
    doc = yaml.safe_load(stack.config_file.read_text())
    doc["config"]["deepspeed-swarm:training"]["args"] = ["--lr", "0.002"]
    stack.config_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    offset = launcher_log_size(RUN)
    stack.pulumi("up", "--yes", "--skip-preview")
    resumed = wait_resumed(RUN, offset)
    since = launcher_log_since(RUN, offset)
    assert re.search(r"a stop is asked for: SIGTERM to [1-9]\d* rank", since), since[-3000:]
    # The ranks were signalled before the launchers (infra/task/ranks.py): the stop's
    # own checkpoint is the one the relaunch resumed from.
    assert stop_checkpoint_step(since) == resumed, f"resumed from {resumed}: {since[-3000:]}"
    assert master_on(now_on) and stack.outputs()["rankMap"][0]["node"] == now_on
    assert launcher_log_since(RUN, offset).count("[dss-train] resumed from") == 1
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"master moved {launched_on} -> {now_on} and taken over; `up` stopped it there "
        f"through the data dir (final checkpoint at step {resumed}) and relaunched on "
        f"{now_on} from it; preview a no-op"
    )
    report["command"] = (
        f"docker node update --availability drain {launched_on}, then active; "
        "edit training.args; pulumi up"
    )


def test_an_update_relaunches_and_takes_nothing_over(stack: Stack, report: dict[str, str]) -> None:
    """A change that replaces the tasks: the new master task does not take the run over
    (its spec differs); the launch relaunches it, as the preview said."""
    checkpoint_and_a_step_past_it()
    offset, seen = launcher_log_size(RUN), len(takeovers())
    stack.pulumi("config", "set", "--path", "training.env.ACCEPTANCE_TAG", "v2")
    stack.pulumi("up", "--yes", "--skip-preview")
    resumed = wait_resumed(RUN, offset)
    assert takeovers()[seen:] == [], f"restarts.jsonl: {restart_events(RUN)}"
    assert "takes the run over" not in launcher_log_since(RUN, offset)
    stack.pulumi("preview", "--expect-no-changes")
    placed = [node for node, state in master_tasks() if state == "Running"]
    report["figure"] = (
        f"tasks replaced (ds-master on {', '.join(placed)}), relaunched from step {resumed}; "
        "no takeover; preview a no-op"
    )
    report["command"] = "pulumi config set --path training.env.ACCEPTANCE_TAG v2; pulumi up"
