"""The verdict: the run's state (running, finished, failed, stalled) from what the
probes saw in its tasks (infra/render/probe.py), as the run's record keeps it in its
outputs. Pure; no Pulumi, no I/O: tested directly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from infra.render.probe import Probe

RunStateName = Literal["running", "finished", "failed", "stalled", "unknown"]
BAD_STATES: tuple[RunStateName, ...] = ("failed", "stalled")
"""States that are drift: refresh reports them, `pulumi up` relaunches the run."""


@dataclass(frozen=True)
class RunState:
    """The run's state as the run resource records it (its outputs): stable while it
    runs, so a refresh of a healthy run changes nothing."""

    state: RunStateName
    reason: str = ""
    step: int | None = None
    """The last logged step: set once the run is not running (finished, failed, stalled)."""
    checkpoint: str | None = None
    """The newest complete checkpoint, where a relaunch resumes (not while running)."""
    restarts: int = 0
    """Automatic restarts recorded for the run (all launches)."""

    def outputs(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "step": self.step,
            "checkpoint": self.checkpoint,
            "restarts": self.restarts,
        }


def verdict(
    master: Probe,
    others: list[Probe],
    target_steps: int,
    stall_after_s: int,
    exit_records: Sequence[str] = (),
) -> RunState:
    """The run's state from the master task's probe (its metrics, checkpoints and logs
    are rank 0's) and the other launch targets' (SSH-less launches: one per node).

    - processes anywhere, or a supervisor about to restart: running, unless no step was
      logged for `stall_after_s` since the later of the last step and the start of the
      oldest process (the model's build counts as progress): stalled;
    - a supervisor between attempts while the stop marker is set is not alive: it
      restarts nothing and exits at its next look. (A launch replaced while the old
      supervisor waited to restart found it, kept it as the running run, and the run
      died after `up` said running: seen on the 8-host lab after a drain.)
    - nothing left: finished when the last step is the target, else failed, with the
      launcher log's last failure line (or the spent budget) as the reason.

    `exit_records` (training.command: the launch targets' nodes, `master` or node ranks):
    once the master's probe saw any exit record, the run's end is judged from them
    (`command_end`); progress is DeepSpeed's `[Rank 0] step=` else the metrics file's,
    and a `stall_after_s` of 0 never stalls (a command's stall only where set). Runs
    with no exit record keep the judgement above.
    """
    if exit_records:
        master = _command_progress(master)
    probes = [master, *others]
    alive = any(p.procs or (p.supervisor and not p.stopping) for p in probes)
    step = master.last_step
    ckpt = master.checkpoint or None
    if alive:
        procs = [p for p in probes if p.procs]
        started = min((p.now - p.age_s for p in procs), default=master.now)
        progress = max(master.last_step_time, float(started))
        idle = master.now - progress
        if procs and idle > stall_after_s and (stall_after_s or not exit_records):
            return RunState(
                "stalled",
                f"no step for {int(idle)}s (stall_after {stall_after_s}s); last step {step}",
                step,
                ckpt,
                master.restarts,
            )
        return RunState("running", restarts=master.restarts)
    if exit_records and master.exits:
        return command_end(master, exit_records)
    if step >= target_steps:
        return RunState("finished", "", step, ckpt, master.restarts)
    if master.budget_spent:
        why = f"restart budget spent after {master.restarts} automatic restarts"
    else:
        why = "no training process is left"
    error = master.error
    reason = f"{why}; last step {step}" + (f"; the launcher log says: {error}" if error else "")
    return RunState("failed", reason, step, ckpt, master.restarts)


def _command_progress(master: Probe) -> Probe:
    """A command's progress: DeepSpeed's last step (at the log's last write) where it
    printed one, else the metrics file's, else the step of DeepSpeed's newest checkpoint
    tag (`global_stepN`). DeepSpeed 0.17's logger stands at WARNING unless the script
    raises it, so its `steps_per_print` lines are often absent; a saved tag is not."""
    if master.ds_step:
        return replace(master, last_step=master.ds_step, last_step_time=float(master.log_time))
    tagged = re.fullmatch(r"global_step([0-9]+)", master.checkpoint)
    if master.last_step or not tagged:
        return master
    return replace(master, last_step=int(tagged.group(1)))


def _who(record: dict[str, Any], node: str) -> str:
    """The failing launch in a reason's words: its node (pdsh: the host the traceback
    came from, where seen) and the rank torchrun named."""
    host = record.get("host")
    where = (
        f"node {host}" if host else ("the pdsh launcher" if node == "master" else f"node {node}")
    )
    rank = record.get("rank")
    return where + (f", rank {rank}" if isinstance(rank, int) else "")


def _time(record: dict[str, Any]) -> float:
    value = record.get("time")
    return float(value) if isinstance(value, int | float) else float("inf")


_EXITED = re.compile(r"^(.*? exited -?\d+): (.+)$", re.DOTALL)
"""A command failure's reason (`command_end`): `<who> exited <rc>: <exception>`."""


def exception_of(reason: str) -> tuple[str, str]:
    """A reason split into the program's words and the training's own exception line
    (`command_end`'s `...exited 1: ValueError: boom` -> (`...exited 1`, `ValueError:
    boom`)); (reason, "") for a reason that names none. Where a reason is shown as
    markup (the PR comment), the exception is the script's text, not the program's."""
    found = _EXITED.match(reason)
    return (found.group(1), found.group(2)) if found else (reason, "")


def command_end(master: Probe, nodes: Sequence[str]) -> RunState:
    """A command's end from its exit records (nothing of it alive): `finished` when
    every launch target's last attempt exited 0; `failed` on a non-zero one, naming
    the node, the rank where the launcher's output gave it, the exit code and the
    exception; `failed` too when a target left no record."""
    step, ckpt, restarts = master.last_step, master.checkpoint or None, master.restarts
    records = master.exits
    # The earliest failure first: per-node launchers share the launcher log, and the
    # node whose rank raised ends before the peers its death breaks.
    bad = sorted(
        ((n, records[n]) for n in nodes if n in records and records[n].get("rc") != 0),
        key=lambda item: _time(item[1]),
    )
    spent = (
        f"restart budget spent after {restarts} automatic restarts; " if master.budget_spent else ""
    )
    if bad:
        node, record = bad[0]
        exception = str(record.get("exception") or "")
        reason = f"{spent}{_who(record, node)} exited {record.get('rc')}" + (
            f": {exception}" if exception else ""
        )
        return RunState("failed", reason, step, ckpt, restarts)
    missing = [n for n in nodes if n not in records]
    if missing:
        reason = (
            f"no training process is left and no exit record from node(s) "
            f"{', '.join(missing)} (its supervisor was killed?)"
        )
        return RunState("failed", reason, step, ckpt, restarts)
    return RunState("finished", "", step, ckpt, restarts)
