"""Prometheus' alert rules (delivered as a Swarm config beside its configuration,
infra/render/prometheus.py): a rank stalled, slow or short of GPU memory; a run's
checkpoint overdue, its automatic restarts and a spent restart budget (the supervisors'
text files); a target down; jobs waiting in a cluster's queue that no pass runs (the
queue's text file, infra/render/queuefile.py). Windows are counted in scrape intervals
(monitoring.alerts). No Pulumi, no I/O: golden files and `promtool test rules` test
them (tests/unit/infra/test_prometheus.py).
"""

from __future__ import annotations

from typing import Any

from infra.config import duration_seconds
from infra.render.promfile import HEADER, TRAIN_JOB, dump, seconds
from infra.render.queuefile import JOBS_METRIC, NOT_RUN_AFTER_S, PASS_METRIC
from infra.render.sections import MonitoringSource
from infra.render.supervisor import BUDGET_METRIC, RESTARTS_METRIC

# What DssRunRestarted looks back over.
RESTART_WINDOW = "15m"
# How far back the stall rule still knows a rank's last step after its target stopped
# answering (its series went stale); longer than any stall window.
STEP_MEMORY_S = 3600


def _train(metric: str) -> str:
    return f'{metric}{{job="{TRAIN_JOB}"}}'


def stall_expr(window: str, recent: str, memory: str) -> str:
    """A rank whose step has not advanced within `window`, while another rank of its run
    advanced within `recent` (it lags), or while it no longer answers and another rank
    of the run does (its process is stopped or hung: in synchronous training the others
    then wait in a collective, alive but not advancing). `memory` keeps a rank's last
    step known after its series went stale. Never for a run whose ranks all finished or
    all stopped answering."""
    step = _train("dss_train_step")
    return f"""(
  last_over_time({step}[{memory}])
  unless on (run, rank) (changes({step}[{window}]) > 0)
)
and on (run, rank)
(
  (
    (last_over_time({step}[{memory}]) unless on (run, rank) {step})
    and on (run) {step}
  )
  or
  (
    last_over_time({step}[{memory}])
    and on (run) (max by (run) (changes({step}[{recent}])) > 0)
  )
)
"""


def slow_expr(window: str, factor: float) -> str:
    """A rank whose own compute time per step exceeds its run's median by `factor`."""
    per_step = (
        f"rate({_train('dss_train_compute_seconds_total')}[{window}])\n"
        f"  / rate({_train('dss_train_steps_total')}[{window}])"
    )
    return f"""(
  {per_step}
)
> on (run) group_left ()
(
  quantile by (run) (0.5,
    {per_step.replace(chr(10), chr(10) + "  ")}
  ) * {factor:g}
)
"""


def alert_rules(cfg: MonitoringSource) -> str:
    """The alert rules file: one group, the ranks' rules, then the runs', the
    targets' and the queue's."""
    rules = [*_rank_rules(cfg), *_run_rules(cfg), *_target_rules(cfg), *_queue_rules()]
    return HEADER + dump({"groups": [{"name": "deepspeed-swarm", "rules": rules}]})


def _window(cfg: MonitoringSource) -> str:
    """How long a rank may stay behind or a target down: monitoring's stall window."""
    return seconds(cfg.monitoring.stall_window_seconds)


def _rank_rules(cfg: MonitoringSource) -> list[dict[str, Any]]:
    """One rank against the rest of its run: stalled, slow, short of GPU memory."""
    mon, a = cfg.monitoring, cfg.monitoring.alerts
    window = _window(cfg)
    recent = seconds((a.stall_intervals - 2) * mon.scrape_seconds)
    memory = seconds(max(STEP_MEMORY_S, 2 * mon.stall_window_seconds))
    labels = ["run", "rank", "node"]
    who = " ".join(f"{k} {{{{ $labels.{k} }}}}" for k in labels)
    return [
        {
            "alert": "DssRankStalled",
            "expr": stall_expr(window, recent, memory),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"Training rank stalled: {who}",
                "description": (
                    f"The step of this rank has not advanced for {window} "
                    f"({a.stall_intervals} scrape intervals) while another rank of the run "
                    "advanced or still answers: its process is stopped, hung or gone. "
                    "Last step {{ $value }}."
                ),
            },
        },
        {
            "alert": "DssRankSlow",
            "expr": slow_expr(window, a.slow_rank_factor),
            "for": window,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"Training rank slower than its run: {who}",
                "description": (
                    "Its own compute time per step ({{ $value | humanizeDuration }}, batch "
                    f"and forward pass over {window}) is more than {a.slow_rank_factor:g} "
                    "times the median of the run's ranks; every rank waits for it."
                ),
            },
        },
        {
            "alert": "DssGpuMemoryHigh",
            "expr": (
                f"{_train('dss_gpu_memory_used_bytes')}\n"
                f"  / {_train('dss_gpu_memory_total_bytes')}\n"
                f"> {a.gpu_memory_ratio:g}\n"
            ),
            "for": window,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"GPU memory above {a.gpu_memory_ratio:.0%}: {who}",
                "description": (
                    "GPU {{ $labels.gpu_uuid }} has {{ $value | humanizePercentage }} of its "
                    "memory in use: the next larger batch or activation may run out."
                ),
            },
        },
    ]


