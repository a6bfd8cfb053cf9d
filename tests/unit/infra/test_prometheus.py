"""infra.render.prometheus: Prometheus config and alert rules (golden files, promtool)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import StackConfig, parse_stack_config
from infra.render import prometheus
from tests.unit.infra.samples import stack_config
from tests.unit.infra.test_render import golden

pytestmark = pytest.mark.unit

# The windows of these rules: scrape 15s x 4 intervals = 60s (recent 30s).
MONITORING = {
    "enabled": True,
    "scrape_interval": "15s",
    "evaluation_interval": "15s",
    "alerts": {
        "stall_intervals": 4,
        "slow_rank_factor": 2,
        "gpu_memory_ratio": 0.9,
        "checkpoint_max_age": "10m",
    },
}


def dev_with_monitoring(**training: Any) -> StackConfig:
    """The dev stack with monitoring on (short windows) and training overrides."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw["monitoring"] = MONITORING
    raw["training"] = {**raw["training"], **training}
    return parse_stack_config(raw)


def promtool() -> str:
    """promtool (Debian package `prometheus`; scripts/bootstrap-system installs it).
    Missing, the rule tests fail under CI=true and are skipped elsewhere."""
    found = shutil.which("promtool")
    if found is None:
        msg = "promtool is missing: apt-get install prometheus (scripts/bootstrap-system)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return found


def test_prometheus_config_golden() -> None:
    """prometheus.yml for the dev stack with monitoring matches its golden file."""
    golden("prometheus.yml", prometheus.prometheus_config(dev_with_monitoring()))


def test_alert_rules_golden() -> None:
    """The alert rules for the dev stack with monitoring match their golden file."""
    golden("alerts.yml", prometheus.alert_rules(dev_with_monitoring()))


def job_with_monitoring(job: str = "exp1") -> StackConfig:
    """Job stack `job` on the dev hosts with monitoring on (its run named after it)."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw.update(monitoring=MONITORING, kind="job", cluster="c1")
    raw["training"] = {**raw["training"], "run_name": job}
    return parse_stack_config(raw)


def test_cluster_prometheus_config_golden() -> None:
    """A cluster's prometheus.yml (no run of its own, its jobs' files) matches its golden."""
    golden("prometheus-cluster.yml", prometheus.prometheus_config(dev_with_monitoring(), jobs=True))


def test_job_scrape_config_golden() -> None:
    """A job's scrape file for its cluster's Prometheus matches its golden file."""
    golden("prometheus-job.yml", prometheus.job_scrape_config(job_with_monitoring(), "exp1"))


def test_a_job_scrapes_its_own_services_as_dss_train() -> None:
    """A job's scrape config looks up its own services, has a name of its own, and labels
    its targets with its run and the job label the rules select."""
    (train,) = yaml.safe_load(prometheus.job_scrape_config(job_with_monitoring(), "exp1"))[
        "scrape_configs"
    ]
    assert train["job_name"] == "dss-train-exp1"
    assert train["dns_sd_configs"][0]["names"] == ["tasks.exp1-master", "tasks.exp1-worker"]
    assert train["relabel_configs"] == [
        {"target_label": "run", "replacement": "exp1"},
        {"target_label": "job", "replacement": prometheus.TRAIN_JOB},
    ]


def test_promtool_accepts_a_cluster_with_two_jobs(tmp_path: Path) -> None:
    """The cluster's prometheus.yml with two jobs' files in it (as Prometheus loads them)
    passes `promtool check config`: the jobs' scrape configs are valid and unique. (This
    machine's promtool predates `scrape_config_files`; the engine test loads the files
    in the monitoring image's Prometheus.)"""
    cfg = dev_with_monitoring()
    doc = yaml.safe_load(prometheus.prometheus_config(cfg, jobs=True))
    assert doc.pop("scrape_config_files") == [prometheus.job_scrape_path("*")]
    for job in ("exp1", "exp2"):
        text = prometheus.job_scrape_config(job_with_monitoring(job), job)
        doc["scrape_configs"] += yaml.safe_load(text)["scrape_configs"]
    check_text(yaml.safe_dump(doc), prometheus.alert_rules(cfg), tmp_path)


