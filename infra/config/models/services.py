"""What runs beside training: JupyterLab, the host preflight, monitoring and its alerts."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from infra.config.models.base import MODEL_CONFIG, Port
from infra.config.units import duration_seconds


class _Model(BaseModel):
    model_config = MODEL_CONFIG


# A Prometheus duration (retention): <n> and one unit.
_PROM_DURATION = re.compile(r"^[1-9][0-9]*(ms|s|m|h|d|w|y)$")


class Jupyter(_Model):
    """JupyterLab on the master host, in the training image, with the shared data dir."""

    enabled: bool = False
    """Run JupyterLab (`ds-jupyter`): its token is generated, held as a Swarm secret and
    a secret stack output (`jupyterToken`). Default false."""
    port: Port = 8888
    """Port published on the master host only (Swarm host mode). Default 8888."""


class Gate(_Model):
    """The collective-bandwidth gate between the training services and the launch
    (docs/gate.md): a gloo all-reduce across every training task, on the tasks' own
    data plane; under the floor, pairs of hosts are measured and the slow ones named,
    and the launch does not start."""

    enabled: bool = True
    """Run the gate before every launch in new tasks. Default true."""
    min_busbw_MBps: Annotated[float, Field(ge=0)] = 100.0
    """Floor on the all-reduce's bus bandwidth (2(n-1)/n x size / time, as nccl-tests
    report it) at the largest of `sizes`, in MB/s (10^6 bytes/s). gloo over TCP, one
    process per host: calibrate it on a healthy cluster (docs/gate.md). Default 100."""
    sizes: Annotated[
        list[Annotated[int, Field(ge=1024, le=1 << 30)]], Field(min_length=1, max_length=8)
    ] = [
        1 << 20,
        16 << 20,
    ]
    """All-reduce sizes in bytes, 1 KiB to 1 GiB; the floor applies to the largest.
    Default 1 MiB and 16 MiB."""
    iters: Annotated[int, Field(ge=1, le=100)] = 3
    """Timed all-reduces per size (after one warm-up). Default 3."""
    port: Port = 29600
    """Rendezvous port of the gate's all-reduce on the first task. Default 29600."""


class NicHealth(_Model):
    """The health of every host's `nic` (infra/providers/nic.py): each limit set is a
    refusal before a launch and a drift property while training runs."""

    min_speed_Mbps: Annotated[int, Field(ge=1)] | None = None
    """Lowest negotiated link speed allowed, in Mb/s (`/sys/class/net/<nic>/speed`),
    e.g. 100000 for 100 Gb/s ports. Default: not checked."""
    max_errors: Annotated[int, Field(ge=0)] | None = None
    """Most link errors allowed since the last check: rx errors (CRC included), tx
    errors and carrier changes, as the NIC's counters grew. 0 refuses any. Default:
    not checked."""


class Preflight(_Model):
    """What `pulumi up` checks on every host before creating services."""

    min_driver_version: str = "535.0"
    """Oldest NVIDIA driver allowed on GPU hosts. Default 535.0."""
    require_gpu_isolation: bool = True
    """GPU hosts must run the NVIDIA runtime by default with `swarm-resource =
    "DOCKER_RESOURCE_NVIDIA-GPU"`, and a toolkit that honours it (not 1.18.x outside
    legacy mode; docs/engines.md), so each task sees only the GPUs Swarm assigned
    it. Default true (the lab's fake GPUs turn it off)."""
    ssh_private_key_file: str | None = None
    """Private key file the operator uses for host SSH (facts, launch): the older name
    of `ssh.identity_file`, which wins over it (both set and different is refused).
    Default: the operator's ssh agent."""
    ssh_known_hosts_file: str | None = None
    """known_hosts to verify host keys against (strict): the older name of
    `ssh.known_hosts_file`, which wins over it (both set and different is refused).
    Default: not verified."""
    gpu_health: bool = True
    """On GPU hosts, refuse (and report as drift) GPU Xid errors in the kernel log since
    the last check, memory pending retirement or remap, failed row remapping and
    uncorrected ECC errors (infra/providers/health.py). Default true."""
    dcgm_diag_level: Annotated[int, Field(ge=1, le=4)] | None = None
    """On GPU hosts, run NVIDIA DCGM's diagnostic `dcgmi diag -r <level>` and refuse a
    failed test (infra/providers/dcgm.py): 1 the software and deployment checks
    (seconds; run again at every refresh), 2 adds memory and PCIe (about 2 minutes), 3
    and 4 stress the GPUs (15 minutes and more). Levels 2 to 4 run at create and update
    only: they load the GPUs. Needs DCGM on the hosts. Default: not run."""
    nic: NicHealth = NicHealth()
    """Link speed and error counters of every host's `nic`. Default: not checked."""
    gate: Gate = Gate()
    """The all-reduce gate before the launch. Default: on, floor 100 MB/s."""


