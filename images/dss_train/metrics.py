"""Per-rank Prometheus metrics of the trainer (prometheus-client, no torch).

Each rank serves its own metrics on `base port + local rank` (several ranks share
a node), off unless a port is given (`--metrics-port` / DSS_METRICS_PORT). Every
series carries the labels run, rank, local_rank, node and gpu_uuid (the rank's
GPU; absent on CPU ranks): names and numbers only, never a value from the
environment at large, so no secret can become a label.

GPU utilisation and memory come from NVML (nvidia-ml-py), read at scrape time for
the rank's own GPU. Where NVML does not answer (a CPU host, the lab's fake GPUs)
the GPU series are simply absent; the trainer logs that once and goes on.
Observability never stops training: a port that cannot be bound is a warning.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("dss-train.metrics")

LABELS = ("run", "rank", "local_rank", "node", "gpu_uuid")

# name -> help; README "Monitoring" documents the same table (a unit test compares).
METRICS = {
    "dss_train_step": "Last optimizer step this rank completed.",
    "dss_train_steps_total": "Optimizer steps this process completed (rate() is steps/s).",
    "dss_train_target_steps": "The step the run trains to (--steps).",
    "dss_train_loss": "This rank's mean loss over its micro-batches of the last step.",
    "dss_train_samples_per_second": "Samples this rank processed per second in the last step.",
    "dss_train_step_seconds": "Wall time of the last step (includes waiting for the other ranks).",
    "dss_train_compute_seconds_total": (
        "Seconds spent on this rank's own work (batch and forward pass: no collective "
        "waits for other ranks, except ZeRO-3 parameter gathers)."
    ),
    "dss_train_last_checkpoint_step": "Step of the newest complete checkpoint (saved or resumed).",
    "dss_train_last_checkpoint_timestamp_seconds": "Unix time that checkpoint was completed.",
    "dss_train_start_timestamp_seconds": "Unix time this rank started training.",
    "dss_train_rank_info": "1, with the rank's world size as a label.",
    "dss_gpu_utilization_ratio": "GPU busy fraction over NVML's last sample period (0-1).",
    "dss_gpu_memory_used_bytes": "GPU memory in use (all processes on the GPU).",
    "dss_gpu_memory_total_bytes": "GPU memory in all.",
}
GPU_METRICS = tuple(m for m in METRICS if m.startswith("dss_gpu_"))


@dataclass(frozen=True)
class RankIdentity:
    """Who a rank is: the values of its labels."""

    run: str
    rank: int
    local_rank: int
    node: str
    gpu_uuid: str = ""

    def labels(self) -> dict[str, str]:
        return {
            "run": self.run,
            "rank": str(self.rank),
            "local_rank": str(self.local_rank),
            "node": self.node,
            "gpu_uuid": self.gpu_uuid,
        }


def metrics_port(base: int, local_rank: int) -> int:
    """The port a rank listens on: several ranks share a node, one port each."""
    return base + local_rank


def visible_gpu_uuid(env: Mapping[str, str], local_rank: int) -> str:
    """The rank's GPU UUID from NVIDIA_VISIBLE_DEVICES (the NVIDIA runtime sets it from
    the GPUs Swarm assigned), or "" when it lists indices, `all`, or nothing."""
    devices = [d.strip() for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if 0 <= local_rank < len(devices) and devices[local_rank].startswith(("GPU-", "MIG-")):
        return devices[local_rank]
    return ""


class Nvml:
    """NVML for one GPU, or nothing: every failure means "no GPU metrics", quietly."""

    def __init__(self, uuid: str, index: int, nvml: Any = None) -> None:
        self.handle: Any = None
        self.uuid = uuid
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            self.nvml = nvml
            if uuid:
                self.handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            else:
                self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
                got = nvml.nvmlDeviceGetUUID(self.handle)
                self.uuid = got.decode() if isinstance(got, bytes) else str(got)
        except Exception as e:  # ImportError, NVMLError_LibraryNotFound, no such GPU, ...
            self.handle = None
            log.info("NVML does not answer (%s): no GPU metrics from this rank", e)

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read(self) -> tuple[float, int, int] | None:
        """(utilisation 0-1, memory used, memory total), or None when NVML fails now."""
        if self.handle is None:
            return None
        try:
            util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
            return util.gpu / 100.0, int(mem.used), int(mem.total)
        except Exception as e:
            log.warning("NVML read failed (%s): GPU metrics left out of this scrape", e)
            return None


class GpuCollector(Collector):
    """The rank's GPU, read through NVML when Prometheus scrapes."""

    def __init__(self, nvml: Nvml, labels: dict[str, str]) -> None:
        self.nvml = nvml
        self.labels = labels

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self.nvml.read()
        if values is None:
            return
        names, label_values = list(self.labels), list(self.labels.values())
        for name, value in zip(GPU_METRICS, values, strict=True):
            family = GaugeMetricFamily(name, METRICS[name], labels=names)
            family.add_metric(label_values, float(value))
            yield family


