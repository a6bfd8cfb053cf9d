"""infra.providers.reach: a host that cannot be reached is passed over only when the
swarm knows it lost; else the read fails naming it."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
import requests
from docker.errors import APIError, NotFound

from infra.providers import reach
from infra.providers.errors import EngineUnreachable, HostError, TransportError

pytestmark = pytest.mark.unit

PROPS: dict[str, Any] = {
    "leader_endpoint": {"url": "unix:///h1"},
    "host_endpoints": {
        "h1": {"url": "unix:///h1"},
        "h2": {"url": "unix:///h2"},
        "h3": {"url": "unix:///h3"},
    },
}


def _node(host: str, state: str) -> dict[str, Any]:
    return {"Description": {"Hostname": host}, "Status": {"State": state}}


def _engines(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]) -> list[str]:
    """Per URL, the nodes its engine lists (an exception: raised); returns who was asked."""
    asked: list[str] = []

    class Api:
        def __init__(self, url: str) -> None:
            self.url = url

        def nodes(self) -> Any:
            answer = answers[self.url]
            if isinstance(answer, Exception):
                raise answer
            return answer

    class Client:
        def __init__(self, url: str) -> None:
            self.api = Api(url)

    def client(endpoint: dict[str, Any], _ssh: Any = None) -> Client:
        asked.append(endpoint["url"])
        return Client(endpoint["url"])

    monkeypatch.setattr(reach, "docker_client", client)
    return asked


@pytest.mark.parametrize(
    "error",
    [
        TransportError("h2", "ssh://h2", "ssh: connect to host h2 port 22: Connection refused"),
        EngineUnreachable("docker unix:///h2: connection aborted"),
        requests.exceptions.ConnectionError("aborted"),
        requests.exceptions.Timeout("read timed out"),
        ConnectionError("refused"),
    ],
)
def test_transport_errors(error: Exception) -> None:
    assert reach.is_transport(error)


@pytest.mark.parametrize(
    "error", [APIError("500 Server Error"), NotFound("no such container"), HostError("no task")]
)
def test_answers_are_not_transport_errors(error: Exception) -> None:
    assert not reach.is_transport(error)


def test_the_leader_is_asked_first(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _engines(monkeypatch, {"unix:///h1": [_node("h2", "down")]})
    assert reach.node_state(PROPS, "h2", "unix:///h2") == "down"
    assert asked == ["unix:///h1"]


def test_a_worker_that_refuses_the_nodes_list_is_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader itself is the lost one: the next engine that answers is a manager."""
    answers = {
        "unix:///h2": APIError("This node is not a swarm manager"),
        "unix:///h3": [_node("h1", "down")],
    }
    asked = _engines(monkeypatch, answers)
    assert reach.node_state(PROPS, "h1", "unix:///h1") == "down"
    assert asked == ["unix:///h2", "unix:///h3"], "the unreachable host is not asked"


def test_a_host_without_a_node_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    _engines(monkeypatch, {"unix:///h1": [_node("h3", "ready")]})
    assert reach.node_state(PROPS, "h2", "unix:///h2") == reach.LOST


def test_no_manager_answering_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = ConnectionError("refused")
    _engines(monkeypatch, {"unix:///h1": refused, "unix:///h3": refused})
    assert reach.node_state(PROPS, "h2", "unix:///h2") is None


def test_a_host_known_lost_is_passed_over_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: said.append(msg))
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "down")
    reach.known_lost(PROPS, "h2", "ssh://root@h2", ConnectionError("refused"))
    assert said and "host h2 (ssh://root@h2)" in said[0] and "down" in said[0]


def test_a_ready_host_fails_with_url_and_ssh_s_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "ready")
    error = TransportError("h2", "ssh://root@h2", "debug\nssh: Host key verification failed.")
    with pytest.raises(reach.HostUnreachable) as raised:
        reach.known_lost(PROPS, "h2", "ssh://root@h2", error)
    said = str(raised.value)
    assert said.startswith("host h2 (ssh://root@h2) cannot be reached: ssh: Host key")
    assert "the swarm reports it ready" in said


def test_no_manager_answering_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: None)
    with pytest.raises(reach.HostUnreachable, match="no manager answered"):
        reach.known_lost(PROPS, "h2", "unix:///h2", ConnectionError("refused"))


def test_an_answer_is_passed_over_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    """settle: a Docker API error is an answer: the site keeps what it did with it."""

    def never(*_a: Any) -> None:
        raise AssertionError("no manager is asked for an answer")

    monkeypatch.setattr(reach, "node_state", never)
    reach.settle(PROPS, "h2", "unix:///h2", APIError("500"))


def test_host_named_by_url() -> None:
    assert reach.host_named(PROPS, "unix:///h3") == "h3"
    assert reach.host_named(PROPS, "unix:///elsewhere") == "unix:///elsewhere"