def test_one_lookup_per_local_rank() -> None:
    """Two ranks per node: both training services are looked up on base port + 0 and + 1."""
    doc = yaml.safe_load(prometheus.prometheus_config(dev_with_monitoring(procs_per_node=2)))
    train = next(j for j in doc["scrape_configs"] if j["job_name"] == prometheus.TRAIN_JOB)
    sd = train["dns_sd_configs"]
    assert [c["port"] for c in sd] == [9410, 9411], "prometheus.yml: rank ports"
    assert all(c["names"] == ["tasks.ds-master", "tasks.ds-worker"] for c in sd), sd


def test_single_host_scrapes_only_the_master() -> None:
    """Without workers no lookup names ds-worker (its DNS name would not resolve)."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw["hosts"] = raw["hosts"][:1]
    raw["training"] = {**raw["training"], "launch_mode": "no_ssh"}
    raw["monitoring"] = {"enabled": True}
    cfg = parse_stack_config(raw)
    assert prometheus.train_targets(cfg) == ["tasks.ds-master"]


def test_scrape_timeout_fits_the_interval() -> None:
    """The scrape timeout is below the interval (Prometheus refuses one above it)."""
    cfg = dev_with_monitoring()
    for interval, timeout in (("2s", "1s"), ("5s", "4s"), ("15s", "10s"), ("1m", "10s")):
        mon = cfg.monitoring.model_copy(update={"scrape_interval": interval})
        assert prometheus.scrape_timeout(cfg.model_copy(update={"monitoring": mon})) == timeout


def test_promtool_accepts_config_and_rules(tmp_path: Path) -> None:
    """`promtool check config` accepts prometheus.yml with its rules file."""
    check_config(dev_with_monitoring(), tmp_path)


def check_config(cfg: StackConfig, tmp_path: Path) -> None:
    """`promtool check config` of the rendered prometheus.yml with its rules file."""
    check_text(prometheus.prometheus_config(cfg), prometheus.alert_rules(cfg), tmp_path)


def check_text(config: str, alerts: str, tmp_path: Path) -> None:
    """`promtool check config` of prometheus.yml `config` with rules file `alerts`."""
    rules = tmp_path / "alerts.yml"
    rules.write_text(alerts)
    conf = tmp_path / "prometheus.yml"
    conf.write_text(config.replace(prometheus.RULES_FILE, str(rules)))
    proc = subprocess.run(
        [promtool(), "check", "config", str(conf)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"promtool check config:\n{proc.stdout}{proc.stderr}"


def host_plane_with_monitoring() -> StackConfig:
    """The dev stack on the host data plane with monitoring, its second host a spare
    (and a third, plain worker)."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw["monitoring"] = MONITORING
    raw["network"]["data_plane"] = "host"
    h3 = {
        "name": "lab-h3",
        "address": "10.213.0.13",
        "docker_host": "unix:///var/lib/dss-lab/h3/docker.sock",
    }
    third = {**raw["hosts"][1], **h3}
    raw["hosts"][1]["spare"] = True
    raw["hosts"].append(third)
    return parse_stack_config(raw)


def test_host_data_plane_scrapes_the_hosts_statically() -> None:
    """On the host data plane the ranks are scraped on every active host's address, the
    spare's targets marked, with no Swarm DNS lookup of the training tasks."""
    cfg = host_plane_with_monitoring()
    train = yaml.safe_load(prometheus.prometheus_config(cfg))["scrape_configs"][0]
    assert "dns_sd_configs" not in train
    port = cfg.monitoring.rank_metrics_port
    assert train["static_configs"] == [
        {"targets": [f"10.213.0.11:{port}"], "labels": {"node": "lab-h1"}},
        {"targets": [f"10.213.0.12:{port}"], "labels": {"node": "lab-h2", "spare": "true"}},
        {"targets": [f"10.213.0.13:{port}"], "labels": {"node": "lab-h3"}},
    ]


def test_host_data_plane_target_down_skips_the_spare() -> None:
    """The target-down alert does not count a spare's rank targets (down until a failover)."""
    rules = yaml.safe_load(prometheus.alert_rules(host_plane_with_monitoring()))
    down = next(r for r in rules["groups"][0]["rules"] if r["alert"] == "DssTargetDown")
    assert 'up{job="dss-train", spare!="true"} == 0' in down["expr"]


