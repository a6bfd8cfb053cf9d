"""The collective-bandwidth gate's pure half: the command each training task runs, the
figures it prints, the pairs that localise a slow host, and the verdict.

The gate (infra/providers/gate.py) runs the image's `dss_train.collective` (a gloo
all-reduce with its bus bandwidth, the deployment guides' "all-reduce across all
nodes" check) in every training task at once, before the launch. If the bus bandwidth
at the largest size is under the stack's floor (`preflight.gate.min_busbw_MBps`), it
measures the ring's pairs in rounds of disjoint pairs (each host meets two partners), and
names the hosts whose every pair was slow: synchronous training runs at the pace of
its slowest link, so one bad NIC or cable drags the whole ring down, and the ring's
figure alone cannot say where.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.layout import IMAGE_HOME, IMAGE_PYTHON

GATE_HOSTFILE = "/tmp/dss-gate-hostfile"
"""Inside each task: the hostfile of the group being measured (rank 0 first)."""
GROUP_TIMEOUT_S = 90
"""One all-reduce run (ring or pair), start to end: a rank whose peer cannot reach it
waits in gloo's own 120 s timeout otherwise; killed, the run counts as failed."""


def collective_script(
    addresses: Sequence[str],
    me: str,
    port: int,
    sizes: Sequence[int],
    iters: int,
    timeout_s: int = GROUP_TIMEOUT_S,
) -> str:
    """What one task runs: write the group's hostfile, then the all-reduce as the
    rank whose address is `me` (rank 0, the first address, prints the figures),
    killed after `timeout_s` (coreutils `timeout`: exit status 137)."""
    hostfile = "".join(f"{a} slots=1\n" for a in addresses)
    argv = [
        "timeout", "-s", "KILL", str(timeout_s),
        IMAGE_PYTHON, "-m", "dss_train.collective", "--hostfile", GATE_HOSTFILE, "--me", me,
        "--port", str(port), "--iters", str(iters), "--sizes", *map(str, sizes),
    ]  # fmt: skip
    return (
        f"printf %s {shlex.quote(hostfile)} > {GATE_HOSTFILE} && cd {IMAGE_HOME} && "
        f"exec {shlex.join(argv)} 2>&1"
    )


def run_failure(rc: int, text: str, timeout_s: int = GROUP_TIMEOUT_S) -> str:
    """Why an all-reduce run failed, from its exit status and output."""
    if rc == 137:
        said = f"; it said: {last_words(text)}" if text.strip() else ""
        return f"timed out after {timeout_s}s (a peer unreachable or far too slow){said}"
    return last_words(text)


@dataclass(frozen=True)
class Figure:
    """One size's all-reduce: bytes, seconds per all-reduce, bus bandwidth in MB/s."""

    nbytes: int
    seconds: float
    busbw_mbps: float
    sum_ok: bool

    def outputs(self) -> dict[str, Any]:
        return {
            "bytes": self.nbytes,
            "seconds": round(self.seconds, 6),
            "busbw_MBps": round(self.busbw_mbps, 2),
            "sum_ok": self.sum_ok,
        }


def largest(figures: Sequence[Figure]) -> Figure | None:
    """The figure at the largest size (the one the floor applies to); None without any."""
    return max(figures, key=lambda f: f.nbytes) if figures else None


# The gate's record: GateResult.outputs() keys, the resource's outputs, the stack output.
GATE_OUTPUTS = ("state", "reason", "busbw_MBps", "figures", "localisation", "seconds")


def parse_figures(text: str) -> list[Figure]:
    """The JSON lines rank 0 printed (other lines, torch's warnings, ignored)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
            out.append(
                Figure(
                    int(row["bytes"]),
                    float(row["seconds"]),
                    float(row["busbw_MBps"]),
                    bool(row["sum_ok"]),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out


def last_words(text: str, limit: int = 300) -> str:
    """The last non-blank line of a failed run's output, for the error."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:limit]


