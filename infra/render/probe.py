"""The probe: shell run in a training task that says what the run is doing there, and
its reading (`Probe`). The run's record (infra/providers/run.py) runs it in every task
the launch started the run in, and infra/render/verdict.py judges what it saw. Pure; no
Pulumi, no I/O: tested directly.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from infra.layout import DATA_MOUNT
from infra.render.runfiles import (
    BUDGET_SPENT,
    EXIT_PREFIX,
    RESTARTS_FILE,
    launcher_log,
    log_dir,
    stop_marker,
    supervisor_prefix,
)

# The launcher's and the training script's words for a failure, newest wins.
FAILURE_LINES = (
    r"dss-train: error|exits with return code|exited with exit code|Traceback|Error|Killed"
)
# training.command: without a bare `Error`, which a user's script prints in lines that
# are no failure (its reason comes from the exit records).
COMMAND_FAILURE_LINES = r"exits with return code|exited with exit code|Traceback|Killed"
# DeepSpeed's progress line (engine.py, steps_per_print): `[Rank 0] step=N, skipped=S, ...`.
DS_STEP = r"\[Rank 0\] step=[0-9]+"


PROBE_ENV_PATTERN = "DSS_PROBE_PATTERN"
PROBE_ENV_SUPERVISOR = "DSS_PROBE_SUPERVISOR"


def probe_env(run_name: str, pattern: str) -> dict[str, str]:
    """The probe's environment: what it looks for is passed here, not in its text, so
    `pgrep -f` never finds the probe's own shell."""
    return {
        PROBE_ENV_PATTERN: pattern,
        PROBE_ENV_SUPERVISOR: supervisor_prefix(run_name),
    }


def probe_script(run_name: str, command: bool = False) -> str:
    """Shell run in a training task (with `probe_env`): `key=value` lines of what the
    run is doing there (read by `parse_probe`). Times are the task's own clock, so no
    skew between the operator's machine and the hosts enters a verdict.

    `command` (training.command): also the launch targets' exit records, DeepSpeed's
    last `[Rank 0] step=` and the log's time, a DeepSpeed `latest` checkpoint; the
    failure line without a bare `Error`. Without it the text is what it always was."""
    q = shlex.quote
    logs = log_dir(run_name)
    restarts = q(f"{logs}/{RESTARTS_FILE}")
    failures = COMMAND_FAILURE_LINES if command else FAILURE_LINES
    extra = _command_probe(run_name) if command else ""
    return f"""now=$(date +%s)
echo "now=$now"
sup=$(pgrep -f "${PROBE_ENV_SUPERVISOR}" | head -n1 || true)
echo "supervisor=${{sup:+1}}"
[ -e {q(stop_marker(run_name))} ] && echo "stopping=1"
age=0; n=0
for p in $(pgrep -f "${PROBE_ENV_PATTERN}" || true); do
  e=$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' ')
  [ -n "$e" ] || continue
  n=$((n + 1)); [ "$e" -gt "$age" ] && age=$e
done
echo "procs=$n"
echo "age=$age"
echo "last=$(tail -n1 {q(f"{logs}/metrics.jsonl")} 2>/dev/null || true)"
echo "restarts=$(grep -c '"event":"restart"' {restarts} 2>/dev/null || true)"
echo "spent=$(grep -c '"event":"{BUDGET_SPENT}"' {restarts} 2>/dev/null || true)"
log={q(launcher_log(run_name))}
err=$(grep -v '^supervisor: ' "$log" 2>/dev/null | grep -E {q(failures)} | tail -n1)
echo "error=$(printf %s "$err" | cut -c1-300)"
{extra}ck=$(ls -d {q(f"{DATA_MOUNT}/checkpoints/{run_name}")}/step_*/MANIFEST.json 2>/dev/null \\
  | sort | tail -n1)
[ -n "$ck" ] && echo "checkpoint=$(basename "$(dirname "$ck")")"
exit 0
"""


