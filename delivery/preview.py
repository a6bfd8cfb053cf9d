"""Render `pulumi preview --json` as the markdown a reviewer reads.

Pure functions over the engine's preview digest (pulumi pkg/display/json.go,
`PreviewDigest`/`PreviewStep`): `{"steps": [{"op", "urn", "oldState", "newState",
"diffReasons", "replaceReasons", "detailedDiff"}], "changeSummary", "diagnostics"}`.

Per component (the parent `deepspeed-swarm:<module>:<Class>` in the URN), one table
row per change, and a training impact for each: whether it restarts the running job,
moves tasks between nodes, or leaves training alone. Only property *names* are
printed, never values: inputs may hold secrets (the engine masks them, but a name
is all a reviewer needs to find the line in the full diff).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.layout import (
    COMMAND_TYPE,
    CONFIG_TYPE,
    DYNAMIC_TYPE,
    IMAGE_TYPE,
    NETWORK_TYPE,
    SECRET_TYPE,
    SERVICE_TYPE,
    STACK_TYPE,
)

PROJECT_PREFIX = "deepspeed-swarm:"
ROOT_COMPONENT = "(stack)"

SERVICE = SERVICE_TYPE
NETWORK = NETWORK_TYPE
SECRET = SECRET_TYPE
IMAGE = IMAGE_TYPE
COMMAND = COMMAND_TYPE
DYNAMIC = DYNAMIC_TYPE
CONFIG = CONFIG_TYPE
# Prometheus and the node exporters (infra/monitoring.py): their own services, image
# and configs; nothing in it is part of a training task.
MONITORING_COMPONENT = "deepspeed-swarm:monitoring:Monitoring"

# Engine ops folded into the four a reviewer counts; the rest are not changes.
_REPLACE_OPS = {"replace", "create-replacement", "delete-replaced", "discard-replaced"}
_OPS = {"create": "create", "update": "update", "delete": "delete", "import": "create"}
# Which of a resource's steps carries the diff a reviewer reads.
_STEP_RANK = {
    "replace": 3,
    **dict.fromkeys(_OPS, 2),
    **dict.fromkeys(_REPLACE_OPS - {"replace"}, 1),
}
OP_ORDER = ("create", "update", "replace", "delete", "drift")


class Impact(enum.IntEnum):
    """What a change does to the running training job (higher is worse)."""

    NONE = 0
    MOVES = 1
    RESTARTS = 2

    @property
    def label(self) -> str:
        return {
            Impact.NONE: "leaves training alone",
            Impact.MOVES: "moves tasks",
            Impact.RESTARTS: "restarts the running job",
        }[self]


@dataclass(frozen=True)
class Change:
    """One resource the preview would change, with its training impact."""

    urn: str
    name: str
    type: str
    component: str
    op: str
    keys: tuple[str, ...]
    impact: Impact
    why: str


def parse_urn(urn: str) -> tuple[list[str], str]:
    """A URN's type chain (outermost parent first, the resource's own type last) and name."""
    parts = urn.split("::", 3)
    if len(parts) != 4 or not parts[0].startswith("urn:pulumi:"):
        raise ValueError(f"not a Pulumi URN: {urn!r}")
    return parts[2].split("$"), parts[3]


def stack_of(urn: str) -> str:
    """The stack a URN belongs to (`urn:pulumi:<stack>::...`)."""
    return urn.split("::", 1)[0].removeprefix("urn:pulumi:")


def component_of(types: Sequence[str]) -> str:
    """The nearest project component among a resource's ancestors."""
    for t in reversed(types[:-1]):
        if t.startswith(PROJECT_PREFIX):
            return t
    return ROOT_COMPONENT


def _op(ops: Iterable[str], step: Mapping[str, Any]) -> str | None:
    ops = set(ops)
    if ops & _REPLACE_OPS:
        return "replace"
    for op in ops:
        if op in _OPS:
            return _OPS[op]
    if "refresh" in ops and (step.get("detailedDiff") or step.get("diffReasons")):
        return "drift"
    return None


def changed_keys(step: Mapping[str, Any]) -> tuple[str, ...]:
    """Property paths that differ: the detailed diff when the provider gave one."""
    detailed = step.get("detailedDiff") or {}
    keys = list(detailed) or [*(step.get("replaceReasons") or []), *(step.get("diffReasons") or [])]
    return tuple(sorted(dict.fromkeys(str(k) for k in keys)))


