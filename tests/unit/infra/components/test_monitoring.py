"""infra.components.monitoring under Pulumi mocks: Prometheus, node exporters, their
configs and image; nothing of it when monitoring is off."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.components.services import spec_digest
from infra.config import parse_stack_config
from infra.render import prometheus
from tests.unit.infra.samples import Mocks
from tests.unit.infra.test_program import SERVICE, run_program

pytestmark = pytest.mark.unit

CONFIG = "docker:index/serviceConfig:ServiceConfig"
# What the dev stack registered before monitoring existed (and still does when it is off).
DEV_RESOURCES = 29


@pytest.fixture
def monitored(mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The dev stack with monitoring on, run under mocks: the program's globals."""
    dev_raw["monitoring"] = {"enabled": True}
    return run_program(dev_raw, tmp_path, {"wandb_api_key": "s3cr3t-value"})


def services(mocks: Mocks) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.inputs for r in mocks.by_type(SERVICE)}


def test_off_registers_nothing_of_monitoring(
    mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path
) -> None:
    """Monitoring off (the default): the dev stack's resources are the ones it had before
    (same count, no monitoring component), no prometheusAddress, no metrics env."""
    program = run_program(dev_raw, tmp_path, {"wandb_api_key": "s3cr3t-value"})
    names = [r.name for r in mocks.resources]
    assert len(names) == DEV_RESOURCES, f"dev stack registers {len(names)} resources: {names}"
    assert not [n for n in names if "monitoring" in n], names
    assert program["monitoring"] is None
    env = services(mocks)["ds-master"]["taskSpec"]["containerSpec"]["env"]
    assert "DSS_METRICS_PORT" not in env and "DSS_NODE" not in env, f"ds-master env: {env}"


def test_prometheus_runs_on_the_master_published_there_only(
    mocks: Mocks, monitored: dict[str, Any]
) -> None:
    """ds-prometheus: one task pinned to the master host, its port published in host mode
    (on that host only), dnsrr, on the training overlay, as nobody."""
    svc = services(mocks)["ds-prometheus"]
    spec = svc["taskSpec"]
    assert spec["placement"]["constraints"] == ["node.hostname==lab-h1"], "ds-prometheus"
    assert svc["mode"] == {"replicated": {"replicas": 1}}, "ds-prometheus"
    assert svc["endpointSpec"] == {
        "mode": "dnsrr",
        "ports": [
            {"targetPort": 9090, "publishedPort": 9090, "protocol": "tcp", "publishMode": "host"}
        ],
    }, "ds-prometheus: endpoint"
    assert spec["networksAdvanceds"] == [{"id": "unit-net-overlay-id"}], "ds-prometheus"
    assert spec["containerSpec"]["user"] == "65534", "ds-prometheus: user"


def test_prometheus_keeps_data_on_a_named_volume(mocks: Mocks, monitored: dict[str, Any]) -> None:
    """The TSDB lives on the named volume (default) with the configured retention."""
    c = services(mocks)["ds-prometheus"]["taskSpec"]["containerSpec"]
    assert c["mounts"] == [
        {"type": "volume", "source": "dss-prometheus", "target": "/prometheus", "readOnly": False}
    ], "ds-prometheus: mounts"
    assert "--storage.tsdb.retention.time=15d" in c["commands"], "ds-prometheus: retention"


def test_storage_can_be_a_host_path(mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path) -> None:
    """An absolute monitoring.storage is a bind mount of that host path."""
    dev_raw["monitoring"] = {"enabled": True, "storage": "/var/lib/dss-lab/shared/prometheus"}
    run_program(dev_raw, tmp_path)
    (mount,) = services(mocks)["ds-prometheus"]["taskSpec"]["containerSpec"]["mounts"]
    assert mount["type"] == "bind" and mount["source"] == "/var/lib/dss-lab/shared/prometheus"


def test_a_clusters_prometheus_reads_its_jobs_files(
    mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path
) -> None:
    """On a cluster stack Prometheus sees the data dir read-only and its config reads the
    jobs' scrape files there; it has no training scrape of its own."""
    dev_raw["kind"], dev_raw["monitoring"] = "cluster", {"enabled": True}
    run_program(dev_raw, tmp_path)
    c = services(mocks)["ds-prometheus"]["taskSpec"]["containerSpec"]
    assert {"type": "bind", "source": dev_raw["training"]["data_dir"], "target": "/data",
            "readOnly": True} in c["mounts"], c["mounts"]  # fmt: skip
    text = base64.b64decode(mocks.named("unit-monitoring-config").inputs["data"]).decode()
    doc = yaml.safe_load(text)
    assert doc["scrape_config_files"] == ["/data/monitoring/jobs/*.yml"], doc
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["dss-node", "prometheus"], doc


