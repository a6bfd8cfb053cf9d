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