class Alerts(_Model):
    """Thresholds of the alert rules Prometheus evaluates (docs/monitoring.md)."""

    stall_intervals: Annotated[int, Field(ge=3, le=1000)] = 8
    """DssRankStalled: a rank whose step has not advanced for this many scrape
    intervals while another rank of its run advanced or still answers (its process
    stopped or hung). At least 3: ranks are scraped up to one interval apart. Also
    the `for` of DssTargetDown, DssRankSlow and DssGpuMemoryHigh. Default 8."""
    slow_rank_factor: Annotated[float, Field(gt=1.0, le=100.0)] = 2.0
    """DssRankSlow: a rank whose own compute time per step (batch and forward pass,
    over the stall window) exceeds the median of its run by this factor. Default 2."""
    gpu_memory_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95
    """DssGpuMemoryHigh: GPU memory used / total above this. Default 0.95."""
    checkpoint_max_age: str = "2h"
    """DssCheckpointOverdue: a run whose newest complete checkpoint (or, before the
    first, its start) is older than this. Default `2h`."""

    @field_validator("checkpoint_max_age")
    @classmethod
    def _age(cls, v: str) -> str:
        duration_seconds(v)
        return v


class Monitoring(_Model):
    """Prometheus, node exporters and per-rank metrics (docs/monitoring.md)."""

    enabled: bool = False
    """Deploy Prometheus on the master host and a node exporter on every host, and
    have every rank serve metrics. Default false: nothing of it exists."""
    rank_metrics_port: Port = 9410
    """First port of the ranks' metrics, inside the training tasks on the overlay:
    local rank i serves on this + i. Default 9410."""
    prometheus_port: Port = 9090
    """Port Prometheus is published on, on the master host only (host mode). Default 9090."""
    node_exporter_port: Port = 9100
    """Port of the node exporters on the overlay (not published). Default 9100."""
    scrape_interval: str = "15s"
    """How often Prometheus scrapes every target. Default `15s`."""
    evaluation_interval: str = "15s"
    """How often Prometheus evaluates the alert rules. Default `15s`."""
    retention: str = "15d"
    """How long Prometheus keeps samples (`--storage.tsdb.retention.time`). Default `15d`."""
    storage: str = "dss-prometheus"
    """Prometheus' data on the master host: a named volume, or an absolute host path
    owned by uid 65534 (e.g. under the shared data dir). Default volume `dss-prometheus`."""
    context: str = "monitoring"
    """Build context of the monitoring image, relative to the project. Default `monitoring`."""
    repository: str = "deepspeed-swarm/monitoring"
    """Repository of the monitoring image (pushed to `image.registry`, built on
    `image.build_host` like the training image). Default `deepspeed-swarm/monitoring`."""
    base_image: str = "dss-monitoring-base:trixie"
    """Base with Debian's prometheus and prometheus-node-exporter, made on the build
    host by `monitoring/build-base`. Default `dss-monitoring-base:trixie`."""
    alerts: Alerts = Alerts()
    """Alert thresholds."""

    @field_validator("scrape_interval", "evaluation_interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if duration_seconds(v) < 1:
            raise ValueError("allowed: at least 1s")
        return v

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not _PROM_DURATION.match(v):
            raise ValueError("allowed: a Prometheus duration: <n> and one of ms, s, m, h, d, w, y")
        return v

    @property
    def scrape_seconds(self) -> int:
        return duration_seconds(self.scrape_interval)

    @property
    def stall_window_seconds(self) -> int:
        """The stall window: stall_intervals scrape intervals."""
        return self.alerts.stall_intervals * self.scrape_seconds
