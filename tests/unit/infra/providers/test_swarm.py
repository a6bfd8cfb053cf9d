"""infra.providers.swarm: a node update that Swarm's own writes overtook is made again."""

from __future__ import annotations

from typing import Any

import pytest
from docker.errors import APIError

from infra.providers import swarm
from infra.providers.hostops import HostError

pytestmark = pytest.mark.unit


class Node:
    """A node as docker-py gives it: the spec read at some version, and update()."""

    def __init__(self, leader: Leader) -> None:
        self.leader = leader
        self.version = leader.version
        self.attrs = {"Spec": dict(leader.spec)}

    def update(self, spec: dict[str, Any]) -> None:
        if self.leader.error is not None:
            raise self.leader.error
        if self.version != self.leader.version:
            raise APIError(
                "500 Server Error: rpc error: code = Unknown desc = update out of sequence"
            )
        self.leader.spec = spec
        self.leader.version += 1


class Leader:
    """A leader whose node Swarm writes itself `races` times, each just after it was read."""

    def __init__(self, races: int, error: APIError | None = None) -> None:
        self.spec: dict[str, Any] = {"Role": "worker", "Availability": "active", "Labels": {}}
        self.version = 1
        self.races = races
        self.error = error
        self.nodes = self

    def get(self, _node_id: str) -> Node:
        node = Node(self)
        if self.races:
            self.races -= 1
            # The allocator adds a network attachment between our read and our write.
            self.version += 1
        return node


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("infra.providers.swarm.time.sleep", lambda _s: None)


def test_update_out_of_sequence_is_made_again_on_what_is_there_now() -> None:
    """A conflict reads the node again and applies the change to the new spec."""
    leader = Leader(races=2)
    swarm.update_node_spec(leader, "n1", lambda spec: spec | {"Role": "manager"})
    assert leader.spec == {"Role": "manager", "Availability": "active", "Labels": {}}


def test_other_daemon_errors_are_not_retried() -> None:
    """An error other than a sequence conflict is raised at once."""
    leader = Leader(races=0, error=APIError("400 Client Error: invalid role"))
    with pytest.raises(APIError, match="invalid role"):
        swarm.update_node_spec(leader, "n1", lambda spec: spec | {"Role": "boss"})


def test_endless_conflicts_fail_naming_the_node() -> None:
    """A node Swarm never stops writing fails after the attempts, naming it."""
    leader = Leader(races=100)
    with pytest.raises(HostError, match="swarm node n1: every update of 3 came out of sequence"):
        swarm.update_node_spec(leader, "n1", lambda spec: spec, attempts=3)


SSH_URL = "ssh://root@h1"
SSH_SETTINGS = {"address": "h1", "known_hosts": "~/kh", "mux": True}


def test_a_node_is_reached_with_its_ssh_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider hands the host's `ssh_hosts` settings to its Docker client."""
    seen: list[Any] = []

    class Client:
        def info(self) -> dict[str, Any]:
            return {"Swarm": {"LocalNodeState": "inactive"}}

    def client(endpoint: dict[str, Any], ssh: Any = None) -> Client:
        seen.append((endpoint, ssh))
        return Client()

    monkeypatch.setattr(swarm, "docker_client", client)
    props = {"endpoint": {"url": SSH_URL}, "ssh_hosts": {SSH_URL: SSH_SETTINGS}}
    swarm.SwarmInitProvider().delete("swarm1", props)
    assert seen == [({"url": SSH_URL}, SSH_SETTINGS)]


def test_new_ssh_settings_replace_no_node() -> None:
    """`ssh_hosts` is outside `endpoint` and every replace_on: a stack that gains it
    (or a changed key file) keeps its nodes."""
    olds = {"endpoint": {"url": SSH_URL}, "swarm_id": "s", "advertise_addr": "a", "role": "worker"}
    news = {**olds, "ssh_hosts": {SSH_URL: SSH_SETTINGS}}
    assert not swarm.SwarmNodeProvider().diff("n1", olds, news).changes
    assert not swarm.SwarmInitProvider().diff("s", olds, news).changes
