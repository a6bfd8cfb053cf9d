"""The probe: shell run in a training task that says what the run is doing there, and
its reading (`Probe`). The run's record (infra/providers/run.py) runs it in every task
the launch started the run in, and infra/render/verdict.py judges what it saw. Pure; no
Pulumi, no I/O: tested directly.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from infra.layout import DATA_MOUNT
from infra.render.runfiles import (
    BUDGET_SPENT,
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


PROBE_ENV_PATTERN = "DSS_PROBE_PATTERN"
PROBE_ENV_SUPERVISOR = "DSS_PROBE_SUPERVISOR"


def probe_env(run_name: str, pattern: str) -> dict[str, str]:
    """The probe's environment: what it looks for is passed here, not in its text, so
    `pgrep -f` never finds the probe's own shell."""
    return {
        PROBE_ENV_PATTERN: pattern,
        PROBE_ENV_SUPERVISOR: supervisor_prefix(run_name),
    }


def probe_script(run_name: str) -> str:
    """Shell run in a training task (with `probe_env`): `key=value` lines of what the
    run is doing there (read by `parse_probe`). Times are the task's own clock, so no
    skew between the operator's machine and the hosts enters a verdict."""
    q = shlex.quote
    logs = log_dir(run_name)
    restarts = q(f"{logs}/{RESTARTS_FILE}")
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
err=$(grep -v '^supervisor: ' "$log" 2>/dev/null | grep -E {q(FAILURE_LINES)} | tail -n1)
echo "error=$(printf %s "$err" | cut -c1-300)"
ck=$(ls -d {q(f"{DATA_MOUNT}/checkpoints/{run_name}")}/step_*/MANIFEST.json 2>/dev/null \\
  | sort | tail -n1)
[ -n "$ck" ] && echo "checkpoint=$(basename "$(dirname "$ck")")"
exit 0
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


def _int(value: str) -> int:
    try:
        return int(value.strip() or 0)
    except ValueError:
        return 0


def parse_probe(text: str) -> Probe:
    """`probe_script`'s output -> Probe (missing or garbled lines read as nothing)."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv.setdefault(key.strip(), value.strip())
    last: dict[str, Any] = {}
    try:
        parsed = json.loads(kv.get("last") or "{}")
        last = parsed if isinstance(parsed, dict) else {}
    except json.JSONDecodeError:
        pass  # a metrics line being written: no step seen
    checkpoint = kv.get("checkpoint", "")
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
        checkpoint=checkpoint if checkpoint.startswith("step_") else "",
        stopping=kv.get("stopping") == "1",
    )