def test_promtool_accepts_the_host_data_plane(tmp_path: Path) -> None:
    """`promtool check config` accepts the host data plane's static targets and rules."""
    check_config(host_plane_with_monitoring(), tmp_path)


# -- promtool test rules: every alert fires on one case and stays quiet on another ----
def step(rank: int, values: str, node: str = "") -> dict[str, str]:
    """A rank's dss_train_step series as Prometheus scrapes it."""
    return series("dss_train_step", rank, values, node)


def series(metric: str, rank: int, values: str, node: str = "", **labels: str) -> dict[str, str]:
    base = {
        "job": "dss-train",
        "run": "dev",
        "rank": str(rank),
        "instance": f"10.0.1.{rank + 2}:9410",
        "node": node or f"lab-h{rank + 1}",
        **labels,
    }
    text = ",".join(f'{k}="{v}"' for k, v in base.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


def fired(rank: int, severity: str, annotations: dict[str, str], **labels: str) -> dict[str, Any]:
    """An alert expected on a rank's target."""
    base = {
        "job": "dss-train",
        "run": "dev",
        "rank": str(rank),
        "instance": f"10.0.1.{rank + 2}:9410",
        "node": f"lab-h{rank + 1}",
        "severity": severity,
        **labels,
    }
    return {"exp_labels": base, "exp_annotations": annotations}


def restarts(metric: str, values: str, host: int) -> dict[str, str]:
    """A supervisor's metric as lab host `host`'s node exporter serves it (every host
    reads the same shared file)."""
    labels = f'job="dss-node",instance="10.0.1.{host + 8}:9100",run="dev",supervisor="master"'
    return {"series": f"{metric}{{{labels}}}", "values": values}


def supervisor_alert(severity: str, summary: str, description: str) -> dict[str, Any]:
    """An alert expected on run dev's master supervisor."""
    return {
        "exp_labels": {"run": "dev", "supervisor": "master", "severity": severity},
        "exp_annotations": {"summary": summary, "description": description},
    }


def stalled_note(rank: int, last: int) -> dict[str, str]:
    return {
        "summary": f"Training rank stalled: run dev rank {rank} node lab-h{rank + 1}",
        "description": (
            "The step of this rank has not advanced for 60s (4 scrape intervals) while another "
            "rank of the run advanced or still answers: its process is stopped, hung or gone. "
            f"Last step {last}."
        ),
    }


def queue(metric: str, values: str, host: int, **labels: str) -> dict[str, str]:
    """A queue metric of cluster `lab` as lab host `host`'s node exporter serves it
    (every host reads the same shared file)."""
    text = ",".join(f'{k}="{v}"' for k, v in {"cluster": "lab", **labels}.items())
    base = f'job="dss-node",instance="10.0.1.{host + 8}:9100",{text}'
    return {"series": f"{metric}{{{base}}}", "values": values}


def waiting(jobs: str, passes: str) -> list[dict[str, str]]:
    """The queue's series on two hosts: `jobs` reserved, none queued, the pass's time."""
    return [
        series
        for host in (1, 2)
        for series in (
            queue("dss_queue_jobs", jobs, host, state="reserved"),
            queue("dss_queue_jobs", "0x80", host, state="queued"),
            queue("dss_queue_pass_timestamp_seconds", passes, host),
        )
    ]


QUEUE_NOT_RUN = {
    "exp_labels": {"cluster": "lab", "severity": "warning"},
    "exp_annotations": {
        "summary": "Jobs wait on cluster lab and nothing starts them",
        "description": (
            "1 job(s) waited in the queue at its last pass, 10 min or more ago: no "
            "`scripts/job queue lab --watch` is running. Start one (docs/jobs.md, "
            '"Queued jobs").'
        ),
    },
}


CASES: dict[str, tuple[str, str, list[dict[str, str]], list[dict[str, Any]]]] = {
    "queue-not-run-fires-when-no-pass-while-a-job-waits": (
        "DssQueueNotRun",
        "15m",
        # One pass at time 0 left a job reserved; none since.
        waiting("1x80", "0x80"),
        [QUEUE_NOT_RUN],
    ),
    "queue-not-run-quiet-while-passes-run": (
        "DssQueueNotRun",
        "15m",
        waiting("1x80", "0+15x80"),
        [],
    ),
    "queue-not-run-quiet-when-none-waits": (
        "DssQueueNotRun",
        "15m",
        waiting("0x80", "0x80"),
        [],
    ),
    # name: (alert, eval time, input series (15s apart), expected alerts)
    "stalled-fires-for-a-stopped-rank": (
        "DssRankStalled",
        "3m",
        # rank 1 stopped answering at 90s; rank 0 waits in a collective: alive, step frozen.
        [step(0, "1+1x5 6x20"), step(1, "1+1x5 stale")],
        [fired(1, "critical", stalled_note(1, 6))],
    ),
    "stalled-fires-for-a-lagging-rank": (
        "DssRankStalled",
        "3m",
        [step(0, "1+1x20"), step(1, "1+1x5 6x15")],
        [fired(1, "critical", stalled_note(1, 6))],
    ),
    "stalled-quiet-while-all-advance": (
        "DssRankStalled",
        "3m",
        [step(0, "1+1x20"), step(1, "1+1x20")],
        [],
    ),
    "stalled-quiet-when-the-run-ended": (
        "DssRankStalled",
        "3m",
        [step(0, "1+1x5 stale"), step(1, "1+1x5 stale")],
        [],
    ),
    "stalled-quiet-while-every-rank-waits": (
        "DssRankStalled",
        "3m",
        [step(0, "0x20"), step(1, "0x20")],
        [],
    ),
    "slow-fires-above-the-median": (
        "DssRankSlow",
        "4m",
        [
            *(series("dss_train_steps_total", r, "0+1x20") for r in range(3)),
            series("dss_train_compute_seconds_total", 0, "0+0.1x20"),
            series("dss_train_compute_seconds_total", 1, "0+0.1x20"),
            series("dss_train_compute_seconds_total", 2, "0+0.5x20"),
        ],
        [
            fired(
                2,
                "warning",
                {
                    "summary": "Training rank slower than its run: run dev rank 2 node lab-h3",
                    "description": (
                        "Its own compute time per step (500ms, batch and forward pass over "
                        "60s) is more than 2 times the median of the run's ranks; every rank "
                        "waits for it."
                    ),
                },
            )
        ],
    ),
    "slow-quiet-when-ranks-are-even": (
        "DssRankSlow",
        "4m",
        [
            *(series("dss_train_steps_total", r, "0+1x20") for r in range(3)),
            *(series("dss_train_compute_seconds_total", r, "0+0.15x20") for r in range(3)),
        ],
        [],
    ),
    "gpu-memory-fires-above-the-ratio": (
        "DssGpuMemoryHigh",
        "3m",
        [
            series("dss_gpu_memory_used_bytes", 0, "97x20", gpu_uuid="GPU-a"),
            series("dss_gpu_memory_total_bytes", 0, "100x20", gpu_uuid="GPU-a"),
        ],
        [
            fired(
                0,
                "warning",
                {
                    "summary": "GPU memory above 90%: run dev rank 0 node lab-h1",
                    "description": (
                        "GPU GPU-a has 97% of its memory in use: the next larger batch or "
                        "activation may run out."
                    ),
                },
                gpu_uuid="GPU-a",
            )
        ],
    ),
    "gpu-memory-quiet-below-the-ratio": (
        "DssGpuMemoryHigh",
        "3m",
        [
            series("dss_gpu_memory_used_bytes", 0, "50x20", gpu_uuid="GPU-a"),
            series("dss_gpu_memory_total_bytes", 0, "100x20", gpu_uuid="GPU-a"),
        ],
        [],
    ),
    "checkpoint-overdue-fires": (
        "DssCheckpointOverdue",
        "15m",
        [
            series("dss_train_start_timestamp_seconds", 0, "0x60"),
            series("dss_train_last_checkpoint_timestamp_seconds", 0, "60x60"),
        ],
        [
            {
                "exp_labels": {"run": "dev", "severity": "warning"},
                "exp_annotations": {
                    "summary": "No checkpoint of run dev for too long",
                    "description": (
                        "The newest complete checkpoint (or the start of training) is 14m 0s "
                        "old; expected at most 10m. A failure now loses that much training."
                    ),
                },
            }
        ],
    ),
    "checkpoint-overdue-quiet-after-a-checkpoint": (
        "DssCheckpointOverdue",
        "15m",
        [
            series("dss_train_start_timestamp_seconds", 0, "0x60"),
            series("dss_train_last_checkpoint_timestamp_seconds", 0, "60x39 600x20"),
        ],
        [],
    ),
    "target-down-fires": (
        "DssTargetDown",
        "3m",
        [
            series("up", 0, "1x20"),
            series("up", 1, "1x4 0x16"),
            {"series": 'up{job="dss-node",instance="10.0.1.9:9100"}', "values": "0x20"},
        ],
        [
            fired(
                1,
                "critical",
                {
                    "summary": "Target down: dss-train 10.0.1.3:9410",
                    "description": (
                        "Prometheus could not scrape it for 60s. A training rank counts only "
                        "while another rank of its run answers (a finished or stopped run is "
                        "not down)."
                    ),
                },
            ),
            {
                "exp_labels": {
                    "job": "dss-node",
                    "instance": "10.0.1.9:9100",
                    "severity": "critical",
                },
                "exp_annotations": {
                    "summary": "Target down: dss-node 10.0.1.9:9100",
                    "description": (
                        "Prometheus could not scrape it for 60s. A training rank counts only "
                        "while another rank of its run answers (a finished or stopped run is "
                        "not down)."
                    ),
                },
            },
        ],
    ),
    "run-restarted-fires": (
        "DssRunRestarted",
        "3m",
        [restarts("dss_run_restarts_total", "0x4 1x16", host) for host in (1, 2)],
        [
            supervisor_alert(
                "warning",
                "Run dev restarted by its supervisor",
                "The launcher (supervisor master) exited with an error and was restarted "
                "from the newest complete checkpoint, about 1 time(s) in 15m; the steps "
                "since that checkpoint were redone. /data/logs/dev/launcher.log says why.",
            )
        ],
    ),
    "run-restarted-quiet-without-a-restart": (
        "DssRunRestarted",
        "3m",
        [restarts("dss_run_restarts_total", "0x20", host) for host in (1, 2)],
        [],
    ),
    "restart-budget-spent-fires": (
        "DssRestartBudgetSpent",
        "3m",
        [restarts("dss_run_restart_budget_spent", "0x4 1x16", host) for host in (1, 2)],
        [
            supervisor_alert(
                "critical",
                "Run dev: restart budget spent, training stopped",
                "The supervisor gave up after training.recovery.max_restarts restarts: no "
                "rank trains. `pulumi preview --refresh` shows the run failed; `pulumi up` "
                "relaunches it from the newest complete checkpoint.",
            )
        ],
    ),
    "restart-budget-quiet-while-within-it": (
        "DssRestartBudgetSpent",
        "3m",
        [restarts("dss_run_restart_budget_spent", "0x20", host) for host in (1, 2)],
        [],
    ),
    "target-down-quiet-when-the-run-ended": (
        "DssTargetDown",
        "3m",
        [
            series("up", 0, "1x4 0x16"),
            series("up", 1, "1x4 0x16"),
            {"series": 'up{job="dss-node",instance="10.0.1.9:9100"}', "values": "1x20"},
        ],
        [],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_alert_rule(case: str, tmp_path: Path) -> None:
    """`promtool test rules`: the alert fires on its case, stays quiet on the other."""
    alert, at, inputs, expected = CASES[case]
    (tmp_path / "alerts.yml").write_text(prometheus.alert_rules(dev_with_monitoring()))
    test = {
        "rule_files": ["alerts.yml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": inputs,
                "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = subprocess.run(
        [promtool(), "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"{alert} ({case}):\n{proc.stdout}{proc.stderr}"


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """Each rule the file defines is tested both ways above."""
    doc = yaml.safe_load(prometheus.alert_rules(dev_with_monitoring()))
    alerts = {r["alert"] for g in doc["groups"] for r in g["rules"]}
    fires = {a for a, _, _, exp in CASES.values() if exp}
    quiet = {a for a, _, _, exp in CASES.values() if not exp}
    assert alerts == fires == quiet, f"alerts {alerts}, firing cases {fires}, quiet {quiet}"
