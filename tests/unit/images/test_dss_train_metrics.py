"""Per-rank Prometheus metrics: served on an ephemeral port, labelled, quiet without NVML."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from dss_train import metrics as m
from dss_train.main import parse_args
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.unit

WHO = m.RankIdentity(run="demo", rank=3, local_rank=1, node="gpu-02")
SECRET = "wandb-0f9e8d7c-never-a-label"


class FakeNvml:
    """The subset of pynvml the trainer calls, answering for one GPU."""

    def __init__(self, uuid: str = "GPU-aaaa", used: int = 30 << 30, total: int = 80 << 30):
        self.uuid, self.used, self.total = uuid, used, total

    def nvmlInit(self) -> None:
        return None

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != self.uuid:
            raise RuntimeError(f"no GPU {uuid}")
        return uuid

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self.uuid

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return handle

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(used=self.used, total=self.total, free=self.total - self.used)


class NoNvml:
    """pynvml on a host without the NVIDIA driver: init fails."""

    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


def scrape(metrics: m.RankMetrics) -> dict[str, list[Any]]:
    """Serve on an ephemeral loopback port, GET /metrics once: samples by metric name."""
    port = metrics.serve(0, addr="127.0.0.1")
    assert port, "the metrics server did not bind an ephemeral port"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


@pytest.fixture
def served() -> Iterator[list[m.RankMetrics]]:
    """Rank metrics made by a test; their servers are shut down after it."""
    made: list[m.RankMetrics] = []
    yield made
    for metrics in made:
        metrics.close()


def rank(served: list[m.RankMetrics], nvml: m.Nvml | None = None, **kw: Any) -> m.RankMetrics:
    metrics = m.RankMetrics(kw.pop("who", WHO), world_size=8, target_steps=100, nvml=nvml, **kw)
    served.append(metrics)
    return metrics


def test_every_training_metric_is_served_with_rank_labels(served: list[m.RankMetrics]) -> None:
    """All dss_train_* metrics are exposed, each sample labelled run, rank, local rank, node."""
    metrics = rank(served)
    metrics.step_done(1, 2.5, 8, 0.5, 0.2)
    metrics.checkpoint_done(1)
    samples = scrape(metrics)
    for name in m.METRICS:
        if name in m.GPU_METRICS:
            continue
        assert name in samples, f"{name} is not served"
        for s in samples[name]:
            want = {"run": "demo", "rank": "3", "local_rank": "1", "node": "gpu-02"}
            assert want.items() <= s.labels.items(), f"{name}: labels {s.labels}"


def test_step_done_sets_step_loss_and_throughput(served: list[m.RankMetrics]) -> None:
    """A step sets step, loss, step time, samples/s and adds to the compute counter."""
    metrics = rank(served)
    metrics.step_done(7, 1.25, 16, 2.0, 0.5)
    metrics.step_done(8, 1.0, 16, 4.0, 0.75)
    samples = scrape(metrics)
    value = {name: samples[name][0].value for name in samples if name.startswith("dss_train")}
    assert value["dss_train_step"] == 8
    assert value["dss_train_steps_total"] == 2
    assert value["dss_train_loss"] == 1.0
    assert value["dss_train_step_seconds"] == 4.0
    assert value["dss_train_samples_per_second"] == 4.0
    assert value["dss_train_compute_seconds_total"] == 1.25
    assert value["dss_train_target_steps"] == 100


def test_no_checkpoint_series_before_the_first(served: list[m.RankMetrics]) -> None:
    """Before any checkpoint the checkpoint series are absent (not a 0 that reads as 1970)."""
    samples = scrape(rank(served))
    assert "dss_train_last_checkpoint_step" not in samples
    assert "dss_train_last_checkpoint_timestamp_seconds" not in samples
    assert "dss_train_start_timestamp_seconds" in samples


def test_checkpoint_records_step_and_time(served: list[m.RankMetrics]) -> None:
    """A completed checkpoint sets its step and the clock's time."""
    metrics = rank(served, clock=lambda: 1_700_000_000.0)
    metrics.checkpoint_done(40)
    samples = scrape(metrics)
    assert samples["dss_train_last_checkpoint_step"][0].value == 40
    assert samples["dss_train_last_checkpoint_timestamp_seconds"][0].value == 1_700_000_000.0


