"""Monitoring with the real engine on the lab (issue 12): the dev stack with
`monitoring.enabled`, short scrape and alert windows. Tests run in file order against
one deployed stack: every target up, one loss series per rank, a no-op stays a no-op,
a rank whose process is stopped (SIGSTOP inside its task, the task itself left
alone) fires DssRankStalled for that rank only, within the stall window, and a rank
killed is restarted by the supervisor, counted in dss_run_restarts_total and alerted
as DssRunRestarted.

In the acceptance suite, not the test command (it was tests/engine/test_monitoring.py,
3.4 min there): the test command keeps monitoring under the engine through
tests/engine/test_jobs.py (monitoring added to a cluster stack as its only change,
Prometheus scraping the job's ranks) and the alert rules against a real Prometheus
in tests/image/test_monitoring_alerts.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness.configs import dev_config
from harness.lab import client, exec_text
from harness.prom import api, firing, query, wait_for_prom
from harness.stack import Stack
from harness.waits import wait_for
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.acceptance

RUN = "monitored"
SECRET = "wandb-monitoring-3b9d2a"
SCRAPE_S = 5
STALL_INTERVALS = 4
# The stall window, and the most the alert may take after it: a scrape that times out,
# a rule evaluation, one more of each for jitter.
WINDOW_S = SCRAPE_S * STALL_INTERVALS
ALERT_WITHIN_S = WINDOW_S + 4 * SCRAPE_S + 30
MONITORING = {
    "enabled": True,
    "scrape_interval": f"{SCRAPE_S}s",
    "evaluation_interval": f"{SCRAPE_S}s",
    "alerts": {"stall_intervals": STALL_INTERVALS},
}


@pytest.fixture(scope="module")
def deployed(lab: dict[str, Any], monitoring_images: None, make_stack: MakeStack) -> Stack:
    """The dev stack with monitoring on, brought up once for the module."""
    config = dev_config(run_name=RUN, steps=20000, checkpoint_every=50)
    config["deepspeed-swarm:monitoring"] = MONITORING
    stack = make_stack("test-monitoring", config, {"wandb_api_key": SECRET})
    stack.pulumi("up", "--yes", "--skip-preview")
    return stack


@pytest.fixture(scope="module")
def prom(deployed: Stack) -> str:
    """The stack output prometheusAddress."""
    return str(deployed.outputs()["prometheusAddress"])


def targets_by_job(base: str) -> dict[str, list[str]]:
    """job -> health of each active target."""
    out: dict[str, list[str]] = {}
    for t in api(base, "targets", state="active")["activeTargets"]:
        out.setdefault(t["labels"]["job"], []).append(t["health"])
    return out


def test_prometheus_address_is_the_master(prom: str) -> None:
    """prometheusAddress is the master host's address and the published port."""
    assert prom == "http://10.213.0.11:9090"


def test_every_target_is_up(prom: str) -> None:
    """Prometheus finds both ranks, both node exporters and itself, and all answer."""

    def all_up() -> dict[str, list[str]] | None:
        jobs = targets_by_job(prom)
        want = {"dss-train": 2, "dss-node": 2, "prometheus": 1}
        ok = all(jobs.get(j, []).count("up") == n == len(jobs[j]) for j, n in want.items())
        return jobs if ok else None

    # The ranks serve once training joined its process group (after `up` launches it).
    wait_for_prom("every target up", all_up, timeout=600)


def test_one_loss_series_per_rank(prom: str) -> None:
    """A query for the loss returns one series per rank, labelled with run, rank and node."""

    def losses() -> list[dict[str, Any]]:
        return query(prom, f'dss_train_loss{{run="{RUN}"}}')

    def both() -> list[dict[str, Any]] | None:
        found = losses()
        return found if len(found) == 2 else None

    series = wait_for_prom("loss series of both ranks", both, 300)
    ranks = sorted(s["metric"]["rank"] for s in series)
    assert ranks == ["0", "1"], f"one loss series per rank expected: {series}"
    assert {s["metric"]["node"] for s in series} == {"lab-h1", "lab-h2"}, series
    assert all(s["metric"]["job"] == "dss-train" for s in series), series


def test_node_exporters_name_their_hosts(prom: str) -> None:
    """Each host's exporter reports the Swarm node's hostname."""
    names = wait_for_prom(
        "node_uname_info of both hosts",
        lambda: (
            {s["metric"]["nodename"] for s in query(prom, "node_uname_info")}
            == {"lab-h1", "lab-h2"}
        ),
        120,
    )
    assert names


