"""Rules about the stack's kind: a job names its cluster, and only a job."""

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
