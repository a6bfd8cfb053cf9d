"""Rules about where a job may run: its ask judged against the cluster's candidates
(infra/placement.py), the hosts it names, and the keys only a job has."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.placement import Ask, HostSlot, named_problems, never

if TYPE_CHECKING:
    # Types only, as the other rules: StackConfig runs the rules.
    from infra.config.models.stack import StackConfig


def host_slots(cfg: StackConfig) -> list[HostSlot]:
    """The stack's hosts as the planner sees them."""
    return [
        HostSlot(
            h.name,
            i,
            h.gpus.count,
            h.gpus.model,
            spare=h.spare,
            active=h.availability == "active",
        )
        for i, h in enumerate(cfg.hosts)
    ]


def job_ask(cfg: StackConfig) -> Ask:
    """The stack's training as an ask: `nodes` (else as many as its named hosts, else
    every active training host) x `gpus_per_node`, of `gpu_model`, on its named hosts."""
    t = cfg.training
    named = tuple(t.hosts or ())
    nodes = t.nodes or len(named) or len(cfg.eligible_hosts)
    return Ask(cfg.training.run_name, nodes, t.gpus_per_node, t.gpu_model, named)


def never_placed(cfg: StackConfig) -> str | None:
    """Why the cluster can never hold this job's ask (its named hosts aside), or None."""
    if cfg.kind != "job" or cfg.training.hosts:
        return None
    shortfall = never(host_slots(cfg), job_ask(cfg))
    return None if shortfall is None else shortfall.message


def judged_by_placement(cfg: StackConfig) -> bool:
    """A job whose hosts the placement rules judge: it names them, or the cluster can
    never hold it; the per-host GPU rules then say nothing more of it."""
    return cfg.kind == "job" and (bool(cfg.training.hosts) or never_placed(cfg) is not None)


def job_fits_cluster(cfg: StackConfig) -> list[str]:
    found = never_placed(cfg)
    return [] if found is None else [found]


def named_hosts(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.hosts is None:
        return []
    if cfg.kind != "job":
        return [
            f"training.hosts: {t.hosts!r} in a stack of kind {cfg.kind!r}; allowed: only in a "
            "job stack (a single or cluster stack trains on its hosts in `hosts` order)"
        ]
    if not t.hosts:
        return ["training.hosts: []; allowed: one or more of the cluster's hosts, or unset"]
    return named_problems(host_slots(cfg), job_ask(cfg))


def placement_needs_hosts(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.placement is None or t.hosts:
        return []
    return [
        f"training.placement: {t.placement!r} without training.hosts; allowed: with "
        "training.hosts, or unset"
    ]
