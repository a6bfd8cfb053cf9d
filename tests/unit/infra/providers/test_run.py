"""infra.providers.run: when the run's record is a change, and what update does."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from infra.providers import reach, run
from infra.providers.errors import HostError
from infra.render.run import RunState, parse_probe

pytestmark = pytest.mark.unit

PROPS: dict[str, Any] = {
    "run_name": "r",
    "script": "/opt/dss/train.py",
    "target_steps": 100,
    "stall_after_s": 60,
    "max_restarts": 3,
    "host_endpoints": {"h1": {"url": "unix:///x"}},
    "tasks": [{"node": "h1", "service": "ds-master"}],
    "launches": [{"node": "h1", "service": "ds-master", "supervisor": "/data/.dss/r/s.sh"}],
    "launched": ["cmd-1"],
}


def live(monkeypatch: pytest.MonkeyPatch, state: str) -> list[str]:
    """Make the tasks report `state`; returns the list relaunches are recorded in."""
    relaunched: list[str] = []
    monkeypatch.setattr(run, "observe", lambda _props: RunState(state))  # type: ignore[arg-type]

    def relaunch(props: dict[str, Any]) -> RunState:
        relaunched.append(props["run_name"])
        return RunState("running")

    monkeypatch.setattr(run, "relaunch", relaunch)
    return relaunched


@pytest.mark.parametrize("state", ["running", "finished", "unknown"])
def test_healthy_or_unreadable_run_is_no_change(
    monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """Running, finished, or not readable (a host down: the roster's to report): no diff."""
    live(monkeypatch, state)
    olds = {**PROPS, "state": "running", "restarts": 5}
    assert not run.TrainingRunProvider().diff("run-r", olds, dict(PROPS)).changes


@pytest.mark.parametrize("state", ["failed", "stalled"])
def test_failed_or_stalled_run_is_a_change(monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """A dead or hung run is a change even when the record still says running (a plain
    preview, no refresh), and so is it after a refresh read it."""
    live(monkeypatch, state)
    for recorded in ("running", state):
        olds = {**PROPS, "state": recorded}
        assert run.TrainingRunProvider().diff("run-r", olds, dict(PROPS)).changes


def test_a_new_launch_is_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch commands re-ran (new ids) or the target moved: the record re-reads."""
    live(monkeypatch, "running")
    for key, value in (("launched", ["cmd-2"]), ("target_steps", 200)):
        news = {**PROPS, key: value}
        assert run.TrainingRunProvider().diff("run-r", dict(PROPS), news).changes


def updated(olds: dict[str, Any]) -> dict[str, Any]:
    """The outputs of an update from `olds` to PROPS."""
    outs = run.TrainingRunProvider().update("run-r", olds, dict(PROPS)).outs
    assert outs is not None
    return outs


def test_update_relaunches_only_a_bad_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Update relaunches a failed run and counts it; a running one is only re-read."""
    relaunched = live(monkeypatch, "failed")
    outs = updated({**PROPS, "relaunches": 2})
    assert relaunched == ["r"] and outs["relaunches"] == 3
    relaunched = live(monkeypatch, "running")
    outs = updated({**PROPS, "relaunches": 2})
    assert relaunched == [] and outs["relaunches"] == 2 and outs["state"] == "running"


def _master_down(monkeypatch: pytest.MonkeyPatch, swarm_says: str | None) -> None:
    """The master's host does not answer; the swarm reports it `swarm_says`."""

    def down(_props: dict[str, Any], _task: dict[str, Any]) -> Any:
        raise ConnectionError("connection refused\nmore")

    monkeypatch.setattr(run, "_probe", down)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: swarm_says)


def test_a_master_known_lost_reads_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """A master task whose host the swarm reports down: `unknown`, with the error's
    first line (as before the rule, plus a warning)."""
    _master_down(monkeypatch, "down")
    state = run.observe(dict(PROPS))
    assert state.state == "unknown" and state.reason.endswith("connection refused")


@pytest.mark.parametrize("swarm_says", ["ready", None])
def test_an_unreachable_master_not_known_lost_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch, swarm_says: str | None
) -> None:
    """Reported ready, or no manager answers: the read fails naming host and URL."""
    _master_down(monkeypatch, swarm_says)
    with pytest.raises(HostError, match=r"host h1 \(unix:///x\) cannot be reached"):
        run.observe(dict(PROPS))


def test_an_unreachable_worker_not_known_lost_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's host that does not answer is no longer passed over unless lost."""
    props = {
        **PROPS,
        "host_endpoints": {"h1": {"url": "unix:///x"}, "h2": {"url": "unix:///y"}},
        "tasks": [{"node": "h1", "service": "ds-master"}, {"node": "h2", "service": "ds-worker"}],
    }

    def probe(_props: dict[str, Any], task: dict[str, Any]) -> Any:
        if task["node"] == "h2":
            raise ConnectionError("no route to host")
        return parse_probe("")

    monkeypatch.setattr(run, "_probe", probe)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "ready")
    with pytest.raises(HostError, match=r"host h2 \(unix:///y\).*no route to host"):
        run.observe(props)


