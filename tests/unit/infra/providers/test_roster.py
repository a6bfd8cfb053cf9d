"""infra.providers.roster: the task roster as the swarm API reports it."""

from __future__ import annotations

from typing import Any

import pytest
from docker.errors import APIError, NotFound

from infra.providers import reach, roster
from infra.providers.errors import HostError

pytestmark = pytest.mark.unit


def test_roster_of_a_removed_service_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service removed by hand has no tasks: the roster reads empty, it does not fail."""

    class Api:
        def nodes(self) -> list[Any]:
            return []

        def tasks(self, filters: dict[str, Any]) -> list[Any]:
            raise NotFound(f"service {filters['service']} not found")

    class Client:
        api = Api()

    monkeypatch.setattr(roster, "docker_client", lambda _endpoint, _ssh=None: Client())
    props = {"leader_endpoint": {"url": "unix:///x"}, "services": ["ds-master", "ds-worker"]}
    assert roster._roster(props) == []


def test_node_without_description_has_no_hostname() -> None:
    """A node that has only just joined (no Description yet) reads as no hostname."""
    from infra.providers.hostops import node_hostname

    assert node_hostname({"ID": "n1", "Status": {"State": "unknown"}}) == ""
    assert node_hostname({"Description": {"Hostname": "lab-h1"}}) == "lab-h1"


def _swarm_with_tasks(monkeypatch: pytest.MonkeyPatch, running: dict[str, list[str]]) -> None:
    """A fake leader whose services run the given task ids."""

    class Api:
        def tasks(self, filters: dict[str, Any]) -> list[Any]:
            return [{"ID": t, "Status": {"State": "running"}} for t in running[filters["service"]]]

    class Client:
        api = Api()

    monkeypatch.setattr(roster, "docker_client", lambda _endpoint, _ssh=None: Client())


PROPS = {
    "leader_endpoint": {"url": "unix:///x"},
    "services": ["ds-master", "ds-worker"],
    "entries": [{"task_id": "m1"}, {"task_id": "w1"}, {"task_id": "w2"}],
}


def test_same_tasks_have_not_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks the state holds still run: no change (a no-op stays a no-op)."""
    _swarm_with_tasks(monkeypatch, {"ds-master": ["m1"], "ds-worker": ["w2", "w1"]})
    assert not roster.tasks_moved(PROPS)


def test_task_moved_to_the_spare_is_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Swarm replaced a task (its host was lost): the roster must re-read and relaunch."""
    _swarm_with_tasks(monkeypatch, {"ds-master": ["m1"], "ds-worker": ["w1", "w3"]})
    assert roster.tasks_moved(PROPS)


def _refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_endpoint: Any, _ssh: Any = None) -> Any:
        raise ConnectionError("connection refused")

    monkeypatch.setattr(roster, "docker_client", refuse)


def test_a_leader_known_lost_is_not_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another manager reports the leader down: no change, as before (with a warning)."""
    _refuse(monkeypatch)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "down")
    assert not roster.tasks_moved(PROPS)


def test_an_unreachable_leader_not_known_lost_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No manager answers: "unknown" is never "no changes"; the diff fails."""
    _refuse(monkeypatch)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: None)
    with pytest.raises(HostError, match=r"unix:///x .*connection refused"):
        roster.tasks_moved(PROPS)


def test_an_api_error_of_the_leader_is_not_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer (Docker's 500) is no transport failure: no change, as before."""

    def answer(_endpoint: Any, _ssh: Any = None) -> Any:
        raise APIError("500 Server Error")

    monkeypatch.setattr(roster, "docker_client", answer)
    assert not roster.tasks_moved(PROPS)