def _inputs(step: Mapping[str, Any], which: str) -> Mapping[str, Any]:
    return (step.get(which) or {}).get("inputs") or {}


def _replicas(inputs: Mapping[str, Any]) -> Any:
    return ((inputs.get("mode") or {}).get("replicated") or {}).get("replicas")


def _touches(keys: Iterable[str], *prefixes: str) -> bool:
    return any(k == p or k.startswith((f"{p}.", f"{p}[")) for k in keys for p in prefixes)


def _service_impact(
    name: str, op: str, keys: tuple[str, ...], step: Mapping[str, Any]
) -> tuple[Impact, str]:
    if name.endswith("-net-warmup"):
        return Impact.NONE, "overlay warm-up tasks only; training tasks keep running"
    if name.endswith("-standby"):
        return Impact.NONE, "the spares' idle standby task only; training tasks keep running"
    if "-jupyter-" in name:
        return Impact.NONE, "JupyterLab on the master only; training tasks keep running"
    if op == "update" and keys and all(_touches([k], "mode") for k in keys):
        old, new = _replicas(_inputs(step, "oldState")), _replicas(_inputs(step, "newState"))
        return Impact.MOVES, f"replicas {old} -> {new}: tasks start or stop on nodes"
    what = {
        "create": "new training tasks start",
        "delete": "its training tasks stop",
        "replace": "service replaced: its tasks are recreated",
        "update": "Swarm rolls its tasks",
        "drift": "service edited outside Pulumi; `up` rolls its tasks back",
    }[op]
    if _touches(keys, "taskSpec.containerSpec.image"):
        what += " (image changed)"
    return Impact.RESTARTS, what


def _dynamic_impact(name: str, op: str, keys: tuple[str, ...]) -> tuple[Impact, str]:
    if "-swarm-node-" in name:
        if op == "create":
            return Impact.MOVES, "node joins the swarm: tasks can be placed on it"
        if op == "delete":
            return Impact.MOVES, "node leaves the swarm: its task moves or stops"
        return Impact.MOVES, "node labels/role/availability change task placement"
    if name.endswith("-swarm-init"):
        if op in ("replace", "delete", "drift"):
            return Impact.RESTARTS, "the swarm itself is re-initialised"
        return Impact.NONE, "swarm bootstrap"
    if "-facts-" in name:
        return Impact.NONE, "host facts are read-only"
    if name.endswith("-launch-roster"):
        return Impact.NONE, "task roster record; the launch row says whether the run restarts"
    if name.endswith("-ssh-key"):
        return Impact.NONE, "key pair only; services that mount it are listed separately"
    return Impact.NONE, "no training resource"


def _command_impact(op: str) -> tuple[Impact, str]:
    return {
        "create": (Impact.RESTARTS, "launch command created: the run starts"),
        "replace": (
            Impact.RESTARTS,
            "launch replaced: the run is stopped (checkpoint) and restarted",
        ),
        "delete": (Impact.RESTARTS, "launch deleted: the run is stopped (SIGTERM, checkpoint)"),
    }.get(op, (Impact.NONE, "no re-run: only the launch triggers re-run it"))


def _monitoring_impact(type_: str) -> tuple[Impact, str]:
    what = {
        SERVICE: "monitoring service: Prometheus or the node exporters restart",
        IMAGE: "monitoring image: only the monitoring services roll onto it",
        CONFIG: "Prometheus configuration or alert rules: Prometheus restarts with them",
    }.get(type_, "monitoring only")
    return Impact.NONE, f"{what}; training tasks keep running"


def impact(
    type_: str,
    name: str,
    op: str,
    keys: tuple[str, ...],
    step: Mapping[str, Any],
    component: str = ROOT_COMPONENT,
) -> tuple[Impact, str]:
    """What a change does to the running job, and why."""
    if component == MONITORING_COMPONENT:
        return _monitoring_impact(type_)
    if type_ == SERVICE:
        return _service_impact(name, op, keys, step)
    if type_ == COMMAND:
        return _command_impact(op)
    if type_ == DYNAMIC:
        return _dynamic_impact(name, op, keys)
    if type_ == IMAGE:
        if op == "delete":
            return Impact.NONE, "old image build removed"
        return Impact.RESTARTS, "new image: services roll onto its digest"
    if type_ == NETWORK:
        if op in ("update", "create") or (op == "drift" and _touches(keys, "labels")):
            return Impact.NONE, "network labels or a new network; no task moves"
        return Impact.RESTARTS, "overlay replaced: every task on it restarts"
    if type_ == SECRET:
        if op == "create":
            return Impact.NONE, "new secret, not used until a service mounts it"
        return Impact.NONE, "services that mount it roll onto the new one (listed separately)"
    return Impact.NONE, "no training resource"


