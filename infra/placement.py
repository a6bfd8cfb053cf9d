"""A job's placement on a shared cluster: which hosts hold its ask now, or why none do.

A job asks for `nodes` hosts with `gpus_per_node` GPUs each, optionally of one GPU
model, or names its hosts. The candidates are the cluster's active hosts that are not
spares, have the model and at least `gpus_per_node` GPUs. Fewer candidates than
`nodes`: the cluster can **never** hold the job (the config rules refuse it). Fewer
candidates with that many GPUs free now: **not now** (the job waits). Else best fit:
the hosts that leave the fewest GPUs free, so that whole hosts stay whole for large
jobs; ties by the cluster's `hosts` order; the chosen hosts in `hosts` order, the
master first (docs/design/sharing.md, 3.1).

Below both of its users, as infra/command.py: the config rules judge the candidates
(infra/config/rules/placement.py) and the job command plans a submit from the GPUs
the cluster's leader reports free (jobs/command.py), so neither imports the other for
it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

HOSTS_KEY = "training.hosts"
NODES_KEY = "training.nodes"


@dataclass(frozen=True)
class HostSlot:
    """One cluster host as the planner sees it."""

    name: str
    order: int
    """Its index in the cluster's `hosts`."""
    gpus: int
    model: str = ""
    spare: bool = False
    active: bool = True


@dataclass(frozen=True)
class Ask:
    """What a job asks for: `nodes` hosts with `gpus_per_node` GPUs each (0: CPU ranks),
    of `gpu_model` when set; `hosts` when the person named them (master first)."""

    job: str
    nodes: int
    gpus_per_node: int
    gpu_model: str | None = None
    hosts: tuple[str, ...] = ()

    def words(self) -> str:
        """`4 host(s) with 8 GPU(s) of model 'fake-a'`, as the messages say it."""
        out = f"{self.nodes} host(s)"
        if self.gpus_per_node:
            out += f" with {self.gpus_per_node} GPU(s)"
        if self.gpu_model is not None:
            out += f" of model {self.gpu_model!r}"
        return out


@dataclass(frozen=True)
class Placement:
    """Where a job runs: its hosts, master first, and its master."""

    hosts: tuple[str, ...]
    master: str


@dataclass(frozen=True)
class Shortfall:
    """Why no placement: `never` (the cluster cannot hold the ask) or `not_now` (not
    enough GPUs free now), with the message naming the job, the key and what is allowed."""

    kind: Literal["never", "not_now"]
    message: str

    @property
    def never(self) -> bool:
        return self.kind == "never"


def fits(host: HostSlot, ask: Ask) -> bool:
    """`host` can ever carry one of the job's tasks: active, not a spare, of the model,
    with enough GPUs."""
    return (
        host.active
        and not host.spare
        and ask.gpu_model in (None, host.model)
        and host.gpus >= ask.gpus_per_node
    )


def candidates(hosts: Sequence[HostSlot], ask: Ask) -> list[HostSlot]:
    """The hosts that can ever carry one of the job's tasks, in `hosts` order."""
    return sorted((h for h in hosts if fits(h, ask)), key=lambda h: h.order)


def _names(hosts: Sequence[HostSlot]) -> str:
    return ", ".join(h.name for h in hosts)


def _alternatives(hosts: Sequence[HostSlot], ask: Ask, have: int) -> list[str]:
    """What the cluster could hold instead: fewer nodes, fewer GPUs per node, another
    model with enough hosts."""
    out = [f"at most {have} node(s)"] if have else []
    pool = [h for h in hosts if h.active and not h.spare and ask.gpu_model in (None, h.model)]
    counts = sorted((h.gpus for h in pool), reverse=True)
    if ask.gpus_per_node and len(counts) >= ask.nodes and counts[ask.nodes - 1] >= 1:
        out.append(f"at most {counts[ask.nodes - 1]} GPU(s) per node")
    if ask.gpu_model is not None:
        models = sorted({h.model for h in hosts} - {ask.gpu_model})
        for m in models:
            other = candidates(hosts, Ask(ask.job, ask.nodes, ask.gpus_per_node, m))
            if len(other) >= ask.nodes:
                out.append(f"another model ({m}: {_names(other)})")
    return out


