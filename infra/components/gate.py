"""BandwidthGate: the collective-bandwidth gate between the training services and the
launch (infra/providers/gate.py measures; infra/render/gate.py judges and localises).

The launch depends on it, so a failed gate stops `pulumi up` before any training
process starts, naming the slow host(s) with their figures and the remedy this stack
supports (infra/render/remedy.py). Its record is the `gate` stack output and a line of the PR
comment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from infra.components.swarm import ssh_prop
from infra.config import Gate, Host
from infra.providers.gate import CollectiveGate
from infra.render.gate import GATE_OUTPUTS
from infra.render.remedy import drain_remedies


@dataclass(frozen=True)
class BandwidthGateArgs:
    """The gate's settings, the hosts (for the remedies), the training script (to see
    a run already running) and where the tasks are."""

    gate: Gate
    hosts: Sequence[Host]
    script: str
    host_endpoints: pulumi.Input[dict[str, Any]]
    """Host name -> Docker endpoint (`url`, `tls`): the swarm's."""
    tasks: pulumi.Input[list[dict[str, Any]]]
    """The roster's entries (node, service, address, task id); rank 0 first."""
    ssh_hosts: Mapping[str, Any] = field(default_factory=dict)
    """Per ssh:// endpoint URL, its host's SSH settings (swarm.py `ssh_hosts`)."""


class BandwidthGate(pulumi.ComponentResource):
    """The all-reduce across the training tasks, refused under the stack's floor."""

    record: CollectiveGate
    summary: pulumi.Output[dict[str, Any]]
    """The `gate` stack output: state, busbw_MBps, figures, localisation, seconds."""

    def __init__(
        self, name: str, args: BandwidthGateArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:gate:BandwidthGate", name, None, opts)
        g = args.gate
        tasks = pulumi.Output.from_input(args.tasks).apply(
            lambda es: [{k: e[k] for k in ("node", "service", "address", "task_id")} for e in es]
        )
        self.record = CollectiveGate(
            f"{name}-allreduce",
            {
                "tasks": tasks,
                "host_endpoints": args.host_endpoints,
                **ssh_prop(args.ssh_hosts),
                "min_busbw_MBps": g.min_busbw_MBps,
                "sizes": list(g.sizes),
                "iters": g.iters,
                "port": g.port,
                "script": args.script,
                "remedies": drain_remedies(args.hosts),
            },
            pulumi.ResourceOptions(parent=self),
        )
        r = self.record
        self.summary = pulumi.Output.all(
            r.state, r.reason, r.busbw_MBps, r.figures, r.localisation, r.seconds
        ).apply(lambda v: dict(zip(GATE_OUTPUTS, v, strict=True)))
        self.register_outputs({"state": r.state, "busbw_MBps": r.busbw_MBps})
