"""infra.providers.queue: a job's queue entry as a Swarm config, against a fake of the
leader's configs API (fakeconfigs.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from infra.providers import queue
from infra.providers.errors import EngineUnreachable
from infra.providers.hostops import HostError
from tests.unit.infra.providers.fakeconfigs import Client, FakeConfigs

pytestmark = pytest.mark.unit

ASK: dict[str, Any] = {"nodes": 2, "gpus_per_node": 2, "gpu_model": None, "hosts": []}
DATA = {"training": {"nodes": 2}, "code_digest": "abc", "revision": "r1"}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeConfigs:
    fake = FakeConfigs()
    monkeypatch.setattr(queue, "docker_client", lambda _ep, _ssh=None: Client(fake))
    return fake


def props(**kw: Any) -> dict[str, Any]:
    base = {"leader_endpoint": {"url": "unix:///x.sock"}, "job": "exp-b", "cluster": "c1",
            "priority": 0, "ask": ASK, "data": DATA}  # fmt: skip
    return {**base, **kw}


def outs(result: Any) -> dict[str, Any]:
    """A provider result's outputs (always set here)."""
    assert result.outs is not None
    return dict(result.outs)


def labels(api: FakeConfigs) -> dict[str, str]:
    raw = api.labels("dss-queue.exp-b")
    return {k.removeprefix(queue.LABEL): v for k, v in raw.items()}


def test_create_makes_the_named_config_with_its_data_and_labels(api: FakeConfigs) -> None:
    """The entry is `dss-queue.<job>`: the data as given, queued, with priority, ask, since."""
    made = queue.QueueEntryProvider().create(props(priority=3))
    assert api.data("dss-queue.exp-b") == DATA, "the entry's data"
    got = labels(api)
    assert (got["state"], got["priority"], got["ask"]) == ("queued", "3", queue.ask_label(ASK))
    assert float(got["since"]) > 0, "since: the first submit"
    assert outs(made)["state"] == "queued" and outs(made)["name"] == "dss-queue.exp-b"


def test_read_returns_state_position_and_reason(api: FakeConfigs) -> None:
    """A refresh shows where the job stands, as the last pass labelled it."""
    made = queue.QueueEntryProvider().create(props())
    stand = {"state": "reserved", "position": "1", "reason": "needs 2 host(s)", "hosts": "h1,h2"}
    queue.set_labels(api, "exp-b", lambda _e: stand)
    read = queue.QueueEntryProvider().read(made.id, props())
    assert (outs(read)["state"], outs(read)["position"], outs(read)["reason"]) == (
        "reserved", 1, "needs 2 host(s)")  # fmt: skip
    assert outs(read)["hosts"] == ["h1", "h2"]


def test_read_of_a_removed_entry_is_gone(api: FakeConfigs) -> None:
    """An entry removed on the swarm reads as gone (the next `up` makes it again)."""
    made = queue.QueueEntryProvider().create(props())
    api.remove_config(made.id)
    assert queue.QueueEntryProvider().read(made.id, props()).id is None


def test_a_stale_version_is_read_again_never_overwritten(api: FakeConfigs) -> None:
    """Another writer's change between the read and the write is kept: the change is
    applied again over it, at the new version."""
    queue.QueueEntryProvider().create(props())

    def other(fake: FakeConfigs) -> None:
        (cfg,) = fake.by_id.values()
        cfg["Spec"]["Labels"][queue.LABEL + "by"] = "runner-1"
        cfg["Version"]["Index"] += 1

    api.interfere = other
    queue.set_labels(api, "exp-b", lambda _e: {"state": "reserved"})
    got = labels(api)
    assert (got["state"], got["by"]) == ("reserved", "runner-1"), "both changes kept"


def test_a_change_that_never_lands_is_reported(api: FakeConfigs) -> None:
    """Stale on every try: a HostError naming the entry, no blind write."""
    queue.QueueEntryProvider().create(props())

    def bump(fake: FakeConfigs) -> None:
        (cfg,) = fake.by_id.values()
        cfg["Version"]["Index"] += 1
        fake.interfere = bump

    api.interfere = bump
    with pytest.raises(HostError, match=r"dss-queue.exp-b: its labels changed under 5"):
        queue.set_labels(api, "exp-b", lambda _e: {"state": "admitted"})
    assert labels(api)["state"] == "queued"


def test_the_change_sees_the_entry_as_read(api: FakeConfigs) -> None:
    """`change` may decline (None) after reading the entry: nothing is written."""
    queue.QueueEntryProvider().create(props())
    queue.set_labels(api, "exp-b", lambda e: None if e.state == "queued" else {"state": "x"})
    assert api.updates == 0 and labels(api)["state"] == "queued"


def test_update_of_priority_relabels_and_keeps_since(api: FakeConfigs) -> None:
    """A new priority is a label update: same config, same since."""
    p = queue.QueueEntryProvider()
    made = p.create(props())
    since = labels(api)["since"]
    out = outs(p.update(made.id, outs(made), props(priority=5)))
    assert labels(api)["priority"] == "5" and labels(api)["since"] == since
    assert out["name"] == "dss-queue.exp-b" and len(api.by_id) == 1


def test_update_of_data_remakes_the_entry_keeping_its_place(api: FakeConfigs) -> None:
    """New data (a resubmit with other code) remakes the config: since and state kept."""
    p = queue.QueueEntryProvider()
    made = p.create(props())
    queue.set_labels(api, "exp-b", lambda _e: {"state": "reserved", "hosts": "h1,h2"})
    before = labels(api)
    p.update(made.id, outs(made), props(data={**DATA, "code_digest": "def"}))
    after = labels(api)
    assert api.data("dss-queue.exp-b")["code_digest"] == "def"
    assert (after["since"], after["state"], after["hosts"]) == (
        before["since"], "reserved", "h1,h2")  # fmt: skip


