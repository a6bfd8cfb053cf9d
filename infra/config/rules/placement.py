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


def _job_only(what: str, kind: str, why: str) -> str:
    """The refusal of a job's key (`what`: the key and its value) in a stack of `kind`."""
    return f"{what} in a stack of kind {kind!r}; allowed: only in a job stack ({why})"


def named_hosts(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.hosts is None:
        return []
    if cfg.kind != "job":
        why = "a single or cluster stack trains on its hosts in `hosts` order"
        return [_job_only(f"training.hosts: {t.hosts!r}", cfg.kind, why)]
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


def queued_only_in_a_job(cfg: StackConfig) -> list[str]:
    if cfg.training.queued is None or cfg.kind == "job":
        return []
    why = "scripts/job submit writes it for a job that waits for GPUs"
    return [_job_only("training.queued: set", cfg.kind, why)]


def released_only_in_a_job(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.released is None:
        return []
    if cfg.kind != "job":
        why = "scripts/job queue CLUSTER --run writes it for a job whose run ended"
        return [_job_only("training.released: set", cfg.kind, why)]
    if t.queued is not None:
        return [
            f"training.released: {t.released.state!r} beside training.queued; allowed: one "
            "of them (a released run ended, a queued job has not started)"
        ]
    return []