def test_host_data_plane_addresses_are_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task on the host network (an attachment without addresses) gets its host's
    address from `node_addresses`; a node the config does not name gets none."""

    class Api:
        def nodes(self) -> list[Any]:
            return [
                {"ID": "n1", "Description": {"Hostname": "gpu-01"}},
                {"ID": "n2", "Description": {"Hostname": "stray"}},
            ]

        def tasks(self, filters: dict[str, Any]) -> list[Any]:
            node = "n1" if filters["service"] == "ds-master" else "n2"
            return [
                {
                    "ID": f"t-{node}",
                    "NodeID": node,
                    "Slot": 1,
                    "Status": {"State": "running"},
                    "NetworksAttachments": [{"Network": {"ID": "hostnet"}}],
                }
            ]

    class Client:
        api = Api()

    monkeypatch.setattr(roster, "docker_client", lambda _endpoint, _ssh=None: Client())
    props = {
        "leader_endpoint": {"url": "unix:///x"},
        "host_endpoints": {},
        "services": ["ds-master", "ds-worker"],
        "network_id": "hostnet",
        "node_addresses": {"gpu-01": "10.0.0.1"},
    }
    assert [(e["node"], e["address"]) for e in roster._roster(props)] == [
        ("gpu-01", "10.0.0.1"),
        ("stray", ""),
    ]


@pytest.mark.parametrize(
    ("news", "changed"),
    [
        ({"gpu-01": "10.0.0.1", "gpu-02": "10.0.0.2"}, False),  # a drained gpu-03 removed
        ({"gpu-01": "10.0.0.1", "gpu-02": "10.0.0.2", "gpu-03": "x", "gpu-04": "y"}, False),
        ({"gpu-01": "10.0.0.1", "gpu-02": "10.0.0.9", "gpu-03": "x"}, True),  # a task's host
        ({}, True),  # back to the overlay
    ],
)
def test_only_addresses_of_task_hosts_re_read(news: dict[str, str], changed: bool) -> None:
    """On the host data plane only a new address of a host with a task re-reads the
    roster; hosts without a task coming or going do not (removing a drained host must
    not restart training)."""
    olds = {
        "entries": [{"node": "gpu-01"}, {"node": "gpu-02"}],
        "node_addresses": {"gpu-01": "10.0.0.1", "gpu-02": "10.0.0.2", "gpu-03": "x"},
    }
    assert roster.addresses_moved(olds, {"node_addresses": news}) is changed


def test_a_run_that_follows_its_tasks_ignores_a_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """With follow_moves a task Swarm replaced is no change (the run resumed on it by
    itself); without it the same move re-reads the roster."""
    _swarm_with_tasks(monkeypatch, {"ds-master": ["m1"], "ds-worker": ["w1", "w3"]})
    olds = {**PROPS, "expected_tasks": 3, "entries": [
        {"task_id": t, "node": f"n-{t}"} for t in ("m1", "w1", "w2")
    ]}  # fmt: skip
    following = {**olds, "follow_moves": True}
    assert roster.TaskRosterProvider().diff("r", following, dict(following)).changes is False
    assert roster.TaskRosterProvider().diff("r", olds, dict(olds)).changes is True


def test_a_run_that_follows_its_tasks_rereads_when_every_task_is_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With follow_moves, every task re-created (none the run was launched on runs) is
    a change: the run died with its tasks, and the gate must measure the new ones."""
    _swarm_with_tasks(monkeypatch, {"ds-master": ["m2"], "ds-worker": ["w3", "w4"]})
    olds = {**PROPS, "expected_tasks": 3, "follow_moves": True, "entries": [
        {"task_id": t, "node": f"n-{t}"} for t in ("m1", "w1", "w2")
    ]}  # fmt: skip
    assert roster.TaskRosterProvider().diff("r", olds, dict(olds)).changes is True


def _live(monkeypatch: pytest.MonkeyPatch, ids: list[str]) -> None:
    monkeypatch.setattr(roster, "_roster", lambda _props: [{"task_id": t} for t in ids])


@pytest.mark.parametrize(
    ("follow", "live", "recorded"),
    [(True, ["m1", "w1", "w3"], ["m1", "w1", "w2"]),  # moved: the launch's placement kept
     (True, ["m1", "w1"], ["m1", "w1"]),  # one short: what runs, for the next `up`
     (True, ["m2", "w3", "w4"], ["m2", "w3", "w4"]),  # all re-created: what runs
     (False, ["m1", "w1", "w3"], ["m1", "w1", "w3"])],  # the default: what runs
)  # fmt: skip
def test_refresh_of_a_following_run_keeps_its_placement(
    monkeypatch: pytest.MonkeyPatch, follow: bool, live: list[str], recorded: list[str]
) -> None:
    """A refresh records the launch's placement while a following run has all its tasks,
    and the running tasks otherwise."""
    _live(monkeypatch, live)
    props = {**PROPS, "expected_tasks": 3, **({"follow_moves": True} if follow else {})}
    assert [e["task_id"] for e in roster.read_entries(props)] == recorded