def test_create_over_a_left_entry_keeps_its_since(api: FakeConfigs) -> None:
    """An entry the stack's state lost (an interrupted `up`) is taken over, its place kept."""
    api.create_config("dss-queue.exp-b", b"{}", labels={queue.LABEL + "since": "12.000"})
    queue.QueueEntryProvider().create(props())
    assert labels(api)["since"] == "12.000" and api.data("dss-queue.exp-b") == DATA


def test_delete_removes_it_and_tolerates_its_absence(api: FakeConfigs) -> None:
    """Delete removes the config; one already gone is not an error."""
    p = queue.QueueEntryProvider()
    made = p.create(props())
    p.delete(made.id, props())
    assert api.by_id == {}
    p.delete(made.id, props())


def test_delete_goes_through_another_manager_when_its_own_is_lost(
    api: FakeConfigs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manager the entry was made through does not answer (a transport error): the
    entry is removed through the next ssh:// host that answers as a manager, a worker's
    refusal passed over; every host tried in the file's order."""
    from docker.errors import APIError

    p = queue.QueueEntryProvider()
    made = p.create(props())
    ssh_hosts = {f"ssh://root@h{i}": {"address": f"h{i}"} for i in (1, 2, 3)}
    tried: list[str] = []

    class Worker:
        def configs(self, **_kw: Any) -> Any:
            raise APIError("This node is not a swarm manager.")

    def client(ep: dict[str, Any], _ssh: Any = None) -> Any:
        tried.append(ep["url"])
        if ep["url"] == "ssh://root@h1":
            raise EngineUnreachable("ssh root@h1: connect to host h1 port 22: No route to host")
        return SimpleNamespace(api=Worker()) if ep["url"] == "ssh://root@h2" else Client(api)

    monkeypatch.setattr(queue, "docker_client", client)
    p.delete(made.id, props(leader_endpoint={"url": "ssh://root@h1"}, ssh_hosts=ssh_hosts))
    assert api.by_id == {} and tried == ["ssh://root@h1", "ssh://root@h2", "ssh://root@h3"]


def test_delete_goes_through_another_manager_when_its_own_has_no_leader(
    api: FakeConfigs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manager it was made through answers that its swarm has no leader (cut off
    from the others, or rejoining): another manager is asked."""
    from docker.errors import APIError

    p = queue.QueueEntryProvider()
    made = p.create(props())

    class Alone:
        def configs(self, **_kw: Any) -> Any:
            raise APIError("rpc error: The swarm does not have a leader.")

    def client(ep: dict[str, Any], _ssh: Any = None) -> Any:
        return SimpleNamespace(api=Alone()) if ep["url"] == "ssh://root@h1" else Client(api)

    monkeypatch.setattr(queue, "docker_client", client)
    ssh_hosts = {f"ssh://root@h{i}": {"address": f"h{i}"} for i in (1, 2)}
    p.delete(made.id, props(leader_endpoint={"url": "ssh://root@h1"}, ssh_hosts=ssh_hosts))
    assert api.by_id == {}


def test_delete_raises_another_refusal_of_its_own_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any other answer of the entry's manager is raised as it is: no other is asked."""
    from docker.errors import APIError

    asked: list[str] = []

    class Refuses:
        def configs(self, **_kw: Any) -> Any:
            raise APIError("403 Forbidden")

    def client(ep: dict[str, Any], _ssh: Any = None) -> Any:
        asked.append(ep["url"])
        return SimpleNamespace(api=Refuses())

    monkeypatch.setattr(queue, "docker_client", client)
    ssh_hosts = {f"ssh://root@h{i}": {"address": f"h{i}"} for i in (1, 2)}
    with pytest.raises(APIError, match="403"):
        queue.QueueEntryProvider().delete(
            "x", props(leader_endpoint={"url": "ssh://root@h1"}, ssh_hosts=ssh_hosts)
        )
    assert asked == ["ssh://root@h1"]


def test_delete_raises_the_transport_error_when_no_manager_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No host answers: the delete fails with what the transport said of its own
    manager, naming it (never a delete reported done)."""

    def client(ep: dict[str, Any], _ssh: Any = None) -> Any:
        raise EngineUnreachable(f"docker {ep['url']}: no route to host")

    monkeypatch.setattr(queue, "docker_client", client)
    ssh_hosts = {f"ssh://root@h{i}": {"address": f"h{i}"} for i in (1, 2)}
    with pytest.raises(EngineUnreachable, match="docker ssh://root@h1: no route"):
        queue.QueueEntryProvider().delete(
            "x", props(leader_endpoint={"url": "ssh://root@h1"}, ssh_hosts=ssh_hosts)
        )


def test_list_entries_reads_only_queue_configs(api: FakeConfigs) -> None:
    """Other configs (the submit lock) are not entries."""
    api.create_config("dss-submit-lock", b"x")
    queue.QueueEntryProvider().create(props())
    assert [e.job for e in queue.list_entries(api)] == ["exp-b"]


def test_diff_sees_the_inputs_not_the_outputs(api: FakeConfigs) -> None:
    """A refresh's new state or reason is no change; a new ask is."""
    p = queue.QueueEntryProvider()
    made = p.create(props())
    olds = {**outs(made), "state": "reserved", "reason": "x"}
    assert not p.diff(made.id, olds, props()).changes
    assert p.diff(made.id, olds, props(ask={**ASK, "nodes": 1})).changes