def test_every_task_is_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The master and the others are read together (this runs in every preview's diff),
    and one other that does not answer, its host known lost, is left out."""
    tasks = [{"node": f"h{i}", "service": "ds-worker"} for i in range(1, 5)]
    together = threading.Barrier(len(tasks), timeout=10)

    def probe(_props: dict[str, Any], task: dict[str, Any]) -> Any:
        together.wait()
        if task["node"] == "h4":
            raise ConnectionError("h4 does not answer")
        return parse_probe("")

    monkeypatch.setattr(run, "_probe", probe)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "down")
    endpoints = {t["node"]: {"url": f"unix:///{t['node']}"} for t in tasks}
    state = run.observe({**PROPS, "tasks": tasks, "host_endpoints": endpoints})
    assert state.state != "unknown", state


MOVING: dict[str, Any] = {
    **PROPS,
    "host_endpoints": {"h1": {"url": "unix:///h1"}, "h2": {"url": "unix:///h2"},
                       "h3": {"url": "unix:///h3"}},
    "tasks": [{"node": "h1", "service": "ds-master"}, {"node": "h2", "service": "ds-worker"}],
    "follow_master": True,
}  # fmt: skip


def containers(monkeypatch: pytest.MonkeyPatch, where: dict[str, dict[str, str]]) -> None:
    """Host url -> service -> container; a url named `down` raises (its host is lost)."""

    def service_container(endpoint: dict[str, str], service: str, ssh: Any = None) -> str | None:
        if endpoint["url"] == "unix:///h1" and where.get("down"):
            raise ConnectionError("h1 does not answer")
        return where.get(endpoint["url"], {}).get(service)

    monkeypatch.setattr(run, "service_container", service_container)


@pytest.mark.parametrize("down", [False, True])
def test_a_moved_master_is_found_on_another_host(
    monkeypatch: pytest.MonkeyPatch, down: bool
) -> None:
    """follow_master: the master's recorded host has no master task (or does not
    answer): its task on the spare is the one probed and relaunched in."""
    where = {"unix:///h3": {"ds-master": "ctr-on-h3"}, "unix:///h2": {"ds-worker": "w"}}
    containers(monkeypatch, {**where, **({"down": {"x": "x"}} if down else {})})
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "down")
    assert run._container(MOVING, MOVING["tasks"][0]) == "ctr-on-h3"


def test_a_worker_is_never_looked_for_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the master is followed: a worker's host without its task has none."""
    containers(monkeypatch, {"unix:///h3": {"ds-worker": "elsewhere"}})
    assert run._container(MOVING, MOVING["tasks"][1]) is None


def test_without_follow_master_the_recorded_host_is_the_only_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that does not follow its master looks only where it was launched."""
    containers(monkeypatch, {"unix:///h3": {"ds-master": "ctr-on-h3"}})
    plain = {k: v for k, v in MOVING.items() if k != "follow_master"}
    assert run._container(plain, plain["tasks"][0]) is None


class _Ctr:
    """A container whose exec returns `out` and records the scripts it ran."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.scripts: list[str] = []

    def exec_run(self, argv: list[str], environment: dict[str, str], user: str) -> Any:
        self.scripts.append(argv[-1])
        return type("R", (), {"output": self.out.encode()})()


def test_a_command_run_is_judged_by_its_exit_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """training.command (`exit_records` set): the probe reads the records, and a record
    rc 0 of every launch target is finished below the target step."""
    ctr = _Ctr('exit.master={"rc": 0}\n')
    monkeypatch.setattr(run, "service_container", lambda _e, _s, ssh=None: ctr)
    state = run.observe({**PROPS, "exit_records": ["master"], "stall_after_s": 0})
    assert state.state == "finished" and "exit.*.json" in ctr.scripts[0], state


def test_a_train_py_run_ignores_exit_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `exit_records` the probe is today's and a record changes nothing."""
    ctr = _Ctr('exit.master={"rc": 0}\n')
    monkeypatch.setattr(run, "service_container", lambda _e, _s, ssh=None: ctr)
    state = run.observe(dict(PROPS))
    assert state.state == "failed" and "exit.*.json" not in ctr.scripts[0], state


def test_a_master_host_not_known_lost_is_not_looked_past(monkeypatch: pytest.MonkeyPatch) -> None:
    """follow_master: a recorded host that does not answer but is `ready` in the swarm
    fails the read, naming it: its master task may still run there."""
    containers(monkeypatch, {"down": {"x": "x"}, "unix:///h3": {"ds-master": "ctr-on-h3"}})
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "ready")
    with pytest.raises(HostError, match=r"host h1 \(unix:///h1\)"):
        run._container(MOVING, MOVING["tasks"][0])


def test_a_relaunch_passes_over_a_host_known_lost_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """relaunch's kill round: a host that does not answer and is `ready` fails it."""
    props = {**MOVING, "follow_master": False}
    containers(monkeypatch, {"down": {"x": "x"}})
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "ready")
    with pytest.raises(HostError, match=r"host h1 \(unix:///h1\)"):
        run.relaunch(props)
