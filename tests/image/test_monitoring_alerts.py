"""The monitoring image's real Prometheus against two fake ranks on this machine: the
rendered config and alert rules load, and a rank whose process is stopped (SIGSTOP:
its scrapes time out and its series go stale, which `promtool test rules` only models)
fires DssRankStalled for that rank only, while its peer waits alive without advancing,
as in synchronous training. No lab, no swarm: Prometheus on the host network scrapes
the ranks by static targets instead of Swarm DNS."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from harness.prom import api, firing, wait_for_prom
from infra.config import parse_stack_config
from infra.render import prometheus
from tests.image.conftest import ROOT, docker
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.image

T = TypeVar("T")

SCRAPE_S, STALL_INTERVALS = 5, 4
WINDOW_S = SCRAPE_S * STALL_INTERVALS

# A rank that serves dss_train metrics (images/ on its PYTHONPATH) and, like a synchronous
# collective, advances only once its peer has reached its step (files in a shared folder
# stand in for the network).
FAKE_RANK = """
import pathlib, sys, time
from dss_train import metrics as m
rank, port, folder = int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
me, peer = folder / f"step{rank}", folder / f"step{1 - rank}"
metrics = m.RankMetrics(m.RankIdentity("sim", rank, 0, f"node{rank}"), 2, 10**6)
assert metrics.serve(port, addr="127.0.0.1")
step = 0
me.write_text("0")
while True:
    time.sleep(0.5)
    try:
        theirs = int(peer.read_text() or 0)
    except (OSError, ValueError):
        theirs = 0
    if theirs >= step:
        step += 1
        metrics.step_done(step, 1.0, 8, 0.5, 0.1)
        me.write_text(str(step))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def monitoring_base() -> str:
    """The monitoring base (monitoring/build-base: debootstrap of Debian's Prometheus)."""
    if docker("info", check=False, timeout=30).returncode:
        pytest.skip("no docker engine")
    proc = subprocess.run(
        [str(ROOT / "monitoring" / "build-base")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"monitoring/build-base failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], int]]]:
    """Two fake ranks (process, port); killed after the test."""
    script = tmp_path / "rank.py"
    script.write_text(FAKE_RANK)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "images"))
    procs = []
    for rank in (0, 1):
        port = free_port()
        argv = [sys.executable, str(script), str(rank), str(port), str(tmp_path)]
        procs.append((subprocess.Popen(argv, env=env), port))
    yield procs
    for proc, _ in procs:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


@pytest.fixture
def prom(
    monitoring_base: str, ranks: list[tuple[subprocess.Popen[bytes], int]], tmp_path: Path
) -> Iterator[str]:
    """Prometheus from the monitoring base with the rendered rules, scraping the ranks."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw["training"] = {**raw["training"], "run_name": "sim"}
    raw["monitoring"] = {
        "enabled": True,
        "scrape_interval": f"{SCRAPE_S}s",
        "evaluation_interval": f"{SCRAPE_S}s",
        "alerts": {"stall_intervals": STALL_INTERVALS},
    }
    cfg = parse_stack_config(raw)
    doc = yaml.safe_load(prometheus.prometheus_config(cfg))
    train = next(j for j in doc["scrape_configs"] if j["job_name"] == prometheus.TRAIN_JOB)
    del train["dns_sd_configs"]
    train["static_configs"] = [{"targets": [f"127.0.0.1:{port}" for _, port in ranks]}]
    doc["scrape_configs"] = [train]
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "prometheus.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (conf_dir / "alerts.yml").write_text(prometheus.alert_rules(cfg))
    for p in (conf_dir, *conf_dir.iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    port = free_port()
    name = f"dss-test-prom-{uuid.uuid4().hex[:8]}"
    # Its own command line, listening on a free loopback port instead of :9090.
    argv = [*prometheus.prometheus_args(cfg)[:-1], f"--web.listen-address=127.0.0.1:{port}"]
    mount = f"{conf_dir}:{prometheus.CONFIG_DIR}:ro"
    where = ["--name", name, "--network", "host", "--user", prometheus.MONITORING_UID, "-v", mount]
    docker("run", "-d", *where, monitoring_base, *argv)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        # Shown by pytest when the test fails.
        print(docker("logs", name, check=False).stderr[-3000:])
        docker("rm", "-f", "-v", name, check=False)


def wait_for(what: str, check: Callable[[], T | None], timeout: float) -> T:
    """`wait_for_prom`, polling every 2 s (the scrape interval here is short)."""
    return wait_for_prom(what, check, timeout, interval=2)


def test_stopped_rank_fires_stalled_for_it_alone(
    prom: str, ranks: list[tuple[subprocess.Popen[bytes], int]]
) -> None:
    """Both ranks scraped and advancing, no alert; SIGSTOP of rank 1 fires DssRankStalled
    for rank 1 only after about the stall window; SIGCONT clears it."""
    advancing = f"changes(dss_train_step[{WINDOW_S}s]) > 0"
    wait_for(
        "both ranks up and advancing",
        lambda: len(api(prom, "query", query=advancing)["result"]) == 2,
        120,
    )
    # The fake ranks start apart (rank 0 takes its first step alone, under load seconds
    # before rank 1 serves): an alert from that start clears within an evaluation or two.
    wait_for(
        "no alert while both ranks advance",
        lambda: not firing(prom),
        60,
    )
    rank1 = ranks[1][0]
    rank1.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    alerts = wait_for("DssRankStalled", lambda: firing(prom, "DssRankStalled"), WINDOW_S + 40)
    took = time.monotonic() - stopped
    assert [a["labels"]["rank"] for a in alerts] == ["1"], f"stalled alerts: {alerts}"
    # Not at once. But not a full window either: the rank's last step is seen up to a
    # scrape before the stop, and changes() needs two samples in the window.
    assert took >= WINDOW_S - 3 * SCRAPE_S, f"fired after {took:.0f}s, before its window"
    rank1.send_signal(signal.SIGCONT)
    wait_for("DssRankStalled resolved", lambda: not firing(prom, "DssRankStalled"), 60)