def _run_rules(cfg: MonitoringSource) -> list[dict[str, Any]]:
    """The run as a whole: its checkpoint overdue, its supervisors' restarts and a spent
    restart budget (their text files, read by the node exporters)."""
    a = cfg.monitoring.alerts
    max_age = duration_seconds(a.checkpoint_max_age)
    return [
        {
            "alert": "DssCheckpointOverdue",
            "expr": (
                "time() - max by (run) ({__name__=~"
                '"dss_train_last_checkpoint_timestamp_seconds|dss_train_start_timestamp_seconds"'
                f', job="{TRAIN_JOB}"}})\n> {max_age}\n'
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "No checkpoint of run {{ $labels.run }} for too long",
                "description": (
                    "The newest complete checkpoint (or the start of training) is "
                    "{{ $value | humanizeDuration }} old; expected at most "
                    f"{a.checkpoint_max_age}. A failure now loses that much training."
                ),
            },
        },
        {
            "alert": "DssRunRestarted",
            # Every node exporter reads the same shared files: one series per supervisor.
            "expr": (
                f"max by (run, supervisor) (increase({RESTARTS_METRIC}[{RESTART_WINDOW}])) > 0\n"
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Run {{ $labels.run }} restarted by its supervisor",
                "description": (
                    "The launcher (supervisor {{ $labels.supervisor }}) exited with an error "
                    "and was restarted from the newest complete checkpoint, about "
                    f'{{{{ printf "%.0f" $value }}}} time(s) in {RESTART_WINDOW}; the steps since '
                    "that checkpoint were redone. /data/logs/{{ $labels.run }}/launcher.log "
                    "says why."
                ),
            },
        },
        {
            "alert": "DssRestartBudgetSpent",
            "expr": f"max by (run, supervisor) ({BUDGET_METRIC}) == 1\n",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Run {{ $labels.run }}: restart budget spent, training stopped",
                "description": (
                    "The supervisor gave up after training.recovery.max_restarts restarts: "
                    "no rank trains. `pulumi preview --refresh` shows the run failed; "
                    "`pulumi up` relaunches it from the newest complete checkpoint."
                ),
            },
        },
    ]


def _target_rules(cfg: MonitoringSource) -> list[dict[str, Any]]:
    """A target Prometheus cannot scrape (a rank's only while its run still answers)."""
    window = _window(cfg)
    # A spare's static targets (host data plane) answer only after a failover.
    rank_up = f'job="{TRAIN_JOB}"' + (', spare!="true"' if cfg.network.data_plane == "host" else "")
    return [
        {
            "alert": "DssTargetDown",
            "expr": (
                f'up{{job!="{TRAIN_JOB}"}} == 0\nor\n(\n'
                f"  up{{{rank_up}}} == 0\n"
                f'  and on (run) (max by (run) (up{{job="{TRAIN_JOB}"}}) == 1)\n)\n'
            ),
            "for": window,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Target down: {{ $labels.job }} {{ $labels.instance }}",
                "description": (
                    f"Prometheus could not scrape it for {window}. A training rank counts "
                    "only while another rank of its run answers (a finished or stopped run "
                    "is not down)."
                ),
            },
        },
    ]


def _queue_rules() -> list[dict[str, Any]]:
    """Jobs wait in a cluster's queue and no pass over it has run for NOT_RUN_AFTER_S:
    nothing starts them (no runner service exists: a person, a CI schedule or a systemd
    unit runs `scripts/job queue CLUSTER --watch`). Every node exporter serves the same
    shared file: one series per cluster and state after `max`."""
    return [
        {
            "alert": "DssQueueNotRun",
            "expr": (
                f"sum by (cluster) (max by (cluster, state) ({JOBS_METRIC})) > 0\n"
                f"and on (cluster)\n"
                f"time() - max by (cluster) ({PASS_METRIC}) > {NOT_RUN_AFTER_S}\n"
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Jobs wait on cluster {{ $labels.cluster }} and nothing starts them",
                "description": (
                    "{{ $value }} job(s) waited in the queue at its last pass, "
                    f"{NOT_RUN_AFTER_S // 60} min or more ago: no `scripts/job queue "
                    "{{ $labels.cluster }} --watch` is running. Start one (docs/jobs.md, "
                    '"Queued jobs").'
                ),
            },
        },
    ]
