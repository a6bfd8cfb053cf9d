"""Rules about the stack's kind: a job names its cluster, a cluster deploys no run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig


def job_names_its_cluster(cfg: StackConfig) -> list[str]:
    if cfg.kind == "job" and not cfg.cluster:
        return ["cluster: missing in a job stack; allowed: the name of a stack with kind: cluster"]
    if cfg.kind != "job" and cfg.cluster:
        return [
            f"cluster: {cfg.cluster!r} in a stack of kind {cfg.kind!r}; allowed: only with "
            "kind: job"
        ]
    return []


def monitoring_on_a_cluster(cfg: StackConfig) -> list[str]:
    # Prometheus scrapes the run's services by their fixed names (infra/render/
    # prometheus.py); the jobs' services are named per job and come and go with their
    # stacks. Refused rather than deployed blind.
    if cfg.kind == "single" or not cfg.monitoring.enabled:
        return []
    return [
        f"monitoring.enabled: true with kind {cfg.kind!r}: Prometheus does not yet find "
        "the jobs' services; allowed: false (or kind: single)"
    ]