def pair_rounds(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The ring's pairs (i, i+1 mod n), so that every host meets two partners (with two
    hosts, the one pair), put greedily into rounds of disjoint pairs that run at once:
    two rounds for an even count of hosts, three for an odd one."""
    n = len(hosts)
    if n < 2:
        return []
    if n == 2:
        return [[(hosts[0], hosts[1])]]
    ring = [(hosts[i], hosts[(i + 1) % n]) for i in range(n)]
    rounds: list[list[tuple[str, str]]] = []
    for pair in ring:
        for r in rounds:
            if not any(h in p for p in r for h in pair):
                r.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds


@dataclass(frozen=True)
class Localisation:
    """Which hosts the pairs blame: `slow` every pair of theirs was under the floor;
    `links` slow pairs neither of whose hosts is to blame on its own."""

    slow: list[str]
    links: list[tuple[str, str]]
    pairs: dict[tuple[str, str], float] = field(default_factory=dict)
    errors: dict[tuple[str, str], str] = field(default_factory=dict)
    """Pairs whose all-reduce failed (counted as 0 MB/s), and why."""

    def outputs(self) -> dict[str, Any]:
        return {
            "slow_hosts": self.slow,
            "slow_links": [list(p) for p in self.links],
            "pairs": [
                {
                    "hosts": list(p),
                    "busbw_MBps": round(v, 2),
                    **({"error": self.errors[p]} if p in self.errors else {}),
                }
                for p, v in self.pairs.items()
            ],
        }


def localise(
    hosts: Sequence[str],
    pairs: Mapping[tuple[str, str], float],
    floor: float,
    errors: Mapping[tuple[str, str], str] | None = None,
) -> Localisation:
    """Blame from pair figures (MB/s; a pair that failed to run counts as 0). A host
    is slow when every pair it was in is under the floor; with two hosts there is one
    pair, and both are named (which of the two cannot be told without a third)."""
    bad = {p for p, v in pairs.items() if v < floor}
    slow = [
        h for h in hosts if (mine := [p for p in pairs if h in p]) and all(p in bad for p in mine)
    ]
    links = [p for p in pairs if p in bad and not (set(p) & set(slow))]
    return Localisation(slow, links, dict(pairs), dict(errors or {}))


@dataclass(frozen=True)
class GateResult:
    """The gate's record: `passed`, `failed` or `skipped` (training already ran in
    these tasks), the figures of the whole ring, and on failure the localisation."""

    state: str
    reason: str = ""
    figures: list[Figure] = field(default_factory=list)
    localisation: Localisation | None = None
    seconds: float = 0.0

    @property
    def busbw_mbps(self) -> float:
        """The ring's bus bandwidth at its largest size (0 without figures)."""
        top = largest(self.figures)
        return top.busbw_mbps if top else 0.0

    def outputs(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "busbw_MBps": round(self.busbw_mbps, 2),
            "figures": [f.outputs() for f in self.figures],
            "localisation": self.localisation.outputs() if self.localisation else None,
            "seconds": round(self.seconds, 1),
        }


def ring_verdict(figures: Sequence[Figure], floor: float) -> str:
    """Why the whole ring fails the gate ("" when it passes)."""
    top = largest(figures)
    if top is None:
        return "the all-reduce printed no figures"
    if not all(f.sum_ok for f in figures):
        return "the all-reduce returned a wrong sum"
    if top.busbw_mbps < floor:
        return (
            f"bus bandwidth {top.busbw_mbps:.1f} MB/s at {top.nbytes} bytes is under "
            f"preflight.gate.min_busbw_MBps {floor:g}"
        )
    return ""


def failure_message(
    reason: str,
    loc: Localisation | None,
    remedies: Mapping[str, str],
    floor: float,
    seconds: float | None = None,
) -> str:
    """The error `pulumi up` prints: why, whom the pairs blame with their figures,
    and what the stack lets the operator do about it (`remedies`: host -> sentence);
    with `seconds`, how long the gate took, ring and pairs."""
    took = f" (the gate took {seconds:.1f} s)" if seconds is not None else ""
    lines = [f"collective gate failed: {reason}; the launch did not start{took}"]
    if loc is not None:
        for p, v in loc.pairs.items():
            if p in loc.errors:
                lines.append(f"  pair {p[0]} <-> {p[1]}: failed ({loc.errors[p]})")
                continue
            mark = "under" if v < floor else "at or over"
            lines.append(f"  pair {p[0]} <-> {p[1]}: {v:.1f} MB/s ({mark} the floor {floor:g})")
        if loc.slow:
            lines.append(f"  slow host(s): {', '.join(loc.slow)} (every pair of theirs was slow)")
            lines += [f"  remedy for {h}: {remedies[h]}" for h in loc.slow if h in remedies]
        for a, b in loc.links:
            lines.append(f"  slow link: {a} <-> {b} (each host is fine with another partner)")
        if not loc.slow and not loc.links:
            lines.append(
                "  every pair meets the floor: the ring as a whole is slow"
                " (check the switch, or the floor)"
            )
    return "\n".join(lines)