def _command_probe(run_name: str) -> str:
    """training.command's part of the probe: every exit record (`exit.<node>=<json>`),
    DeepSpeed's last step and the launcher log's time, and the checkpoint DeepSpeed's
    `save_checkpoint` names in `latest` (else the newest `step_*`) under
    DSS_CHECKPOINT_DIR; printed before the project's own checkpoint line (the first
    line read wins)."""
    q = shlex.quote
    logs, ckdir = log_dir(run_name), f"{DATA_MOUNT}/checkpoints/{run_name}"
    return f"""for f in {q(logs)}/{EXIT_PREFIX}*.json; do
  [ -f "$f" ] || continue
  n=${{f##*/{EXIT_PREFIX}}}
  echo "{EXIT_PREFIX}${{n%.json}}=$(head -c 8000 "$f" | tr -d '\\n')"
done
echo "dsstep=$(grep -aoE {q(DS_STEP)} "$log" 2>/dev/null | tail -n1 | sed 's/.*step=//')"
echo "logtime=$(stat -c %Y "$log" 2>/dev/null || true)"
latest=$(head -c 200 {q(ckdir + "/latest")} 2>/dev/null | tr -d '\\n' || true)
[ -z "$latest" ] && latest=$(ls -d {q(ckdir)}/step_* 2>/dev/null | sort | tail -n1 \\
  | xargs -r basename)
[ -n "$latest" ] && echo "checkpoint=$latest"
"""


@dataclass(frozen=True)
class Probe:
    """What one probe saw in one task."""

    now: int
    supervisor: bool
    procs: int
    age_s: int
    """How long the oldest training process there has run."""
    last_step: int
    last_step_time: float
    restarts: int
    budget_spent: bool
    error: str
    checkpoint: str
    stopping: bool = False
    """The run's stop marker is set: a supervisor here restarts nothing and exits."""
    exits: dict[str, dict[str, Any]] = field(default_factory=dict)
    """training.command: the launch targets' exit records by node (`master`, or the
    node rank), as infra/task/exitrecord.py wrote them."""
    ds_step: int = 0
    """training.command: the last step DeepSpeed's `[Rank 0] step=` line logged."""
    log_time: int = 0
    """training.command: when the launcher log was last written (the task's clock)."""


def _int(value: str) -> int:
    try:
        return int(value.strip() or 0)
    except ValueError:
        return 0


def parse_probe(text: str) -> Probe:
    """`probe_script`'s output -> Probe (missing or garbled lines read as nothing)."""
    kv: dict[str, str] = {}
    exits: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith(EXIT_PREFIX):
            record = _json_object(value)
            if record:
                exits[key.removeprefix(EXIT_PREFIX)] = record
        elif sep:
            kv.setdefault(key.strip(), value.strip())
    last: dict[str, Any] = {}
    try:
        parsed = json.loads(kv.get("last") or "{}")
        last = parsed if isinstance(parsed, dict) else {}
    except json.JSONDecodeError:
        pass  # a metrics line being written: no step seen
    checkpoint = kv.get("checkpoint", "")
    known = checkpoint.startswith("step_") or (bool(exits) and checkpoint.startswith("global_step"))
    return Probe(
        now=_int(kv.get("now", "")),
        supervisor=kv.get("supervisor") == "1",
        procs=_int(kv.get("procs", "")),
        age_s=_int(kv.get("age", "")),
        last_step=int(last.get("step") or 0),
        last_step_time=float(last.get("time") or 0.0),
        restarts=_int(kv.get("restarts", "")),
        budget_spent=_int(kv.get("spent", "")) > 0,
        error=kv.get("error", ""),
        checkpoint=checkpoint if known else "",
        stopping=kv.get("stopping") == "1",
        exits=exits,
        ds_step=_int(kv.get("dsstep", "")),
        log_time=_int(kv.get("logtime", "")),
    )


def _json_object(text: str) -> dict[str, Any]:
    """A JSON object, or {} for anything else (a record being replaced reads as none)."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
