"""Pure renderers of the monitoring stack: Prometheus' configuration, its alert rules
and the command lines of Prometheus and the node exporters. No Pulumi, no I/O:
golden files and `promtool test rules` test them (tests/unit/infra/test_prometheus.py).

Discovery is Swarm's DNS on the overlay: `tasks.<service>` resolves to the address
of every running task of a `dnsrr` service, so Prometheus (a task on the same
overlay) finds each training task and node exporter without the Docker API. A
training task runs `ranks_per_node` ranks, each serving on base port + local rank,
so there is one DNS lookup per local rank.

On the host data plane (`network.data_plane: host`) the training tasks are on no
overlay and in no Swarm DNS: their ranks serve on their hosts' addresses, listed
statically (every active host; a spare's targets carry `spare="true"`, and stay
down until Swarm moves a task there, which the target-down alert does not count).

A cluster stack (`kind: cluster`) has no run of its own: its Prometheus scrapes the
node exporters and itself, and reads the training scrape config of each job from
`scrape_config_files` on the shared data dir (mounted read-only). Each job stack
writes its own file there (infra/components/scrape.py): its services' DNS names, its
ranks per node and its run label, and removes it when the job is removed; the file
is the job's, so a job's preview shows it and a cluster change does not touch it.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from infra.config import duration_seconds
from infra.layout import DATA_MOUNT, TRAIN_UID, training_service_names
from infra.render.runfiles import METRICS_SUBDIR
from infra.render.sections import MonitoringSource
from infra.render.shell import replace_file, task_container
from infra.render.supervisor import BUDGET_METRIC, RESTARTS_METRIC

PROMETHEUS_SERVICE = "ds-prometheus"
NODE_EXPORTER_SERVICE = "ds-node-exporter"
# What DssRunRestarted looks back over.
RESTART_WINDOW = "15m"
# Jobs, as alert rules and dashboards select them.
TRAIN_JOB, NODE_JOB, PROMETHEUS_JOB = "dss-train", "dss-node", "prometheus"
# Inside the monitoring containers (monitoring/Dockerfile).
PROMETHEUS_PORT = 9090
CONFIG_DIR = "/etc/dss-prometheus"
CONFIG_FILE = f"{CONFIG_DIR}/prometheus.yml"
RULES_FILE = f"{CONFIG_DIR}/alerts.yml"
DATA_DIR = "/prometheus"
# The node exporter reads the host's /proc, /sys and / here (bind mounts, read-only).
HOST_ROOT = "/host"
# How far back the stall rule still knows a rank's last step after its target stopped
# answering (its series went stale); longer than any stall window.
STEP_MEMORY_S = 3600
# No secret and nothing per-user here: the monitoring containers run as nobody.
MONITORING_UID = "65534"
# A cluster's jobs' scrape configs: files under this folder of the shared data dir,
# one per job (`<job>.yml`); its Prometheus sees the data dir at DATA_MOUNT, read-only.
SCRAPE_SUBDIR = "monitoring/jobs"


def seconds(n: int) -> str:
    """A Prometheus duration in seconds (`90s`)."""
    return f"{n}s"


def scrape_timeout(cfg: MonitoringSource) -> str:
    """A scrape may take the interval less a second, at most 10 s (Prometheus' default)."""
    return seconds(max(1, min(10, cfg.monitoring.scrape_seconds - 1)))


def train_targets(cfg: MonitoringSource, job: str | None = None) -> list[str]:
    """The DNS names of the training tasks (of job stack `job`, else a single stack's)."""
    master, worker = training_service_names(job)
    services = [master] + ([worker] if cfg.workers else [])
    return [f"tasks.{s}" for s in services]


def host_targets(cfg: MonitoringSource) -> list[dict[str, Any]]:
    """On the host data plane: every active host's rank ports, labelled by node."""
    ports = [cfg.monitoring.rank_metrics_port + r for r in range(cfg.training.ranks_per_node)]
    return [
        {
            "targets": [f"{h.address}:{p}" for p in ports],
            "labels": {"node": h.name, **({"spare": "true"} if h.spare else {})},
        }
        for h in cfg.active_hosts
    ]


def train_scrape(cfg: MonitoringSource, job: str | None = None) -> dict[str, Any]:
    """The scrape config of the run's ranks. A job stack's (`job`) has a name of its own
    (Prometheus wants each unique) and sets the `job` label back to TRAIN_JOB, which
    the rules select."""
    mon = cfg.monitoring
    refresh = mon.scrape_interval
    discovery: dict[str, Any] = (
        {"static_configs": host_targets(cfg)}
        if cfg.network.data_plane == "host"
        else {
            "dns_sd_configs": [
                {
                    "names": train_targets(cfg, job),
                    "type": "A",
                    "port": mon.rank_metrics_port + local_rank,
                    "refresh_interval": refresh,
                }
                for local_rank in range(cfg.training.ranks_per_node)
            ]
        }
    )
    relabel = [{"target_label": "run", "replacement": cfg.training.run_name}]
    if job is not None:
        relabel.append({"target_label": "job", "replacement": TRAIN_JOB})
    return {
        "job_name": TRAIN_JOB if job is None else f"{TRAIN_JOB}-{job}",
        # The ranks' own `run` label wins over the target's; `up` gets the target's.
        "honor_labels": True,
        **discovery,
        # `up` of a rank's target carries its run, so an alert can ask whether the
        # other ranks of the run still answer.
        "relabel_configs": relabel,
    }


def scrape_configs(cfg: MonitoringSource, *, runs: bool = True) -> list[dict[str, Any]]:
    """Training ranks (`runs`: the stack's own run), node exporters, Prometheus itself."""
    refresh = cfg.monitoring.scrape_interval
    node = {
        "job_name": NODE_JOB,
        "dns_sd_configs": [
            {
                "names": [f"tasks.{NODE_EXPORTER_SERVICE}"],
                "type": "A",
                "port": cfg.monitoring.node_exporter_port,
                "refresh_interval": refresh,
            }
        ],
    }
    itself = {
        "job_name": PROMETHEUS_JOB,
        "static_configs": [{"targets": [f"localhost:{PROMETHEUS_PORT}"]}],
    }
    return [train_scrape(cfg), node, itself] if runs else [node, itself]


def prometheus_config(cfg: MonitoringSource, *, jobs: bool = False) -> str:
    """prometheus.yml (delivered as a Swarm config, see infra/components/monitoring.py).
    `jobs` (a cluster stack): no run of its own, its jobs' files instead."""
    mon = cfg.monitoring
    doc: dict[str, Any] = {
        "global": {
            "scrape_interval": mon.scrape_interval,
            "scrape_timeout": scrape_timeout(cfg),
            "evaluation_interval": mon.evaluation_interval,
        },
        "rule_files": [RULES_FILE],
    }
    if jobs:
        # Read at start and on SIGHUP (a job's file sends one): Prometheus 2.43+.
        doc["scrape_config_files"] = [job_scrape_path("*")]
    doc["scrape_configs"] = scrape_configs(cfg, runs=not jobs)
    return _HEADER + _dump(doc)


def job_scrape_config(cfg: MonitoringSource, job: str) -> str:
    """Job stack `job`'s file for its cluster's Prometheus: its ranks' scrape config."""
    return _HEADER + _dump({"scrape_configs": [train_scrape(cfg, job)]})


def job_scrape_path(job: str, data_dir: str = DATA_MOUNT) -> str:
    """Where job `job`'s scrape config lives on the shared data dir (`data_dir`: as the
    tasks see it; a host path as the hosts do)."""
    return f"{data_dir.rstrip('/')}/{SCRAPE_SUBDIR}/{job}.yml"


# Prometheus re-reads its scrape config files on SIGHUP; one that is not running here
# (restarting, or not started yet) reads them when it starts.
_RELOAD = f"""{task_container("prom", PROMETHEUS_SERVICE)}
if [ -n "$prom" ]; then
  docker kill --signal HUP "$prom" >/dev/null && echo "scrape: Prometheus reloads its jobs"
else
  echo "scrape: no Prometheus task on $(hostname); it reads the file when it starts"
fi
"""


def job_scrape_script(job: str, text: str, wait_seconds: int = 120) -> str:
    """Shell run over SSH on the master host: write job `job`'s scrape config `text` onto
    the shared data dir through its master task (as the training user, as every file
    of the run), replacing the old one whole, then have Prometheus reload."""
    master, _ = training_service_names(job)
    path = job_scrape_path(job)
    put = shlex.quote(replace_file(path))
    return f"""set -eu
ctr=""
for i in $(seq 1 {wait_seconds}); do
  {task_container("ctr", master)}
  [ -n "$ctr" ] && break
  sleep 1
done
if [ -z "$ctr" ]; then
  echo "scrape: no task of {master} on $(hostname) after {wait_seconds}s" >&2
  exit 1
fi
printf %s {shlex.quote(text)} | docker exec -i -u {TRAIN_UID} "$ctr" sh -c {put}
echo "scrape: {path} written"
{_RELOAD}"""


def job_unscrape_script(job: str, host_data_dir: str) -> str:
    """Shell run over SSH on the master host when the job is removed: its scrape config
    goes (through its master task, else on the host's data dir), Prometheus reloads."""
    master, _ = training_service_names(job)
    path, on_host = job_scrape_path(job), job_scrape_path(job, host_data_dir)
    return f"""set -u
{task_container("ctr", master)}
if [ -n "$ctr" ]; then
  docker exec -u {TRAIN_UID} "$ctr" rm -f {path}
else
  rm -f {on_host}
fi
echo "scrape: {path} removed"
{_RELOAD}"""


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
    """The alert rules file: stalled rank, slow rank, GPU memory, overdue checkpoint,
    automatic restarts and a spent restart budget (the supervisors' text files), target
    down. Windows are counted in scrape intervals (monitoring.alerts)."""
    mon, a = cfg.monitoring, cfg.monitoring.alerts
    scrape = mon.scrape_seconds
    window = seconds(mon.stall_window_seconds)
    recent = seconds((a.stall_intervals - 2) * scrape)
    memory = seconds(max(STEP_MEMORY_S, 2 * mon.stall_window_seconds))

    max_age = duration_seconds(a.checkpoint_max_age)
    labels = ["run", "rank", "node"]
    who = " ".join(f"{k} {{{{ $labels.{k} }}}}" for k in labels)
    # A spare's static targets (host data plane) answer only after a failover.
    rank_up = f'job="{TRAIN_JOB}"' + (', spare!="true"' if cfg.network.data_plane == "host" else "")
    rules = [
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
    return _HEADER + _dump({"groups": [{"name": "deepspeed-swarm", "rules": rules}]})


def prometheus_args(cfg: MonitoringSource) -> list[str]:
    """Prometheus' command line in its task."""
    mon = cfg.monitoring
    return [
        "/usr/bin/prometheus",
        f"--config.file={CONFIG_FILE}",
        f"--storage.tsdb.path={DATA_DIR}",
        f"--storage.tsdb.retention.time={mon.retention}",
        f"--web.listen-address=:{PROMETHEUS_PORT}",
    ]


def node_exporter_args(cfg: MonitoringSource) -> list[str]:
    """The node exporter's command line: the host's /proc, /sys and / under HOST_ROOT;
    its textfile collector reads the supervisors' restart counts on the data dir (as
    the host sees it), which every host shares."""
    textfiles = f"{HOST_ROOT}/root{cfg.training.data_dir.rstrip('/')}/{METRICS_SUBDIR}"
    return [
        "/usr/bin/prometheus-node-exporter",
        f"--web.listen-address=:{cfg.monitoring.node_exporter_port}",
        f"--path.procfs={HOST_ROOT}/proc",
        f"--path.sysfs={HOST_ROOT}/sys",
        f"--path.rootfs={HOST_ROOT}/root",
        # Mount points as the host sees them (under --path.rootfs): skip the pseudo
        # file systems and Docker's own layers, which are not the host's disks.
        "--collector.filesystem.mount-points-exclude=^/(dev|proc|run|sys|var/lib/docker)($|/)",
        # Debian enables it; there is no D-Bus in the container.
        "--no-collector.systemd",
        f"--collector.textfile.directory={textfiles}",
    ]


# The old path stays in the header: the text is part of the rendered config, which
# names the Swarm config by its content; another header would replace the config
# and restart Prometheus on a stack that changed nothing.
_HEADER = "# Rendered by infra/prometheus.py from the stack config; do not edit.\n"


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL), insertion order kept."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)
