"""What the stack lets an operator do about a bad host, in one config change: the
remedy the collective gate (infra/components/gate.py) and the GPU health facts
(infra/providers/health.py) print beside the host they name."""

from __future__ import annotations

from collections.abc import Sequence

from infra.config import Host


def drain_remedies(hosts: Sequence[Host]) -> dict[str, str]:
    """Per host, the one config change that takes it out of training: drain it (a spare,
    if the stack has one, takes its place). The master (hosts[0]) cannot be drained.
    A multi-node job needs two training hosts: with two, draining one needs a spare
    turned into a training host in the same change, or another host added first."""
    spares = [(i, h) for i, h in enumerate(hosts) if h.spare and h.availability == "active"]
    training = [h for h in hosts if not h.spare and h.availability == "active"]
    out = {}
    for i, h in enumerate(hosts):
        drain = f"set hosts[{i}].availability: drain"
        if i == 0:
            out[h.name] = (
                "it is the master (hosts[0]): put a healthy manager first in `hosts`, then drain it"
            )
        elif len(training) > 2 and spares:
            names = ", ".join(s.name for _, s in spares)
            out[h.name] = f"{drain} (the spare {names} takes its place), then `pulumi up`"
        elif len(training) > 2:
            out[h.name] = (
                f"{drain} (the job runs on one host fewer: this stack has no spare), "
                "then `pulumi up`"
            )
        elif spares:
            j, spare = spares[0]
            out[h.name] = (
                f"{drain} and set hosts[{j}].spare: false (the spare {spare.name} becomes a "
                "training host), then `pulumi up`"
            )
        else:
            out[h.name] = (
                "add a spare host (`spare: true`) or another worker, then "
                f"{drain} and `pulumi up` (two hosts are the fewest a multi-node job runs on)"
            )
    return out
