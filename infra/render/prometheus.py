"""Pure renderers of the monitoring stack: Prometheus' configuration, a job's scrape
config and the scripts that hand it over, and the command lines of Prometheus and the
node exporters. No Pulumi, no I/O: golden files and `promtool test rules` test them
(tests/unit/infra/test_prometheus.py). The alert rules are infra/render/alerts.py's
(importable from here as before), what both files share infra/render/promfile.py's.

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

from infra.layout import DATA_MOUNT, TRAIN_UID, training_service_names
from infra.render.alerts import RESTART_WINDOW as RESTART_WINDOW
from infra.render.alerts import STEP_MEMORY_S as STEP_MEMORY_S
from infra.render.alerts import alert_rules as alert_rules
from infra.render.alerts import slow_expr as slow_expr
from infra.render.alerts import stall_expr as stall_expr
from infra.render.promfile import HEADER, dump
from infra.render.promfile import NODE_JOB as NODE_JOB
from infra.render.promfile import PROMETHEUS_JOB as PROMETHEUS_JOB
from infra.render.promfile import TRAIN_JOB as TRAIN_JOB
from infra.render.promfile import seconds as seconds
from infra.render.runfiles import METRICS_SUBDIR
from infra.render.sections import MonitoringSource
from infra.render.shell import replace_file, task_container

PROMETHEUS_SERVICE = "ds-prometheus"
NODE_EXPORTER_SERVICE = "ds-node-exporter"
# Inside the monitoring containers (monitoring/Dockerfile).
PROMETHEUS_PORT = 9090
CONFIG_DIR = "/etc/dss-prometheus"
CONFIG_FILE = f"{CONFIG_DIR}/prometheus.yml"
RULES_FILE = f"{CONFIG_DIR}/alerts.yml"
DATA_DIR = "/prometheus"
# The node exporter reads the host's /proc, /sys and / here (bind mounts, read-only).
HOST_ROOT = "/host"
# No secret and nothing per-user here: the monitoring containers run as nobody.
MONITORING_UID = "65534"
# A cluster's jobs' scrape configs: files under this folder of the shared data dir,
# one per job (`<job>.yml`); its Prometheus sees the data dir at DATA_MOUNT, read-only.
SCRAPE_SUBDIR = "monitoring/jobs"


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
    return HEADER + dump(doc)


def job_scrape_config(cfg: MonitoringSource, job: str) -> str:
    """Job stack `job`'s file for its cluster's Prometheus: its ranks' scrape config."""
    return HEADER + dump({"scrape_configs": [train_scrape(cfg, job)]})


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


def job_scrape_script(job: str, text: str, wait_seconds: int = 120, reload: bool = True) -> str:
    """Shell run over SSH on the master host: write job `job`'s scrape config `text` onto
    the shared data dir through its master task (as the training user, as every file
    of the run), replacing the old one whole, then have Prometheus reload (`reload`:
    it runs here; else prometheus_reload_script runs where it does)."""
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
{_RELOAD if reload else ""}"""


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


def prometheus_reload_script() -> str:
    """Shell run over SSH on the host Prometheus runs on: have it re-read its jobs."""
    return f"set -u\n{_RELOAD}"
