"""infra.config.rules.monitoring: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.infra.config.checks import monitored, problems, warnings_of

pytestmark = pytest.mark.unit


def test_prometheus_needs_a_manager_master(raw: dict[str, Any]) -> None:
    """Prometheus runs on the master host, which must be a manager."""
    raw["hosts"][0]["role"], raw["hosts"][1]["role"] = "worker", "manager"
    monitored(raw)
    assert problems(raw) == [
        "monitoring.enabled: Prometheus runs on the master host 'gpu-01', which has role "
        "'worker'; allowed: a manager as hosts[0] (the master)"
    ]


def test_slow_evaluation_warns(raw: dict[str, Any]) -> None:
    """Rules evaluated less often than the data arrives are a warning."""
    monitored(raw, evaluation_interval="1m")
    assert warnings_of(raw) == [
        "monitoring.evaluation_interval: 1m is longer than monitoring.scrape_interval 15s: "
        "alerts see new samples late"
    ]
