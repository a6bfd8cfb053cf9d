"""The cluster queue's metrics (issue 47, item 5; docs/jobs.md, "Queue metrics"): a
Prometheus text file each pass over the queue writes into the shared data dir's
`.dss/metrics`, where every node exporter's textfile collector reads it, as it reads the
supervisors' restart counts. Its names are here, below both of its users: the job
command writes it (jobs/queuemetrics.py) and the alert rules select by it
(infra/render/alerts.py). Pure; no Pulumi, no I/O.

A pass writes what it saw; so does the stop of the last waiting job, once its entry
is gone (the queue then empty). So `dss_queue_pass_timestamp_seconds`
says how old the rest is, and an alert fires when jobs wait and no pass has run for
`NOT_RUN_AFTER_S`: nothing is starting them (no `scripts/job queue CLUSTER --watch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

JOBS_METRIC = "dss_queue_jobs"
WAIT_METRIC = "dss_queue_wait_seconds"
HEAD_WAIT_METRIC = "dss_queue_head_wait_seconds"
PASS_METRIC = "dss_queue_pass_timestamp_seconds"
METRICS = (JOBS_METRIC, WAIT_METRIC, HEAD_WAIT_METRIC, PASS_METRIC)
STATES = ("queued", "reserved")
"""The states of a job that waits (infra/admission.py), each a series of JOBS_METRIC."""
NOT_RUN_AFTER_S = 600
"""Jobs wait and no pass for this long: the queue is not being run."""


@dataclass(frozen=True)
class Waiter:
    """A waiting job as a pass leaves it: its state, place (1: the head; None: not
    placed yet) and first submit (epoch seconds)."""

    job: str
    state: str
    position: int | None
    since: float


def file_name(cluster: str) -> str:
    """The text file of cluster `cluster`'s queue (one per cluster: clusters may share a
    data dir, and the collector refuses one series in two files)."""
    return f"dss-queue-{cluster}.prom"


def _labels(**kv: str) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kv.items()) + "}"


def queue_metrics(cluster: str, waiters: Sequence[Waiter], now: float) -> str:
    """The text file: the waiting jobs by state, each one's wait, the head's wait (0
    with none) and the pass's time, for cluster `cluster` at `now`."""
    head = min(waiters, key=lambda w: (w.position is None, w.position or 0, w.since), default=None)
    c = _labels(cluster=cluster)
    lines = [
        f"# HELP {JOBS_METRIC} Jobs waiting in the cluster's queue, by state, as the last "
        "pass saw them.",
        f"# TYPE {JOBS_METRIC} gauge",
        *(
            f"{JOBS_METRIC}{_labels(cluster=cluster, state=s)} "
            f"{sum(1 for w in waiters if w.state == s)}"
            for s in STATES
        ),
        f"# HELP {WAIT_METRIC} Seconds each waiting job has waited since its first submit.",
        f"# TYPE {WAIT_METRIC} gauge",
        # `run`, not `job`: Prometheus keeps `job` for the scrape job and renames the
        # file's to `exported_job`; a job's run name is its name (infra/config/jobs.py).
        *(
            f"{WAIT_METRIC}{_labels(cluster=cluster, run=w.job, state=w.state)} "
            f"{max(0.0, now - w.since):.0f}"
            for w in sorted(waiters, key=lambda w: w.job)
        ),
        f"# HELP {HEAD_WAIT_METRIC} Seconds the job at the head of the queue has waited "
        "(0: none waits).",
        f"# TYPE {HEAD_WAIT_METRIC} gauge",
        f"{HEAD_WAIT_METRIC}{c} {0.0 if head is None else max(0.0, now - head.since):.0f}",
        f"# HELP {PASS_METRIC} When the last pass over the queue ran (epoch seconds).",
        f"# TYPE {PASS_METRIC} gauge",
        f"{PASS_METRIC}{c} {now:.0f}",
    ]
    return "\n".join(lines) + "\n"
