"""What the job command prints: a row of `job list` per job (with the reasons of runs
that have one below the table), a row of `job gpus` per host of a cluster, and what a
job holds. Pure; jobs/command.py reads what goes in the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from infra.config import ConfigError, StackConfig
from infra.config.models.job import Released
from infra.providers.fit import Holder


@dataclass(frozen=True)
class JobRow:
    """One line of `job list`."""

    name: str
    cluster: str
    state: str
    step: int | None
    loss: float | None
    gpus: str
    reason: str = ""
    """Why the run is failed, stalled or unknown, as its record says; empty otherwise."""
    unread: bool = False
    """True: the refresh asked for failed for this job (`unread_row`): `job list` exits
    1 after printing every row."""

    def line(self) -> str:
        step = "-" if self.step is None else str(self.step)
        loss = "-" if self.loss is None else f"{self.loss:.4f}"
        return (
            f"{self.name:<20} {self.cluster:<16} {self.state:<10} {step:>8} {loss:>8}  {self.gpus}"
        )


def unread_row(row: JobRow, why: str) -> JobRow:
    """`row` of a job whose refresh failed (`why`, naming the manager it went through):
    its state `unknown`, its reason `why` and what its record said as last read."""
    last = f"{row.state}: {row.reason}" if row.reason else row.state
    return replace(row, state="unknown", reason=f"{why}; as last read: {last}", unread=True)


RELEASED_WORDS = "released: its services are gone, its checkpoints and logs stay"


def released_row(name: str, cfg: StackConfig, released: Released) -> JobRow:
    """`job list`'s row of a released job (`training.released`): the verdict its stack
    file keeps (state, step and reason; no loss), nothing asked of the cluster; its
    reason says it was released, so a finished run's row says so too."""
    reason = "; ".join(w for w in (released.reason, RELEASED_WORDS) if w)
    return JobRow(name, cfg.cluster or "", released.state, released.step, None, gpus(cfg), reason)


HEADER = f"{'JOB':<20} {'CLUSTER':<16} {'STATE':<10} {'STEP':>8} {'LOSS':>8}  GPUS"


def list_lines(rows: Sequence[JobRow]) -> list[str]:
    """What `job list` prints: the header and a row per job, then, after a blank line,
    `<job> <state>: <reason>` in full for each run whose record gives a reason (failed,
    stalled, unknown). A reason is a sentence (the launcher log's last failure line), so
    no column of the table could hold it; the table keeps its columns for whoever
    reads it by position."""
    lines = [HEADER, *(r.line() for r in rows)]
    reasons = [f"{r.name} {r.state}: {r.reason}" for r in rows if r.reason]
    return [*lines, "", *reasons] if reasons else lines


@dataclass(frozen=True)
class GpuRow:
    """One line of `job gpus`: a host of the cluster, its GPUs free and who holds the rest."""

    host: str
    role: str
    """`spare` for a spare host, else empty."""
    model: str
    """The host's GPU model (`hosts[].gpus.model`), `-` where the stack names none."""
    free: int | None
    """None: Swarm does not have the host ready and active (down or drained)."""
    total: int | None
    held: tuple[Holder, ...]

    def line(self) -> str:
        free = "down" if self.free is None else f"{max(self.free, 0)} of {self.total}"
        held = "; ".join(h.words() for h in self.held) or "-"
        return f"{self.host:<16} {self.role:<6} {self.model:<12} {free:>8}  {held}"


GPU_HEADER = f"{'HOST':<16} {'ROLE':<6} {'MODEL':<12} {'FREE':>8}  HELD BY"


def gpus(cfg: StackConfig) -> str:
    """What the job holds: nodes x GPUs per node (CPU ranks on a CPU-only cluster)."""
    nodes = len(cfg.training_hosts)
    t = cfg.training
    if t.cpu_only or not t.gpus_per_node:
        return f"{nodes} x {t.ranks_per_node} cpu"
    models = sorted({h.gpus.model for h in cfg.training_hosts if h.gpus.model})
    return f"{nodes} x {t.gpus_per_node} {'/'.join(models) or 'gpu'}"


def failure_words(err: BaseException) -> str:
    """A failure in one line, as the queue's pass says it: a config's problems joined;
    the engine's (a `pulumi up` that failed: code, stdout and stderr in its text) its
    stderr's `error:` lines, else its last line; else the error's own text."""
    if isinstance(err, ConfigError):
        return "; ".join(err.problems)
    text = str(err)
    _, cut, stderr = text.rpartition(" stderr: ")
    lines = [line.strip() for line in (stderr if cut else text).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return "; ".join(errors) if errors else (lines[-1] if lines else type(err).__name__)
