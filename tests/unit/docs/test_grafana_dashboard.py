"""docs/grafana-dashboard.json: importable, and every query (and every alert rule) names
metrics that exist: the ranks' (from a real scrape of dss_train.metrics), the node
exporter's (captured from the monitoring image) and Prometheus' own."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infra.config import parse_stack_config
from infra.render import prometheus, queuefile, run
from tests.unit.infra.samples import ROOT, stack_config

pytestmark = pytest.mark.unit

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
NODE_EXPORTER = Path(__file__).parent / "fixtures" / "node-exporter-metrics.txt"
# What Prometheus itself records for every target and alert.
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"}
PROMQL_MODIFIERS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset"}
PROMQL_WORDS = PROMQL_MODIFIERS | {"and", "or", "unless", "bool", "inf", "nan"}


def rank_metrics() -> set[str]:
    """Sample names a rank really serves (GPU ones with NVML answering)."""
    from dss_train import metrics as m

    nvml = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda u: u,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=50),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=1, total=2),
    )
    who = m.RankIdentity("run", 0, 0, "node", "GPU-a")
    rank = m.RankMetrics(who, 1, 10, m.Nvml("GPU-a", 0, nvml=nvml))
    rank.step_done(1, 1.0, 1, 1.0, 0.5)
    rank.checkpoint_done(1)
    text = generate_latest(rank.registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def known_metrics() -> set[str]:
    node = {x for x in NODE_EXPORTER.read_text().splitlines() if x and not x.startswith("#")}
    # The supervisors' text files (infra/render/run.py), which the node exporters serve.
    supervisors = {run.RESTARTS_METRIC, run.BUDGET_METRIC}
    # The queue's text file (infra/render/queuefile.py), written by each pass.
    return rank_metrics() | node | PROMETHEUS_OWN | supervisors | set(queuefile.METRICS)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions and keywords left out)."""
    names = set()
    for alternatives in re.findall(r'__name__\s*=~?\s*"([^"]*)"', expr):
        names |= set(alternatives.split("|"))
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?", e):
        if m.group(2) is None and m.group(1) not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every panel target and template query."""
    out = [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p["targets"]]
    for var in dashboard()["templating"]["list"]:
        query = var["query"]["query"]
        inner = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
        assert inner, f"template {var['name']}: {query}"
        out.append((f"template {var['name']}", inner.group(1)))
    return out


def test_extractor_finds_names_not_functions() -> None:
    """The PromQL reader keeps metric names and drops functions, keywords and labels."""
    expr = (
        'quantile by (run) (0.5, rate(a_total{job="x",run=~"$run"}[5m]) / rate(b[1m]))'
        ' > on (run) group_left () c and time() - max({__name__=~"d|e"})'
    )
    assert metric_names(expr) == {"a_total", "b", "c", "d", "e"}


def test_dashboard_queries_name_existing_metrics() -> None:
    """Every query of the dashboard selects metrics a rank, a node exporter or Prometheus
    itself exposes."""
    known = known_metrics()
    for title, expr in queries():
        names = metric_names(expr)
        assert names, f"panel {title!r}: no metric in {expr!r}"
        assert names <= known, f"panel {title!r}: unknown metrics {names - known}"


def shown() -> set[str]:
    """The metric names some query of the dashboard selects."""
    return set().union(*(metric_names(e) for _, e in queries()))


def test_dashboard_shows_every_rank_metric() -> None:
    """Each metric a rank serves appears in some panel."""
    used = shown()
    served = {n for n in rank_metrics() if n.startswith("dss_") and not n.endswith("_created")}
    missing = served - used - {"dss_train_rank_info", "dss_train_start_timestamp_seconds"}
    assert not missing, f"docs/grafana-dashboard.json shows no panel for {sorted(missing)}"


def test_dashboard_shows_the_queue() -> None:
    """Each metric of the queue's file (jobs waiting, waits, the last pass) appears in
    some panel."""
    missing = set(queuefile.METRICS) - shown()
    assert not missing, f"docs/grafana-dashboard.json shows no panel for {sorted(missing)}"


def test_dashboard_uses_a_datasource_input() -> None:
    """Importing asks for the Prometheus data source; every panel uses it."""
    inputs = dashboard()["__inputs"]
    assert [i["name"] for i in inputs] == ["DS_PROMETHEUS"], inputs
    for p in dashboard()["panels"]:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]


def test_alert_rules_name_existing_metrics() -> None:
    """Every alert expression selects metrics that exist (the ranks' and Prometheus' own)."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw["monitoring"] = {"enabled": True}
    doc = yaml.safe_load(prometheus.alert_rules(parse_stack_config(raw)))
    known = known_metrics()
    for rule in doc["groups"][0]["rules"]:
        names = metric_names(rule["expr"])
        assert names and names <= known, f"{rule['alert']}: unknown metrics {names - known}"
