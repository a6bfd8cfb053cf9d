"""Rules about the stack's kind: a job names its cluster, and only a job; the manager a
job goes through is one of its cluster's."""

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


def job_manager_is_a_manager(cfg: StackConfig) -> list[str]:
    if cfg.manager is None:
        return []
    if cfg.kind != "job":
        return [
            f"manager: {cfg.manager!r} in a stack of kind {cfg.kind!r}; allowed: only with "
            "kind: job (a cluster stack goes through its first manager)"
        ]
    names = [h.name for h in cfg.managers]
    if cfg.manager not in names:
        return [
            f"manager: {cfg.manager!r} is not a manager of cluster {cfg.cluster!r}; allowed: "
            + ", ".join(names)
        ]
    return []
