"""infra.components.services: how many warm-up tasks the hosts' engines need."""

from __future__ import annotations

import pytest

from infra.components.services import warmup_replicas

pytestmark = pytest.mark.unit


def test_current_engines_get_no_warmup() -> None:
    """Every active host on an engine with the overlay fix (23.0.2 on): no warm-up task."""
    observed = [{"docker_version": "28.5.2"}, {"docker_version": "26.1.5+dfsg1"}]
    assert warmup_replicas(2, observed) == 0


def test_one_old_engine_warms_every_host() -> None:
    """One active host on 20.10 gives every active host its warm-up task (all or none)."""
    observed = [{"docker_version": "28.5.2"}, {"docker_version": "20.10.24+dfsg1"}]
    assert warmup_replicas(2, observed) == 2


@pytest.mark.parametrize("facts", [None, {}, {"docker_version": ""}])
def test_unknown_engine_is_warmed(facts: dict[str, str] | None) -> None:
    """A host whose engine is not known (facts not read, version not printed) is warmed."""
    assert warmup_replicas(3, [{"docker_version": "28.5.2"}, facts, facts]) == 3