class RankMetrics:
    """The metrics of one rank, in a registry of its own."""

    def __init__(
        self,
        who: RankIdentity,
        world_size: int,
        target_steps: int,
        nvml: Nvml | None = None,
        clock: Any = time.time,
    ) -> None:
        self.registry = CollectorRegistry()
        self.clock = clock
        if nvml is not None and nvml.available and not who.gpu_uuid:
            who = RankIdentity(who.run, who.rank, who.local_rank, who.node, nvml.uuid)
        self.who = who
        labels = who.labels()
        names = list(labels)

        def gauge(name: str) -> Any:
            return Gauge(name, METRICS[name], names, registry=self.registry).labels(**labels)

        self.step = gauge("dss_train_step")
        self.steps = Counter(
            "dss_train_steps", METRICS["dss_train_steps_total"], names, registry=self.registry
        ).labels(**labels)
        self.compute = Counter(
            "dss_train_compute_seconds",
            METRICS["dss_train_compute_seconds_total"],
            names,
            registry=self.registry,
        ).labels(**labels)
        self.loss = gauge("dss_train_loss")
        self.samples_per_s = gauge("dss_train_samples_per_second")
        self.step_seconds = gauge("dss_train_step_seconds")
        # Absent until there is a checkpoint (a 0 would read as "1970").
        self._ckpt_step = Gauge(
            "dss_train_last_checkpoint_step",
            METRICS["dss_train_last_checkpoint_step"],
            names,
            registry=self.registry,
        )
        self._ckpt_time = Gauge(
            "dss_train_last_checkpoint_timestamp_seconds",
            METRICS["dss_train_last_checkpoint_timestamp_seconds"],
            names,
            registry=self.registry,
        )
        gauge("dss_train_target_steps").set(target_steps)
        gauge("dss_train_start_timestamp_seconds").set(clock())
        Gauge(
            "dss_train_rank_info",
            METRICS["dss_train_rank_info"],
            [*names, "world_size"],
            registry=self.registry,
        ).labels(**labels, world_size=str(world_size)).set(1)
        if nvml is not None and nvml.available:
            self.registry.register(GpuCollector(nvml, labels))
        self.server: Any = None

    def serve(self, port: int, addr: str = "0.0.0.0") -> int | None:
        """Serve /metrics on `port` (0: any free port); the bound port, or None when the
        port cannot be bound (logged: training goes on without metrics)."""
        try:
            self.server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            log.warning("metrics port %s:%d: %s; this rank serves no metrics", addr, port, e)
            return None
        bound: int = self.server.server_address[1]
        log.info("metrics on %s:%d/metrics", addr, bound)
        return bound

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def resumed(self, step: int, checkpoint_time: float | None) -> None:
        """The run resumed from a checkpoint of `step` (completed at `checkpoint_time`)."""
        self.step.set(step)
        self._ckpt_step.labels(**self.who.labels()).set(step)
        if checkpoint_time is not None:
            self._ckpt_time.labels(**self.who.labels()).set(checkpoint_time)

    def step_done(
        self, step: int, loss: float, samples: int, step_seconds: float, compute_seconds: float
    ) -> None:
        """A completed optimizer step of this rank."""
        self.step.set(step)
        self.steps.inc()
        self.loss.set(loss)
        self.step_seconds.set(step_seconds)
        self.samples_per_s.set(samples / step_seconds if step_seconds > 0 else 0.0)
        self.compute.inc(max(compute_seconds, 0.0))

    def checkpoint_done(self, step: int) -> None:
        """A complete checkpoint of `step` was written (all ranks)."""
        self._ckpt_step.labels(**self.who.labels()).set(step)
        self._ckpt_time.labels(**self.who.labels()).set(self.clock())


def from_env(
    env: Mapping[str, str],
    *,
    port: int,
    run: str,
    rank: int,
    local_rank: int,
    world_size: int,
    target_steps: int,
    gpu_uuid: str = "",
    use_nvml: bool = True,
) -> RankMetrics | None:
    """The rank's metrics, serving on `port + local_rank`; None when `port` is 0 (off)."""
    if port <= 0:
        return None
    node = env.get("DSS_NODE") or os.uname().nodename
    uuid = gpu_uuid or visible_gpu_uuid(env, local_rank)
    nvml = Nvml(uuid, local_rank) if use_nvml else None
    who = RankIdentity(run, rank, local_rank, node, uuid)
    metrics = RankMetrics(who, world_size, target_steps, nvml)
    if metrics.serve(metrics_port(port, local_rank)) is None:
        return None
    return metrics
