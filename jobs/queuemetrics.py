"""The queue's metrics file (infra/render/queuefile.py), written by each pass over a
cluster's queue (`scripts/job submit`, `job queue --run`, each pass of `--watch`) into
the shared data dir's `.dss/metrics` on the cluster's master host, over SSH as the job
command reads that host (jobs/master.py). Every node exporter's textfile collector
serves it (monitoring.enabled).

Written atomically (a hidden temporary file the collector does not read, then a
rename). A pass whose write fails says so and goes on: a job is never kept from
starting by its metrics. A watch writes at most every `EVERY_S` seconds while what it
saw does not change, so its passes every few seconds are not an SSH login each.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable
from typing import Any

from infra.config import StackConfig
from infra.providers.queue import Entry
from infra.render.queuefile import STATES, Waiter, file_name, queue_metrics
from infra.render.runfiles import METRICS_SUBDIR
from jobs.master import on_master as on_master

EVERY_S = 60.0
"""A pass that saw what the last written file says writes again after this long."""
_MARK = "DSS_QUEUE_METRICS_EOF"
_written: dict[str, tuple[tuple[Waiter, ...], float]] = {}
"""Per cluster: what this process last wrote, and when (its clock)."""


def waiters(entries: Iterable[Entry]) -> list[Waiter]:
    """The waiting jobs among the queue's `entries` (an admitted one is starting)."""
    return [Waiter(e.job, e.state, e.position, e.since) for e in entries if e.state in STATES]


def write_script(cfg: StackConfig, cluster: str, text: str) -> str:
    """Shell, on the master host, that puts `text` in place as the cluster's file."""
    folder = f"{cfg.training.data_dir.rstrip('/')}/{METRICS_SUBDIR}"
    final = f"{folder}/{file_name(cluster)}"
    temp = f"{folder}/.{file_name(cluster)}.tmp"
    if _MARK in text:  # cannot be: the text is rendered from job names and numbers
        raise ValueError(f"the metrics text holds {_MARK}")
    return (
        "set -e\n"
        f"mkdir -p {shlex.quote(folder)}\n"
        f"cat > {shlex.quote(temp)} <<'{_MARK}'\n{text}{_MARK}\n"
        f"mv -f {shlex.quote(temp)} {shlex.quote(final)}\n"
    )


Run = Callable[..., Any]


def publish(
    cfg: StackConfig,
    cluster: str,
    entries: Iterable[Entry],
    out: Callable[[str], Any],
    now: float | None = None,
    run: Run | None = None,
) -> bool:
    """Write cluster `cluster`'s queue metrics as `entries` stand (`cfg`: the cluster's
    settings as its jobs read them; `run`: how a script runs on its master host, by
    default over SSH); False when not written (unchanged and recent, or
    the write failed: said through `out`)."""
    seen = tuple(sorted(waiters(entries), key=lambda w: w.job))
    clock = time.monotonic()
    last = _written.get(cluster)
    if last is not None and last[0] == seen and clock - last[1] < EVERY_S:
        return False
    text = queue_metrics(cluster, seen, time.time() if now is None else now)
    write = on_master if run is None else run
    proc = write(cfg, write_script(cfg, cluster, text), capture_output=True)
    if proc.returncode != 0:
        why = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        out(f"cluster {cluster}: queue metrics not written on {cfg.master.name}: {why[0]}")
        _written.pop(cluster, None)
        return False
    _written[cluster] = (seen, clock)
    return True