def changes(digest: Mapping[str, Any]) -> list[Change]:
    """Every change in a preview digest, one per resource, in the engine's order."""
    ops: dict[str, list[str]] = {}
    steps: dict[str, Mapping[str, Any]] = {}
    for step in digest.get("steps") or []:
        urn = step["urn"]
        ops.setdefault(urn, []).append(step["op"])
        rank = _STEP_RANK.get(step["op"], 0)
        if urn not in steps or rank > _STEP_RANK.get(steps[urn]["op"], 0):
            steps[urn] = step
    out = []
    for urn, step in steps.items():
        types, name = parse_urn(urn)
        type_ = types[-1]
        op = _op(ops[urn], step)
        if op is None or type_ == STACK_TYPE or type_.startswith(PROJECT_PREFIX):
            continue
        keys = changed_keys(step)
        component = component_of(types)
        level, why = impact(type_, name, op, keys, step, component)
        out.append(Change(urn, name, type_, component, op, keys, level, why))
    return out


def counts(cs: Iterable[Change]) -> dict[str, int]:
    """Changes per op, in OP_ORDER, zero counts left out."""
    tally = {op: 0 for op in OP_ORDER}
    for c in cs:
        tally[c.op] += 1
    return {op: n for op, n in tally.items() if n}


def _summary(tally: Mapping[str, int]) -> str:
    return ", ".join(f"{n} to {op}" if op != "drift" else f"{n} drifted" for op, n in tally.items())


def _keys_cell(keys: Sequence[str], limit: int = 4) -> str:
    if not keys:
        return ""
    shown = ", ".join(f"`{k}`" for k in keys[:limit])
    return shown + (f" +{len(keys) - limit} more" if len(keys) > limit else "")


def render_changes(cs: Sequence[Change]) -> list[str]:
    """One table per component, components in order of first appearance."""
    lines: list[str] = []
    for component in dict.fromkeys(c.component for c in cs):
        mine = [c for c in cs if c.component == component]
        lines += [
            f"#### `{component}` ({_summary(counts(mine))})",
            "",
            "| resource | op | changed | training impact |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| `{c.name}` | {c.op} | {_keys_cell(c.keys)} | **{c.impact.label}**: {c.why} |"
            for c in mine
        ]
        lines.append("")
    return lines


def render_diagnostics(digest: Mapping[str, Any]) -> list[str]:
    """Warnings and errors of the preview (info lines are the program's prints)."""
    diags = [
        d for d in digest.get("diagnostics") or [] if d.get("severity") in ("warning", "error")
    ]
    if not diags:
        return []
    lines = ["#### Diagnostics", ""]
    for d in diags:
        where = f" `{parse_urn(d['urn'])[1]}`" if d.get("urn") else ""
        message = " ".join(str(d.get("message", "")).split())
        lines.append(f"- **{d['severity']}**{where}: {message}")
    return [*lines, ""]


def overall(cs: Iterable[Change]) -> Impact:
    """The worst impact among the changes."""
    return max((c.impact for c in cs), default=Impact.NONE)


def render(digest: Mapping[str, Any], stack: str) -> str:
    """The PR comment for one stack's preview."""
    cs = changes(digest)
    lines = [f"### Training impact of `{stack}`", ""]
    if not cs:
        lines += ["No changes.", ""]
    else:
        lines += [
            f"{_summary(counts(cs))}. Overall: **{overall(cs).label}**.",
            "",
            *render_changes(cs),
        ]
    lines += render_diagnostics(digest)
    return "\n".join(lines)


def render_drift(digest: Mapping[str, Any], stack: str, run_url: str) -> str:
    """The body of the drift issue: which resources differ from the program."""
    cs = changes(digest)
    names = ", ".join(f"`{c.name}`" for c in cs) or "none (the preview failed; see the run)"
    lines = [
        f"Scheduled `pulumi preview --refresh --expect-no-changes` on `{stack}` found "
        f"resources that differ from the program: {names}.",
        "",
        f"Run: {run_url}",
        "",
        "What `pulumi up` would do to bring them back, and what it does to training:",
        "",
        *render_changes(cs),
        *render_diagnostics(digest),
        'Handle it as in docs/operations.md, "Handle drift".',
        "",
    ]
    return "\n".join(lines)
