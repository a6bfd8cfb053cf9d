"""Render `pulumi preview --json` as the markdown a reviewer reads.

Pure functions over the engine's preview digest (pulumi pkg/display/json.go,
`PreviewDigest`/`PreviewStep`): `{"steps": [{"op", "urn", "oldState", "newState",
"diffReasons", "replaceReasons", "detailedDiff"}], "changeSummary", "diagnostics"}`.

Per component (the parent `deepspeed-swarm:<module>:<Class>` in the URN), one table
row per change, and a training impact for each: whether it restarts the running job,
moves tasks between nodes, or leaves training alone, decided from the resource's
component, type and inputs (delivery/impact.py), never from its name. Only property
*names* are printed, never values: inputs may hold secrets (the engine masks them,
but a name is all a reviewer needs to find the line in the full diff).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Impact is re-exported: the comment's callers (tests, acceptance) import it from here.
from delivery.impact import Impact as Impact
from delivery.impact import assess
from delivery.roles import Role, role_of
from infra.layout import PROJECT, STACK_TYPE
from infra.render.verdict import exception_of

EXCEPTION_CHARS = 200
"""A failed command's exception line in the comment is cut to this many characters."""

PROJECT_PREFIX = f"{PROJECT}:"
ROOT_COMPONENT = "(stack)"

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
    role: Role


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
    """Property paths that differ: the detailed diff when the provider gave one. A
    dynamic provider cannot (Python's DiffResult has no keys), so for an update with
    none the top-level inputs that differ stand in (the engine's own `__provider`
    blob, which any program change rewrites, left out)."""
    detailed = step.get("detailedDiff") or {}
    keys = list(detailed) or [*(step.get("replaceReasons") or []), *(step.get("diffReasons") or [])]
    if not keys and step.get("op") == "update":
        old, new = inputs(step, "oldState"), inputs(step, "newState")
        keys = [
            k for k in sorted({*old, *new}) if not k.startswith("__") and old.get(k) != new.get(k)
        ]
    return tuple(sorted(dict.fromkeys(str(k) for k in keys)))


def inputs(step: Mapping[str, Any], which: str) -> Mapping[str, Any]:
    """The inputs of a step's `oldState` or `newState` (empty when it has none)."""
    return (step.get(which) or {}).get("inputs") or {}


def classify(
    types: Sequence[str], op: str, keys: tuple[str, ...], step: Mapping[str, Any]
) -> tuple[Role, Impact, str]:
    """A change's role (from its component, type and inputs; delivery/roles.py) and
    what it does to the running job, and why."""
    old, new = inputs(step, "oldState"), inputs(step, "newState")
    role = role_of(component_of(types), types[-1], new or old)
    return (role, *assess(role, op, keys, old, new))


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
        role, level, why = classify(types, op, keys, step)
        out.append(Change(urn, name, type_, component_of(types), op, keys, level, why, role))
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


def _record(digest: Mapping[str, Any], role: Role) -> tuple[str, Mapping[str, Any]]:
    """The op and the recorded outputs of the resource of `role` (("", {}) if none)."""
    for st in digest.get("steps", []):
        types, _ = parse_urn(st["urn"])
        old = st.get("oldState") or {}
        if role_of(component_of(types), types[-1], old.get("inputs") or {}) is role:
            return str(st.get("op", "")), old.get("outputs") or {}
    return "", {}


def run_line(digest: Mapping[str, Any]) -> str:
    """The run's state as its record holds it (after `preview --refresh`: as the tasks
    report it now), or "" when the stack has no run yet. The launcher log's own line
    stays out of the comment (it is the training's output, not the program's)."""
    _, outs = _record(digest, Role.RUN)
    if not outs.get("state"):
        return ""
    state, step, ckpt = outs["state"], outs.get("step"), outs.get("checkpoint")
    text = f"Run `{outs.get('run_name', '?')}`: **{state}**"
    if step is not None:
        text += f" at step {step}"
    why = _shown_reason(str(outs.get("reason") or ""))
    if state in ("failed", "stalled"):
        text += f" ({why}); `pulumi up` relaunches it from " + (
            f"checkpoint `{ckpt}`" if ckpt else "its first step"
        )
    n = outs.get("restarts") or 0
    if isinstance(n, int) and n:
        text += f"; {n} automatic restart{'s' if n != 1 else ''} so far"
    return text + "."


def _shown_reason(reason: str) -> str:
    """A run's reason as the comment shows it: without the launcher log's own line; a
    failed command's exception (the script's text, which may hold markup) as a code span."""
    words, exception = exception_of(reason.split("; the launcher log says")[0])
    if not exception:
        return words
    line = exception.splitlines()[-1].replace("`", "'")
    if len(line) > EXCEPTION_CHARS:
        line = line[: EXCEPTION_CHARS - 3] + "..."
    return f"{words}: `{line}`"


def gate_line(digest: Mapping[str, Any]) -> str:
    """The collective gate's last result, and whether this change measures again (it
    does when the tasks change: before the launch starts in them); "" without a gate."""
    op, outs = _record(digest, Role.GATE)
    if not outs.get("state"):
        return ""
    state = outs["state"]
    text = f"Collective gate: **{state}**"
    if state == "passed":
        figures = outs.get("figures") or []
        top = max(figures, key=lambda f: f.get("bytes", 0)) if figures else {}
        text += (
            f", {outs.get('busbw_MBps')} MB/s bus bandwidth at {top.get('bytes', '?')} bytes"
            f" (floor {outs.get('min_busbw_MBps')}), {outs.get('seconds')} s"
        )
    elif outs.get("reason"):
        text += f" ({outs['reason']})"
    if op in ("update", "replace", "create-replacement"):
        text += "; this change measures again before the launch"
    return text + "."


JOB_INPUTS = (Role.TRAINING_IMAGE, Role.OVERLAY, Role.SECRET, Role.SSH_KEY)
"""What a cluster stack gives its jobs (its `imageRef`, `networkId`, `secretRefs`): a new
image, a replaced overlay or a new secret rolls every job's services."""


def reaches_jobs(c: Change) -> bool:
    """Whether a cluster's change restarts its jobs' runs (their services roll onto it)."""
    if c.role not in JOB_INPUTS or c.op == "delete":
        return False
    return c.role is not Role.OVERLAY or c.impact is Impact.RESTARTS


def jobs_line(cs: Sequence[Change], jobs: Sequence[str]) -> str:
    """A cluster stack's line on its jobs: which of them this change restarts."""
    if not jobs:
        return ""
    names = ", ".join(f"`{j}`" for j in jobs)
    why = sorted({c.name for c in cs if reaches_jobs(c)})
    if not why:
        return f"Jobs on this cluster: {names}. This change restarts none of them."
    return (
        f"Jobs on this cluster: {names}. **This change restarts every one of them** "
        f"(through {', '.join(f'`{n}`' for n in why)}); each job's own preview shows "
        "its services rolling."
    )


def render(
    digest: Mapping[str, Any], stack: str, transport: str = "", jobs: Sequence[str] = ()
) -> str:
    """The PR comment for one stack's preview; `transport`: what the ranks talk over
    (infra/render/labels.py transport_summary), shown under the heading, with the run's
    state (`run_line`), the collective gate's last result (`gate_line`) and, for a
    cluster stack, which of its `jobs` the change restarts (`jobs_line`)."""
    cs = changes(digest)
    lines = [f"### Training impact of `{stack}`", ""]
    if transport:
        lines += [f"Data plane: {transport}.", ""]
    for line in (run_line(digest), gate_line(digest), jobs_line(cs, jobs)):
        if line:
            lines += [line, ""]
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
