"""infra.components.scrape: a job's scrape config, written through its master task and
reloaded where the cluster's Prometheus runs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import pulumi
import pytest
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from infra.components.scrape import JobScrape, JobScrapeArgs
from infra.config import parse_stack_config
from infra.render import prometheus
from tests.unit.infra.samples import Mocks, stack_config

pytestmark = pytest.mark.unit


def _scrape(hosts: list[str] | None, key_dir: Path) -> None:
    """JobScrape of a lab8 job with monitoring (naming `hosts` when given); the stack's
    SSH key a stand-in file in `key_dir` (lab8 names the lab's key, which exists only
    while a lab is up: a unit test needs none)."""
    raw = copy.deepcopy(stack_config("lab8"))
    raw.pop("secrets", None)
    key_file = key_dir / "id_ed25519"
    key_file.write_text("unit-test-key")
    raw["preflight"]["ssh_private_key_file"] = str(key_file)
    raw.update(kind="job", cluster="lab8", monitoring={"enabled": True})
    raw["training"].update(run_name="exp-s", **({"hosts": hosts} if hosts else {}))
    cfg = parse_stack_config(raw)
    services = cast(Any, pulumi.ComponentResource("test:unit:Services", "svc"))
    JobScrape(
        "unit-scrape",
        JobScrapeArgs(
            job="exp-s", monitoring=cfg.monitoring, training=cfg.training, network=cfg.network,
            master=cfg.master, workers=cfg.workers, active_hosts=cfg.run_hosts,
            preflight=cfg.preflight, services=services, prometheus_host=cfg.hosts[0],
        ),
    )  # fmt: skip
    _sync_await(wait_for_rpcs())


def _host(command: Any) -> str:
    """The host a remote command connects to (its connection is a secret: the key)."""
    conn = command.inputs["connection"]
    return str(conn.get("value", conn)["host"])


def test_master_on_prometheus_host_writes_and_reloads_in_one(mocks: Mocks, tmp_path: Path) -> None:
    """A job whose master is on the cluster's first host writes and reloads there, as
    before: one command, no reload of its own."""
    _scrape(None, tmp_path)
    config = mocks.named("unit-scrape-config")
    assert _host(config) == "10.213.0.11"
    assert "Prometheus reloads" in config.inputs["create"]
    assert not [r for r in mocks.resources if r.name.endswith("-reload")]


def test_master_elsewhere_reloads_on_prometheus_host(mocks: Mocks, tmp_path: Path) -> None:
    """A job whose master is elsewhere writes through it there, and a second command on
    the cluster's first host reloads Prometheus (and, deleted, removes the file)."""
    _scrape(["lab-h6", "lab-h7"], tmp_path)
    config = mocks.named("unit-scrape-config")
    reload = mocks.named("unit-scrape-reload")
    assert _host(config) == "10.213.0.16"
    assert "Prometheus reloads" not in config.inputs["create"]
    assert _host(reload) == "10.213.0.11"
    assert reload.inputs["create"] == prometheus.prometheus_reload_script()
    assert reload.inputs["delete"] == prometheus.job_unscrape_script(
        "exp-s", "/var/lib/dss-lab/shared"
    )
