"""The verdict: the run's state (running, finished, failed, stalled) from what the
probes saw in its tasks (infra/render/probe.py), as the run's record keeps it in its
outputs. Pure; no Pulumi, no I/O: tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def verdict(master: Probe, others: list[Probe], target_steps: int, stall_after_s: int) -> RunState:
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
    """
    probes = [master, *others]
    alive = any(p.procs or (p.supervisor and not p.stopping) for p in probes)
    step = master.last_step
    ckpt = master.checkpoint or None
    if alive:
        procs = [p for p in probes if p.procs]
        started = min((p.now - p.age_s for p in procs), default=master.now)
        progress = max(master.last_step_time, float(started))
        idle = master.now - progress
        if procs and idle > stall_after_s:
            return RunState(
                "stalled",
                f"no step for {int(idle)}s (stall_after {stall_after_s}s); last step {step}",
                step,
                ckpt,
                master.restarts,
            )
        return RunState("running", restarts=master.restarts)
    if step >= target_steps:
        return RunState("finished", "", step, ckpt, master.restarts)
    if master.budget_spent:
        why = f"restart budget spent after {master.restarts} automatic restarts"
    else:
        why = "no training process is left"
    error = master.error
    reason = f"{why}; last step {step}" + (f"; the launcher log says: {error}" if error else "")
    return RunState("failed", reason, step, ckpt, master.restarts)
