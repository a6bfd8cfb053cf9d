"""infra.launch: the task roster as the swarm API reports it."""

from __future__ import annotations

from typing import Any

import pytest
from docker.errors import NotFound

from infra import launch

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

    monkeypatch.setattr(launch, "docker_client", lambda _endpoint: Client())
    props = {"leader_endpoint": {"url": "unix:///x"}, "services": ["ds-master", "ds-worker"]}
    assert launch._roster(props) == []


def test_node_without_description_has_no_hostname() -> None:
    """A node that has only just joined (no Description yet) reads as no hostname."""
    from infra.hostops import node_hostname

    assert node_hostname({"ID": "n1", "Status": {"State": "unknown"}}) == ""
    assert node_hostname({"Description": {"Hostname": "lab-h1"}}) == "lab-h1"