def test_prometheus_config_is_a_swarm_config(mocks: Mocks, monitored: dict[str, Any]) -> None:
    """prometheus.yml and the alert rules reach the task as Swarm configs named by their
    content, readable by nobody, holding exactly what infra.render.prometheus renders."""
    configs = {r.name: r.inputs for r in mocks.by_type(CONFIG)}
    assert set(configs) == {"unit-monitoring-config", "unit-monitoring-rules"}
    cfg = monitored["cfg"]
    text = base64.b64decode(configs["unit-monitoring-config"]["data"]).decode()
    assert text == prometheus.prometheus_config(cfg), "unit-monitoring-config: data"
    rules = base64.b64decode(configs["unit-monitoring-rules"]["data"]).decode()
    assert rules == prometheus.alert_rules(cfg), "unit-monitoring-rules: data"
    for name, inputs in configs.items():
        assert inputs["name"].startswith("ds-prometheus-"), f"{name}: {inputs['name']}"
    refs = services(mocks)["ds-prometheus"]["taskSpec"]["containerSpec"]["configs"]
    assert {r["fileName"] for r in refs} == {prometheus.CONFIG_FILE, prometheus.RULES_FILE}
    assert all(r["fileUid"] == "65534" and r["fileMode"] == 0o444 for r in refs), refs


def test_config_name_follows_its_content(
    mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path
) -> None:
    """Another scrape interval is another config object (Swarm configs are immutable)."""
    names = []
    for interval in ("15s", "15s", "30s"):
        mocks.resources.clear()
        dev_raw["monitoring"] = {"enabled": True, "scrape_interval": interval}
        run_program(dev_raw, tmp_path)
        names.append(mocks.named("unit-monitoring-config").inputs["name"])
    assert names[0] == names[1] != names[2], names


def test_node_exporter_on_every_node(mocks: Mocks, monitored: dict[str, Any]) -> None:
    """ds-node-exporter is global, on the overlay, reads the host read-only, and names its node."""
    svc = services(mocks)["ds-node-exporter"]
    c = svc["taskSpec"]["containerSpec"]
    assert svc["mode"] == {"global": True}, "ds-node-exporter: mode"
    assert "convergeConfig" not in svc, "ds-node-exporter: global mode with convergeConfig"
    assert {m["source"]: m["readOnly"] for m in c["mounts"]} == {
        "/proc": True,
        "/sys": True,
        "/": True,
    }, "ds-node-exporter: host mounts"
    assert c["hostname"] == "{{.Node.Hostname}}", "ds-node-exporter: hostname"
    assert c["user"] == "65534", "ds-node-exporter: user"


def test_monitoring_image_is_built_pushed_and_pinned(
    mocks: Mocks, monitored: dict[str, Any]
) -> None:
    """The monitoring image is built from monitoring/ on the build host, tagged by content,
    pushed, and both services run it by digest."""
    image = mocks.named("unit-monitoring-image-build")
    assert image.inputs["build"]["context"] == "monitoring", image.name
    assert image.inputs["build"]["args"] == {"BASE_IMAGE": "dss-monitoring-base:trixie"}
    assert image.inputs["imageName"].startswith("10.213.0.1:5000/deepspeed-swarm/monitoring:")
    for name in ("ds-prometheus", "ds-node-exporter"):
        ref = services(mocks)[name]["taskSpec"]["containerSpec"]["image"]
        assert ref.startswith("10.213.0.1:5000/deepspeed-swarm/monitoring@sha256:"), name


def test_ranks_serve_metrics_when_on(mocks: Mocks, monitored: dict[str, Any]) -> None:
    """The training tasks get the ranks' metrics port and their Swarm node's name."""
    for name in ("ds-master", "ds-worker"):
        env = services(mocks)[name]["taskSpec"]["containerSpec"]["env"]
        assert env["DSS_METRICS_PORT"] == "9410", name
        assert env["DSS_NODE"] == "{{.Node.Hostname}}", name


def test_prometheus_address_output(monitored: dict[str, Any]) -> None:
    """prometheusAddress is the master host's address and the published port."""
    assert monitored["monitoring"].address == "http://10.213.0.11:9090"


def test_alert_thresholds_do_not_touch_the_training_tasks(dev_raw: dict[str, Any]) -> None:
    """Only what the tasks see (monitoring on, its rank port) changes the task-spec digest;
    thresholds and Prometheus' settings do not, nor do they with monitoring off."""
    from pulumi.runtime.sync_await import _sync_await

    def digest(monitoring: dict[str, Any] | None) -> str:
        raw = {**dev_raw, **({"monitoring": monitoring} if monitoring is not None else {})}
        return str(_sync_await(spec_digest(parse_stack_config(raw), "img").future()))

    off = digest(None)
    assert off == digest({"enabled": False, "retention": "30d"})
    on = digest({"enabled": True})
    assert on != off, "enabling monitoring (new task env) must re-read the tasks"
    assert on == digest({"enabled": True, "alerts": {"stall_intervals": 20}})
    assert on != digest({"enabled": True, "rank_metrics_port": 9500})


def test_config_is_valid_yaml_for_prometheus(mocks: Mocks, monitored: dict[str, Any]) -> None:
    """The delivered prometheus.yml parses and names the rules file it is given."""
    data = mocks.named("unit-monitoring-config").inputs["data"]
    doc = yaml.safe_load(base64.b64decode(data))
    assert doc["rule_files"] == [prometheus.RULES_FILE], "unit-monitoring-config: rule_files"
