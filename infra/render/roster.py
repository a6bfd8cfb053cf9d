"""Pure renderers of the task roster (infra/providers/roster.py reads it from the swarm):
its order, which is the node rank, the GPUs held twice, the hostfile and the rank map.
No Pulumi, no I/O: tested directly and by golden files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from infra.layout import MASTER_SERVICE


class RosterEntry(TypedDict):
    """One running training task, as read from the swarm."""

    service: str
    slot: int
    task_id: str
    node: str
    address: str
    container_id: str
    gpu_uuids: list[str]


def order_roster(entries: Iterable[RosterEntry], master: str = MASTER_SERVICE) -> list[RosterEntry]:
    """Master first, then workers by node name: this order is the node rank."""
    return sorted(entries, key=lambda e: (e["service"] != master, e["node"], e["slot"]))


def duplicate_gpus(roster: Sequence[RosterEntry]) -> dict[str, list[str]]:
    """GPU UUIDs assigned to more than one task, with the tasks holding each."""
    holders: dict[str, list[str]] = {}
    for e in roster:
        for uuid in e["gpu_uuids"]:
            holders.setdefault(uuid, []).append(f"{e['service']}.{e['slot']}@{e['node']}")
    return {u: ts for u, ts in sorted(holders.items()) if len(ts) > 1}


def render_hostfile(roster: Sequence[RosterEntry], slots: int) -> str:
    """DeepSpeed/MPI hostfile: one line per node (its overlay address) with `slots=`,
    in the roster's (node-rank) order."""
    return "".join(f"{e['address']} slots={slots}\n" for e in roster)


def rank_map(
    roster: Sequence[RosterEntry], slots: int, models: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Task -> node -> overlay address -> GPUs -> global ranks, in node-rank order.

    `models` (host name -> `hosts[].gpus.model`; a job that names its hosts): each
    entry's `gpu_model` too, empty where the host sets none (the config's default) or no
    host has the node's name. None: no such key, so a stack that names no hosts keeps
    its outputs byte for byte."""
    out = []
    for node_rank, e in enumerate(roster):
        entry: dict[str, Any] = {
            "node_rank": node_rank,
            "task": f"{e['service']}.{e['slot']}",
            "task_id": e["task_id"],
            "node": e["node"],
            "address": e["address"],
            "gpu_uuids": e["gpu_uuids"],
            "ranks": list(range(node_rank * slots, (node_rank + 1) * slots)),
        }
        if models is not None:
            entry["gpu_model"] = models.get(e["node"], "")
        out.append(entry)
    return out