def test_no_op_with_monitoring(deployed: Stack) -> None:
    """Right after up, preview and refresh propose nothing for the monitoring services,
    their configs and image either (no perpetual diff)."""
    deployed.pulumi("preview", "--expect-no-changes")
    deployed.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_no_alert_while_training_runs(prom: str) -> None:
    """With every rank advancing, no training alert fires."""
    wait_for_prom(
        "both ranks advancing",
        lambda: len(query(prom, f'changes(dss_train_step{{run="{RUN}"}}[{WINDOW_S}s]) > 0')) == 2,
        300,
    )
    fired = firing(prom)
    assert not fired, f"alerts firing on a healthy run: {fired}"


def rank_pids(container: Any) -> tuple[list[str], str]:
    """The pids (in the task) of the rank processes the deepspeed launcher started
    there (`python -u train.py --local_rank=0 ...`, not the launcher itself), and the
    `ps` text they come from."""
    out = exec_text(container, ["ps", "-eo", "pid=,args="], user="1000")
    ranks = [
        line.split(None, 1)[0]
        for line in out.splitlines()
        if "train.py" in line and "--local_rank=" in line and "deepspeed.launcher" not in line
    ]
    return ranks, out


def rank_pid(container: Any) -> str:
    """The pid of the task's one rank process."""
    ranks, out = rank_pids(container)
    assert len(ranks) == 1, f"expected one rank process in {container.name}:\n{out}"
    return ranks[0]


def test_stopped_rank_fires_stalled_alert(prom: str, lab: dict[str, Any]) -> None:
    """SIGSTOP of rank 1's process inside the worker task (the task keeps running) fires
    DssRankStalled for rank 1, and not for rank 0, within the stall window."""
    worker = client(2).containers.list(filters={"label": "com.docker.swarm.service.name=ds-worker"})
    assert len(worker) == 1, f"lab-h2: worker tasks {[c.name for c in worker]}"
    container = worker[0]
    pid = rank_pid(container)
    done = container.exec_run(["kill", "-STOP", pid], user="1000")
    stopped = time.monotonic()
    assert done.exit_code == 0, f"kill -STOP {pid} in {container.name}: {done.output!r}"
    try:
        alerts = wait_for_prom(
            "DssRankStalled firing",
            lambda: firing(prom, "DssRankStalled"),
            ALERT_WITHIN_S,
            interval=2,
        )
        took = time.monotonic() - stopped
        assert [a["labels"]["rank"] for a in alerts] == ["1"], f"stalled alerts: {alerts}"
        assert alerts[0]["labels"]["node"] == "lab-h2", alerts
        # Not at once. But not a full window either: the rank's last step is seen up to a
        # scrape before the stop, and changes() needs two samples in the window.
        assert took >= WINDOW_S - 3 * SCRAPE_S, f"fired after {took:.0f}s, before its window"
        container.reload()
        assert container.status == "running", "the worker task itself must keep running"
    finally:
        container.exec_run(["kill", "-CONT", pid], user="1000")


def restarts_seen(prom: str) -> float | None:
    """The run's supervisor restarts as Prometheus has them (every node exporter serves
    the shared file: the largest), None before the first scrape of it."""
    got = query(prom, f'max by (run) (dss_run_restarts_total{{run="{RUN}"}})')
    return float(got[0]["value"][1]) if got else None


def test_supervisor_restart_is_a_metric_and_an_alert(prom: str) -> None:
    """A rank killed (SIGKILL) is restarted by the supervisor, which counts it in its
    text file: Prometheus has dss_run_restarts_total one higher and DssRunRestarted
    fires for the run."""
    # In a tuple: a count of 0 is an answer (wait_for waits while the check is falsy).
    (before,) = wait_for_prom(
        "the supervisor's restart count",
        lambda: None if (n := restarts_seen(prom)) is None else (n,),
        120,
    )
    worker = client(2).containers.list(filters={"label": "com.docker.swarm.service.name=ds-worker"})
    assert len(worker) == 1, f"lab-h2: worker tasks {[c.name for c in worker]}"
    pid = wait_for(
        "one rank process in the worker",
        lambda: ranks[0] if len(ranks := rank_pids(worker[0])[0]) == 1 else None,
        300,
    )
    done = worker[0].exec_run(["kill", "-KILL", pid], user="1000")
    assert done.exit_code == 0, f"kill -KILL {pid}: {done.output!r}"
    after = wait_for_prom(
        "one more restart counted",
        lambda: n if (n := restarts_seen(prom) or 0.0) > before else None,
        120,
        interval=2,
    )
    assert after == before + 1, f"restarts {before} -> {after}"

    alerts = wait_for_prom(
        "DssRunRestarted firing", lambda: firing(prom, "DssRunRestarted"), 60, interval=2
    )
    assert [a["labels"]["run"] for a in alerts] == [RUN], alerts
