"""Rules about monitoring: where Prometheus runs and how often it evaluates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.config.units import duration_seconds

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig


def prometheus_on_a_manager(cfg: StackConfig) -> list[str]:
    # hosts[0]: the cluster's master host, whatever host a job's own master is on.
    first = cfg.hosts[0]
    if not cfg.monitoring.enabled or first.role == "manager":
        return []
    return [
        f"monitoring.enabled: Prometheus runs on the master host {first.name!r}, "
        "which has role 'worker'; allowed: a manager as hosts[0] (the master)"
    ]


def evaluation_interval(cfg: StackConfig) -> list[str]:
    mon = cfg.monitoring
    if not mon.enabled or duration_seconds(mon.evaluation_interval) <= mon.scrape_seconds:
        return []
    return [
        f"monitoring.evaluation_interval: {mon.evaluation_interval} is longer than "
        f"monitoring.scrape_interval {mon.scrape_interval}: alerts see new samples late"
    ]