def test_resume_reports_the_resumed_checkpoint(served: list[m.RankMetrics]) -> None:
    """A resumed run starts at the checkpoint's step, with the checkpoint's time."""
    metrics = rank(served)
    metrics.resumed(60, 1_690_000_000.0)
    samples = scrape(metrics)
    assert samples["dss_train_step"][0].value == 60
    assert samples["dss_train_last_checkpoint_step"][0].value == 60
    assert samples["dss_train_last_checkpoint_timestamp_seconds"][0].value == 1_690_000_000.0


def test_gpu_metrics_from_nvml_carry_the_gpu_uuid(served: list[m.RankMetrics]) -> None:
    """Where NVML answers, utilisation and memory of the rank's GPU are served, and every
    series carries the GPU's UUID."""
    nvml = m.Nvml("", 1, nvml=FakeNvml("GPU-1234"))
    samples = scrape(rank(served, nvml))
    assert samples["dss_gpu_utilization_ratio"][0].value == 0.87
    assert samples["dss_gpu_memory_used_bytes"][0].value == 30 << 30
    assert samples["dss_gpu_memory_total_bytes"][0].value == 80 << 30
    assert samples["dss_gpu_memory_used_bytes"][0].labels["gpu_uuid"] == "GPU-1234"
    assert samples["dss_train_step"][0].labels["gpu_uuid"] == "GPU-1234"


def test_no_nvml_means_no_gpu_series_and_no_error(served: list[m.RankMetrics]) -> None:
    """Without NVML (CPU hosts, the lab) the GPU series are absent; training metrics stay."""
    nvml = m.Nvml("", 0, nvml=NoNvml())
    assert not nvml.available
    samples = scrape(rank(served, nvml))
    assert not set(m.GPU_METRICS) & set(samples), f"GPU series without NVML: {sorted(samples)}"
    assert "dss_train_step" in samples


def test_environment_values_never_become_labels(
    served: list[m.RankMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Labels are run, rank, local rank, node and GPU UUID only: a secret in the
    environment appears nowhere in what a rank serves."""
    env = {"WANDB_API_KEY": SECRET, "DSS_NODE": "gpu-07", "HF_TOKEN": SECRET}
    metrics = m.from_env(
        env, port=0, run="demo", rank=0, local_rank=0, world_size=1, target_steps=5, use_nvml=False
    )
    assert metrics is None, "port 0 must mean no metrics server"
    who = m.RankIdentity("demo", 0, 0, env["DSS_NODE"])
    samples = scrape(rank(served, who=who))
    labels = {k for ss in samples.values() for s in ss for k in s.labels}
    assert labels <= {*m.LABELS, "world_size"}, f"unexpected labels {labels}"
    assert all(SECRET not in str(s.labels) for ss in samples.values() for s in ss)


def test_each_local_rank_gets_its_own_port() -> None:
    """Ranks on one node listen on base port + local rank."""
    assert [m.metrics_port(9410, lr) for lr in range(4)] == [9410, 9411, 9412, 9413]


def test_busy_port_is_a_warning_not_an_error(served: list[m.RankMetrics]) -> None:
    """A port another process holds leaves the rank without metrics; training goes on."""
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        metrics = rank(served)
        assert metrics.serve(port) is None, f"bound port {port} although it is taken"


def test_gpu_uuid_from_the_nvidia_runtime() -> None:
    """NVIDIA_VISIBLE_DEVICES names the rank's GPU by UUID; indices or `all` name none."""
    env = {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    assert m.visible_gpu_uuid(env, 1) == "GPU-b"
    assert m.visible_gpu_uuid(env, 2) == ""
    assert m.visible_gpu_uuid({"NVIDIA_VISIBLE_DEVICES": "all"}, 0) == ""
    assert m.visible_gpu_uuid({}, 0) == ""


def test_metrics_are_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """train.py serves no metrics unless DSS_METRICS_PORT or --metrics-port says where."""
    monkeypatch.delenv("DSS_METRICS_PORT", raising=False)
    assert parse_args([]).metrics_port == 0
    monkeypatch.setenv("DSS_METRICS_PORT", "9410")
    assert parse_args([]).metrics_port == 9410


def test_monitoring_doc_documents_every_metric() -> None:
    """docs/monitoring.md "Metrics" lists exactly the metrics a rank serves."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "monitoring.md").read_text()
    section = doc.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `dss_")}
    assert documented == set(m.METRICS), (
        f"docs/monitoring.md Metrics table vs METRICS: {documented ^ set(m.METRICS)}"
    )