def never(hosts: Sequence[HostSlot], ask: Ask) -> Shortfall | None:
    """The cluster can never hold the ask (fewer candidates than `nodes`), or None."""
    have = candidates(hosts, ask)
    if len(have) >= ask.nodes:
        return None
    listed = f"{len(have)} ({_names(have)})" if have else "none"
    allowed = " or ".join(_alternatives(hosts, ask, len(have))) or "a cluster with such hosts"
    return Shortfall(
        "never",
        f"{NODES_KEY}: job {ask.job!r} needs {ask.words()}; the cluster has {listed}; "
        f"allowed: {allowed}",
    )


def named_problems(hosts: Sequence[HostSlot], ask: Ask) -> list[str]:
    """What makes the hosts a job names unusable, one message per host: not a cluster
    host, a spare, drained, too few GPUs, another model, named twice; and a count that
    is not `nodes`."""
    by_name = {h.name: h for h in hosts}
    fitting = _names(candidates(hosts, ask)) or "none"
    out = []
    for i, name in enumerate(ask.hosts):
        h = by_name.get(name)
        if h is None:
            why = "is not a host of the cluster"
        elif h.spare:
            why = "is a spare (it carries a task only when Swarm moves one there)"
        elif not h.active:
            why = "is drained"
        elif ask.gpu_model is not None and h.model != ask.gpu_model:
            why = f"has GPU model {h.model!r}, not {ask.gpu_model!r}"
        elif h.gpus < ask.gpus_per_node:
            why = f"has {h.gpus} GPU(s), fewer than {ask.gpus_per_node}"
        elif name in ask.hosts[:i]:
            why = "is named twice"
        else:
            continue
        out.append(
            f"{HOSTS_KEY}: job {ask.job!r} names {name!r}, which {why}; allowed: the "
            f"cluster's hosts that can carry its tasks ({fitting}), each once"
        )
    if ask.hosts and len(ask.hosts) != ask.nodes:
        out.append(
            f"{HOSTS_KEY}: job {ask.job!r} names {len(ask.hosts)} host(s) but "
            f"{NODES_KEY} is {ask.nodes}; allowed: {ask.nodes} host(s), or nodes unset"
        )
    return out


def _not_now(ask: Ask, short: Sequence[str], key: str, wants: str) -> Shortfall:
    return Shortfall(
        "not_now",
        f"{key}: job {ask.job!r} needs {wants}; {'; '.join(short)}; allowed: at most the "
        "GPUs free now (scripts/job gpus), or wait until a job that holds them ends",
    )


def plan(hosts: Sequence[HostSlot], free: Mapping[str, int], ask: Ask) -> Placement | Shortfall:
    """The job's placement given the GPUs free on each host now (`free`: held by no
    other job; a host missing from it is not available now, as a host that is down):
    its named hosts when they are free, else the best fit."""
    if ask.hosts:
        problems = named_problems(hosts, ask)
        if problems:
            return Shortfall("never", "\n".join(problems))
        short = [
            f"{n} has {free.get(n, 0)} free" if n in free else f"{n} is not available"
            for n in ask.hosts
            if free.get(n, -1) < ask.gpus_per_node
        ]
        if short:
            wants = f"{ask.gpus_per_node} GPU(s) free on each of {', '.join(ask.hosts)}"
            return _not_now(ask, short, HOSTS_KEY, wants)
        return Placement(ask.hosts, ask.hosts[0])
    refused = never(hosts, ask)
    if refused is not None:
        return refused
    can = candidates(hosts, ask)
    ready = [h for h in can if h.name in free and free[h.name] >= ask.gpus_per_node]
    if len(ready) < ask.nodes:
        have = ", ".join(f"{h.name}: {free[h.name]} of {h.gpus}" for h in ready)
        now = f"{len(ready)} ({have})" if ready else "none"
        return _not_now(ask, [f"the cluster has {now} free now"], NODES_KEY, ask.words())
    # Best fit: the least left free on each chosen host, ties by `hosts` order.
    chosen = sorted(ready, key=lambda h: (free[h.name] - ask.gpus_per_node, h.order))
    names = tuple(h.name for h in sorted(chosen[: ask.nodes], key=lambda h: h.order))
    return Placement(names, names[0])
