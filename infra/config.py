"""The one place stack configuration is read and validated.

Everything under `infra/` receives a validated `StackConfig`; nothing else calls
`pulumi.Config`. Validation runs before any resource is registered, so a bad
stack file fails `pulumi preview` without touching a host. Every error names the
config key, the bad value and what is allowed.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from infra.layout import DATA_MOUNT, DEFAULT_SCRIPT, IMAGE_HOME, PROJECT, SECRETS_DIR, SHM_MOUNT

# The MTU range a Linux NIC and Docker's overlay driver accept; 9216 is the
# largest jumbo frame common switches carry.
MTU_MIN, MTU_MAX = 1280, 9216
# VXLAN (outer Ethernet + IP + UDP + VXLAN headers) takes 50 bytes of the underlay MTU.
VXLAN_OVERHEAD = 50
# IPsec ESP in transport mode adds up to this much on top when the overlay is encrypted.
IPSEC_OVERHEAD = 58
# Ports Swarm itself holds on every host: a master port here would collide.
SWARM_PORTS = {2377: "swarm management", 7946: "swarm gossip", 4789: "VXLAN data path"}
# Top-level config keys (all in the `deepspeed-swarm:` namespace).
CONFIG_KEYS = (
    "hosts",
    "network",
    "image",
    "training",
    "secrets",
    "preflight",
    "jupyter",
    "monitoring",
)

# Where the stack itself mounts into every task (infra/services.py) and where the
# image keeps its code (images/Dockerfile); a dataset mount must stay clear of them.
RESERVED_TARGETS = {
    DATA_MOUNT: "training.data_dir",
    SHM_MOUNT: "training.shm_size",
    SECRETS_DIR: "secrets",
    IMAGE_HOME: "the image home",
}
# Set per rank by deepspeed's launcher, torchrun or torch.distributed: a stack-wide
# value would give every rank the same rank.
LAUNCHER_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "CROSS_RANK",
    "CROSS_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
)
# What render.training_env derives from other keys: the key to set instead.
STACK_ENV = {
    "DSS_RUN": "training.run_name",
    "DSS_SSH_PORT": "training.sshd_port",
    "DSS_SSH_PRIVATE_KEY_FILE": "secrets (the stack's SSH key pair)",
    "DSS_SSH_PUBLIC_KEY_FILE": "secrets (the stack's SSH key pair)",
    "DSS_REQUIRE_SSH_KEY": "secrets (the stack's SSH key pair)",
    "DSS_DATA_DIR": "training.data_dir",
    "DS_ACCELERATOR": "training.cpu_only",
    "DSS_METRICS_PORT": "monitoring.rank_metrics_port",
    "DSS_NODE": "monitoring (the Swarm node's hostname)",
}
# DeepSpeed 0.17.6 (deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS): its own
# optimizers, matched case-insensitively; any other name is looked up as a
# torch.optim class (engine._configure_basic_optimizer), case-sensitively.
DS_OPTIMIZERS = (
    "adagrad",
    "adam",
    "adamw",
    "lamb",
    "onebitadam",
    "onebitlamb",
    "zerooneadam",
    "muadam",
    "muadamw",
    "musgd",
    "lion",
    "muon",
)
TORCH_OPTIMIZERS = (
    "ASGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "LBFGS",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
    "SparseAdam",
)
# deepspeed/runtime/lr_schedules.py VALID_LR_SCHEDULES, else a torch.optim.lr_scheduler
# class (engine._scheduler_from_config); both case-sensitive.
DS_SCHEDULERS = ("LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
TORCH_SCHEDULERS = (
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
)
ZERO_STAGES = (0, 1, 2, 3)
# Networks Docker creates itself: the swarm's ingress (10.0.0.0/24 at `swarm init`
# without --default-addr-pool, as SwarmCluster does) and the local pools that
# docker0 and docker_gwbridge (every task's second interface) come from. An
# explicit overlay subnet elsewhere in the swarm pool (10.0.0.0/8) is fine: Swarm's
# allocator reserves it and hands out other /24s around it.
DOCKER_POOLS = {
    "10.0.0.0/24": "the swarm's default ingress network",
    "172.17.0.0/16": "Docker's local pool (docker0, docker_gwbridge)",
    "172.18.0.0/15": "Docker's local pool (docker0, docker_gwbridge)",
    "172.20.0.0/14": "Docker's local pool (docker0, docker_gwbridge)",
    "172.24.0.0/13": "Docker's local pool (docker0, docker_gwbridge)",
    "192.168.0.0/16": "Docker's local pool (docker0, docker_gwbridge)",
}
# Addresses an overlay spends besides the tasks: network, broadcast, gateway.
SUBNET_OVERHEAD = 3
# Per node on the overlay: its master/worker task, the warm-up task, and the
# node's load-balancer endpoint.
OVERLAY_ADDRS_PER_NODE = 3
# With monitoring: one node exporter per node, and Prometheus once.
MONITORING_ADDRS_PER_NODE, MONITORING_ADDRS = 1, 1
# A Prometheus duration (retention): <n> and one unit.
_PROM_DURATION = re.compile(r"^[1-9][0-9]*(ms|s|m|h|d|w|y)$")
# Below this a final checkpoint of a real model rarely finishes before SIGKILL.
MIN_CHECKPOINT_GRACE_S = 30

Port = Annotated[int, Field(ge=1, le=65535)]
Mtu = Annotated[int, Field(ge=MTU_MIN, le=MTU_MAX)]
_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_SECRET_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")
# RFC 1123 host name: dot-separated labels of 1-63 letters, digits and inner '-'.
_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"^{_DNS_LABEL}(?:\.{_DNS_LABEL})*$")
# Swarm's name rule for networks (swarmkit controlapi isValidDNSName), max 63.
_SWARM_NAME = re.compile(r"^[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*$")
# Docker's reference grammar (distribution/reference): path components and the
# registry domain[:port].
_REPO_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_REPO_COMPONENT}(?:/{_REPO_COMPONENT})*$")
_REGISTRY = re.compile(rf"^(?:{_DNS_LABEL}(?:\.{_DNS_LABEL})*|\[[0-9a-fA-F:.]+\])(?::(\d+))?$")
_VERSION = re.compile(r"^\d+(?:\.\d+)*$")


def duration_seconds(value: str) -> int:
    """Seconds in a Docker duration like `120s`, `2m`, `1h` (whole units only)."""
    units = {"s": 1, "m": 60, "h": 3600}
    if value and value[-1] in units and value[:-1].isdigit():
        return int(value[:-1]) * units[value[-1]]
    raise ValueError(f"duration {value!r}: allowed forms are <n>s, <n>m, <n>h")


def size_bytes(size: str) -> int:
    """`1g` / `512m` / `65536k` / `4096` -> bytes (Docker's --shm-size spelling)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = size.strip().lower()
    if s and s[-1] in units and s[:-1].isdigit():
        return int(s[:-1]) * units[s[-1]]
    if s.isdigit():
        return int(s)
    raise ValueError(f"size {size!r}: allowed forms are <n>, <n>k, <n>m, <n>g")


class ConfigError(Exception):
    """A stack configuration that cannot be applied; one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid {PROJECT} stack configuration:\n{lines}")


class _Model(BaseModel):
    # Unknown keys are typos until proven otherwise: refuse them.
    # Field docstrings are the documentation: README's config table is generated
    # from them (`python -m infra.config`), and a test keeps the two equal.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Gpus(_Model):
    """The GPUs a host declares."""

    count: Annotated[int, Field(ge=0, le=16)] = 0
    """Number of GPUs on the host (0 for a CPU-only host). Default 0."""
    uuids: list[str] | None = None
    """GPU UUIDs (`nvidia-smi -L`); when given, their number must equal `count`
    and HostFacts checks the host still has exactly these. Default: not pinned."""
    model: str = ""
    """GPU model, applied as node label `dss.gpu-model` (e.g. `H100-SXM`). Default empty."""

    @model_validator(mode="after")
    def _uuids_match_count(self) -> Gpus:
        if self.uuids is not None:
            if len(self.uuids) != self.count:
                raise ValueError(
                    f"uuids lists {len(self.uuids)} GPUs but count is {self.count}; "
                    "allowed: exactly `count` UUIDs, or leave uuids unset"
                )
            dupes = sorted(u for u, n in Counter(self.uuids).items() if n > 1)
            if dupes:
                raise ValueError(f"uuids repeats {dupes}; allowed: each GPU UUID once")
        return self


class DockerTls(_Model):
    """Client TLS material for a `tcp://` docker endpoint (paths on the operator's machine)."""

    ca: str
    """CA certificate file."""
    cert: str
    """Client certificate file."""
    key: str
    """Client key file (its content is kept as a secret in state)."""


class Host(_Model):
    """One server of the cluster."""

    name: str
    """Host name; must equal the swarm node hostname (`docker info` Name)."""
    address: str
    """IP address or DNS name that the other hosts and the operator reach it on."""
    ssh_user: str = "root"
    """SSH user for host commands (facts, launch). Default `root`."""
    ssh_port: Port = 22
    """SSH port. Default 22."""
    docker_host: str
    """Docker endpoint: `ssh://user@host`, `unix:///path.sock` or `tcp://host:2376` (TLS only)."""
    docker_tls: DockerTls | None = None
    """TLS client files, required with `tcp://`. Default none."""
    role: Literal["manager", "worker"] = "worker"
    """Swarm role. Default `worker`."""
    gpus: Gpus = Gpus()
    """GPUs on this host. Default none."""
    nic: str = "eth0"
    """Underlay interface whose MTU must carry the overlay. Default `eth0`."""
    rdma_interface: str | None = None
    """RDMA/RoCE device for NCCL (`NCCL_IB_HCA`, e.g. `mlx5_0`). Default none (TCP sockets)."""
    labels: dict[str, str] = {}
    """Extra swarm node labels. Default none."""
    availability: Literal["active", "drain"] = "active"
    """`drain` takes a host out of training before it leaves the stack: Swarm moves its
    tasks away, `pulumi up` relaunches without it (one restart); removing the host in
    a later change then leaves training alone. Default `active`."""
    spare: bool = False
    """A standby host: in the swarm, labelled and eligible for `ds-worker`, but it
    carries no training task until Swarm moves one onto it (a host was lost); the
    next `pulumi up` relaunches on the real placement. Default false."""

    @field_validator("name")
    @classmethod
    def _name_is_hostname(cls, v: str) -> str:
        if not _HOST_NAME.match(v):
            raise ValueError("allowed: letters, digits, '-' and '.', as in a DNS host name")
        return v

    @field_validator("docker_host")
    @classmethod
    def _endpoint_scheme(cls, v: str) -> str:
        if not v.startswith(("ssh://", "unix://", "tcp://")):
            raise ValueError("allowed: an ssh://, unix:// or tcp:// (with docker_tls) URL")
        return v

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _LABEL_KEY.match(key) or key.startswith("dss."):
                raise ValueError(
                    f"label key {key!r} is not allowed; allowed: lower-case "
                    "[a-z0-9._-] keys, not starting with the reserved prefix 'dss.'"
                )
        return v

    @model_validator(mode="after")
    def _tcp_needs_tls(self) -> Host:
        if self.docker_host.startswith("tcp://") and self.docker_tls is None:
            raise ValueError(
                f"docker_host {self.docker_host!r} is plain tcp:// without docker_tls; "
                "allowed: tcp:// with docker_tls (ca, cert, key), or ssh:// / unix://"
            )
        return self

    @property
    def ssh_host(self) -> str:
        """The address used for SSH: the host part of an ssh:// endpoint, else `address`."""
        return self.address


class Network(_Model):
    """The overlay network the training tasks talk over."""

    name: str = "ds-net"
    """Network name prefix: the network is `<name>-<6 hex>` (its VNI), a new
    suffix with every replacement (stack output `networkName`). Default `ds-net`."""
    mtu: Mtu = 9000
    """Overlay MTU (`com.docker.network.driver.mtu`). Default 9000."""
    underlay_mtu: Mtu = 9100
    """MTU the hosts' NICs provide; must carry the overlay plus VXLAN. Default 9100."""
    subnet: str | None = None
    """Overlay subnet (CIDR). Default: Docker's address pool."""
    attachable: bool = True
    """Let standalone containers (debug shells) join. Default true."""
    encrypted: bool = False
    """IPsec-encrypt the data path (costs ~58 bytes of MTU and CPU). Default false."""

    @field_validator("subnet")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ipaddress.ip_network(v, strict=True)
            except ValueError as e:
                raise ValueError(
                    f"allowed: an IPv4 network in CIDR form, e.g. 10.20.0.0/16 ({e})"
                ) from None
        return v

    @property
    def overhead(self) -> int:
        """Bytes the underlay must carry beyond the overlay MTU."""
        return VXLAN_OVERHEAD + (IPSEC_OVERHEAD if self.encrypted else 0)


class Image(_Model):
    """How the training image is built and distributed."""

    context: str = "images"
    """Build context, relative to the project. Default `images`."""
    dockerfile: str = "Dockerfile"
    """Dockerfile, relative to the context. Default `Dockerfile`."""
    build_args: dict[str, str] = {}
    """Build args (BASE_IMAGE, TORCH_VERSION, DEEPSPEED_VERSION, ...). Default none."""
    repository: str = "deepspeed-swarm/train"
    """Repository name (without registry). Default `deepspeed-swarm/train`."""
    registry: str | None = None
    """Registry host[:port] to push to; services pin the pushed digest. Default none:
    the image is built on every host instead."""
    build_host: str = "unix:///var/run/docker.sock"
    """Docker endpoint that builds (and pushes) the image. Default the local engine."""
    builder: Literal["BuilderV1", "BuilderBuildKit"] = "BuilderBuildKit"
    """Docker builder the provider asks the engine for. Default BuildKit."""


class Mount(_Model):
    """A host path bind-mounted into every training task."""

    source: str
    """Host path (the same on every host, e.g. an NFS mount)."""
    target: str
    """Path inside the task."""
    read_only: bool = True
    """Mount read-only. Default true."""


class RestartPolicy(_Model):
    """Swarm restart policy of the training tasks."""

    condition: Literal["none", "on-failure", "any"] = "on-failure"
    """When Swarm restarts a task. Default `on-failure`."""
    delay: str = "10s"
    """Wait between restarts. Default `10s`."""
    max_attempts: Annotated[int, Field(ge=0)] = 3
    """Restarts within `window` before giving up (0 = unlimited). Default 3."""
    window: str = "120s"
    """Window over which restarts are counted. Default `120s`."""

    @field_validator("delay", "window")
    @classmethod
    def _duration(cls, v: str) -> str:
        duration_seconds(v)
        return v


class Training(_Model):
    """The training job."""

    launcher: Literal["deepspeed", "torchrun"] = "deepspeed"
    """Launcher. Default `deepspeed`."""
    launch_mode: Literal["pdsh", "no_ssh"] = "pdsh"
    """How the deepspeed launcher reaches the workers: `pdsh` over SSH from the
    master, or `no_ssh` (one launcher per node with its node rank; torchrun always
    runs this way). Default `pdsh`. (No OpenMPI: the image ships no mpirun.)"""
    script: str = "/opt/dss/train.py"
    """Training script inside the image. Default `/opt/dss/train.py`."""
    args: list[str] = []
    """Extra arguments for the script. Default none."""
    ds_config: dict[str, Any] | str = "/opt/dss/ds_config.json"
    """DeepSpeed config: an inline object, or a path inside the image. Default the image's."""
    gpus_per_node: Annotated[int, Field(ge=0, le=16)] = 8
    """GPUs each node's task reserves and launches ranks on (0 = CPU ranks). Default 8."""
    procs_per_node: int | None = Field(default=None, ge=1, le=64)
    """Ranks per node on CPU (`cpu_only`, or `gpus_per_node` 0). Default 1; on GPUs
    the launcher starts one rank per reserved GPU."""
    master_port: Port = 29500
    """torch.distributed rendezvous port on the master. Default 29500."""
    sshd_port: Port = 2222
    """Port of the tasks' sshd (pdsh). Default 2222."""
    env: dict[str, str] = {}
    """Extra environment (NCCL_*, ...). Default none."""
    data_dir: str = "/data"
    """Host path of the shared file system, mounted read-write at /data. Default `/data`."""
    datasets: list[Mount] = []
    """Read-only dataset mounts. Default none."""
    run_name: str = "run"
    """Run name: checkpoints in /data/checkpoints/<run>, logs in /data/logs/<run>.
    Default `run`."""
    checkpoint_every: Annotated[int, Field(ge=1)] = 50
    """Checkpoint every K steps. Default 50."""
    steps: Annotated[int, Field(ge=1)] = 1000
    """Total training steps. Default 1000."""
    shm_size: str = "1g"
    """Size of the tmpfs mounted at /dev/shm (NCCL needs it). Default `1g`."""
    stop_grace_period: str = "120s"
    """Time between SIGTERM and SIGKILL, for the final checkpoint. Default `120s`."""
    restart_policy: RestartPolicy = RestartPolicy()
    """Swarm restart policy. Default on-failure, 3 attempts."""
    cpu_only: bool = False
    """Train on CPU with gloo (the lab). Default false."""

    @field_validator("stop_grace_period")
    @classmethod
    def _grace(cls, v: str) -> str:
        duration_seconds(v)
        return v

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str) -> str:
        size_bytes(v)
        return v

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", v):
            raise ValueError("allowed: letters, digits, '_', '.', '-' (used as a directory name)")
        return v

    @property
    def ranks_per_node(self) -> int:
        """Processes the launcher starts on every node."""
        if self.cpu_only:
            return self.procs_per_node or 1
        if self.gpus_per_node:
            return self.gpus_per_node
        return self.procs_per_node or 1


class Jupyter(_Model):
    """JupyterLab on the master host, in the training image, with the shared data dir."""

    enabled: bool = False
    """Run JupyterLab (`ds-jupyter`): its token is generated, held as a Swarm secret and
    a secret stack output (`jupyterToken`). Default false."""
    port: Port = 8888
    """Port published on the master host only (Swarm host mode). Default 8888."""


class Preflight(_Model):
    """What `pulumi up` checks on every host before creating services."""

    min_driver_version: str = "535.0"
    """Oldest NVIDIA driver allowed on GPU hosts. Default 535.0."""
    require_gpu_isolation: bool = True
    """GPU hosts must run the NVIDIA runtime by default with `swarm-resource =
    "DOCKER_RESOURCE_NVIDIA-GPU"`, so each task sees only the GPUs Swarm assigned
    it. Default true (the lab's fake GPUs turn it off)."""
    ssh_private_key_file: str | None = None
    """Private key file the operator uses for host SSH (facts, launch). Default: the
    operator's ssh agent."""
    ssh_known_hosts_file: str | None = None
    """known_hosts to verify host keys against (strict). Default: not verified."""


class Alerts(_Model):
    """Thresholds of the alert rules Prometheus evaluates (README "Monitoring")."""

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
    """Prometheus, node exporters and per-rank metrics (README "Monitoring")."""

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


Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    """A cross-key rule: errors refuse the stack, warnings show in the preview."""

    key: str
    severity: Severity
    summary: str
    check: Callable[[StackConfig], list[str]]


# Every cross-key rule, in the order it runs; README's rule table is generated from it.
RULES: list[Rule] = []


def rule(
    key: str, severity: Severity, summary: str
) -> Callable[[Callable[[StackConfig], list[str]]], Callable[[StackConfig], list[str]]]:
    """Register a StackConfig check (returns one message per problem) as a rule."""

    def register(check: Callable[[StackConfig], list[str]]) -> Callable[[StackConfig], list[str]]:
        RULES.append(Rule(key, severity, summary, check))
        return check

    return register


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _enabled(section: Any) -> bool:
    return isinstance(section, dict) and section.get("enabled") is True


def _overlaps(a: str, b: str) -> bool:
    """Whether one absolute path is the other or lies under it."""
    a, b = posixpath.normpath(a), posixpath.normpath(b)
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _pattern_problems(
    key: str, value: str, pattern: re.Pattern[str], what: str, allowed: str, max_len: int = 255
) -> list[str]:
    """One problem when `value` does not match `pattern` within `max_len` characters."""
    if pattern.match(value) and len(value) <= max_len:
        return []
    return [f"{key}: {value!r} is not {what}; allowed: {allowed}"]


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None


class StackConfig(_Model):
    """The whole validated stack configuration."""

    hosts: list[Host]
    """The servers; the first is the master (rank 0), the first manager the leader."""
    network: Network = Network()
    """The overlay network."""
    image: Image = Image()
    """The training image."""
    training: Training = Training()
    """The training job."""
    secret_names: list[str] = []
    """Names of the values under `secrets` (the values never enter this model)."""
    preflight: Preflight = Preflight()
    """Host checks before services are created."""
    jupyter: Jupyter = Jupyter()
    """JupyterLab on the master (optional, off by default)."""
    monitoring: Monitoring = Monitoring()
    """Prometheus, node exporters and per-rank metrics."""

    @field_validator("hosts")
    @classmethod
    def _at_least_one_host(cls, v: list[Host]) -> list[Host]:
        if not v:
            raise ValueError("no hosts; allowed: one or more hosts")
        return v

    @field_validator("secret_names")
    @classmethod
    def _secret_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _SECRET_NAME.match(name):
                raise ValueError(
                    f"secret name {name!r} is not allowed; allowed: [a-z0-9_], starting "
                    "with a letter or digit (it becomes a file under /run/secrets)"
                )
        return v

    @model_validator(mode="after")
    def _cluster_rules(self) -> StackConfig:
        problems = self._findings("error")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _findings(self, severity: Severity) -> list[str]:
        return [msg for r in RULES if r.severity == severity for msg in r.check(self)]

    def warnings(self) -> list[str]:
        """What is valid but suspicious: `load()` shows these in the preview."""
        return self._findings("warning")

    @rule("hosts", "error", "Each host name and address appears once.")
    def _unique_hosts(self) -> list[str]:
        out = []
        for field in ("name", "address"):
            counts = Counter(getattr(h, field) for h in self.hosts)
            for value, n in counts.items():
                if n > 1:
                    out.append(
                        f"hosts[].{field}: {value!r} appears {n} times; allowed: each host "
                        f"{field} once"
                    )
        return out

    @rule("hosts[].role", "error", "1, 3, 5 or 7 managers (an odd number keeps Raft quorum).")
    def _manager_quorum(self) -> list[str]:
        managers = [h.name for h in self.hosts if h.role == "manager"]
        if not managers:
            return [
                "hosts[].role: no host has role 'manager'; allowed: 1, 3, 5 or 7 managers "
                "(an odd number keeps Raft quorum)"
            ]
        if len(managers) > 1 and len(managers) % 2 == 0:
            return [
                f"hosts[].role: {len(managers)} managers {managers}; allowed: an odd number "
                "(1, 3, 5, 7): an even count adds a failure without adding fault tolerance"
            ]
        return []

    @rule("training.gpus_per_node", "error", "At most the GPUs every host declares.")
    def _gpu_capacity(self) -> list[str]:
        want = self.training.gpus_per_node
        return [
            f"training.gpus_per_node: {want} is more than host {h.name!r} declares "
            f"(hosts[{i}].gpus.count={h.gpus.count}); allowed: 0..{h.gpus.count}"
            for i, h in enumerate(self.hosts)
            if want > h.gpus.count
        ]

    @rule(
        "network.mtu",
        "error",
        "Overlay MTU + VXLAN (+ IPsec when encrypted) fits the underlay MTU.",
    )
    def _mtu_path(self) -> list[str]:
        net = self.network
        if net.mtu + net.overhead <= net.underlay_mtu:
            return []
        extra = " + IPsec" if net.encrypted else ""
        return [
            f"network.mtu: {net.mtu} + {net.overhead} (VXLAN{extra}) = "
            f"{net.mtu + net.overhead} exceeds network.underlay_mtu {net.underlay_mtu}; "
            f"allowed: network.mtu <= {net.underlay_mtu - net.overhead}"
        ]

    @rule("training.master_port", "error", "Not the tasks' sshd port nor a port Swarm holds.")
    def _ports(self) -> list[str]:
        t = self.training
        taken = {**SWARM_PORTS, t.sshd_port: "training.sshd_port"}
        if t.master_port in taken:
            return [
                f"training.master_port: {t.master_port} collides with {taken[t.master_port]}; "
                f"allowed: any port except {sorted(taken)}"
            ]
        return []

    @rule("hosts[].spare", "error", "The master is neither spare nor drained; spares need pdsh.")
    def _spares(self) -> list[str]:
        out = []
        if self.hosts[0].spare:
            out.append(
                f"hosts[0].spare: true on {self.hosts[0].name!r}, the master (rank 0); "
                "allowed: spare on any host but the first"
            )
        if self.hosts[0].availability != "active":
            out.append(
                f"hosts[0].availability: {self.hosts[0].availability!r} on "
                f"{self.hosts[0].name!r}, the master (rank 0); allowed: 'active' (to move "
                "the master, list another host first)"
            )
        t = self.training
        if self.spares and (t.launcher != "deepspeed" or t.launch_mode != "pdsh"):
            names = [h.name for h in self.spares]
            out.append(
                f"hosts[].spare: spare hosts {names} with launcher {t.launcher!r} and "
                f"launch_mode {t.launch_mode!r}; allowed: spares only with launcher "
                "'deepspeed' and launch_mode 'pdsh' (one launcher that follows the real "
                "placement; per-node launches are tied to hosts)"
            )
        return out

    @rule("training.launch_mode", "error", "pdsh needs at least one worker host.")
    def _workers_for_launcher(self) -> list[str]:
        if len(self.training_hosts) > 1 or self.training.launch_mode == "no_ssh":
            return []
        if self.training.launcher == "torchrun":
            return []
        return [
            f"training.launch_mode: {self.training.launch_mode!r} is a multi-node launcher "
            "but the stack has zero workers (one host); allowed: add worker hosts, or "
            "launch_mode 'no_ssh'"
        ]

    # -- hosts ------------------------------------------------------------------
    @rule("hosts[].address", "error", "An IP address or an RFC 1123 DNS host name.")
    def _host_addresses(self) -> list[str]:
        return [
            f"hosts[{i}].address: {h.address!r} is neither an IP address nor a DNS host name; "
            "allowed: an IP address, or dot-separated labels of letters, digits and inner '-'"
            for i, h in enumerate(self.hosts)
            if _ip(h.address) is None and not _DNS_NAME.match(h.address)
        ]

    @rule("hosts[].docker_host", "error", "One Docker engine endpoint per host.")
    def _unique_engines(self) -> list[str]:
        counts = Counter(h.docker_host for h in self.hosts)
        return [
            f"hosts[].docker_host: {value!r} is the endpoint of {n} hosts; allowed: each "
            "host its own Docker engine (one engine is one swarm node)"
            for value, n in counts.items()
            if n > 1
        ]

    @rule("hosts[].gpus.uuids", "error", "A GPU UUID belongs to one host.")
    def _unique_gpus(self) -> list[str]:
        owners: dict[str, list[str]] = {}
        for h in self.hosts:
            for uuid in h.gpus.uuids or []:
                owners.setdefault(uuid, []).append(h.name)
        return [
            f"hosts[].gpus.uuids: {uuid!r} is listed on hosts {names}; allowed: each GPU "
            "UUID on one host"
            for uuid, names in owners.items()
            if len(names) > 1
        ]

    @rule("preflight.min_driver_version", "error", "A dotted numeric version (e.g. 550.54).")
    def _driver_version(self) -> list[str]:
        # HostFacts compares versions part by part as integers.
        return _pattern_problems(
            "preflight.min_driver_version",
            self.preflight.min_driver_version,
            _VERSION,
            "a driver version",
            "dotted numbers, e.g. '535.0' or '550.54.15'",
        )

    # -- Docker and Swarm names -------------------------------------------------
    # 56: infra/network.py appends `-<6 hex>` (the VNI) and Swarm takes 63.
    @rule("network.name", "error", "A name Swarm accepts: letters, digits, inner '-'/'_', 56 max.")
    def _network_name(self) -> list[str]:
        return _pattern_problems(
            "network.name",
            self.network.name,
            _SWARM_NAME,
            "a network name Swarm accepts",
            "up to 56 letters and digits, with '-' or '_' only between them",
            max_len=56,
        )

    @rule("image.repository", "error", "A Docker repository path: lower-case components.")
    def _repository(self) -> list[str]:
        return _pattern_problems(
            "image.repository",
            self.image.repository,
            _REPOSITORY,
            "a Docker repository name",
            "'/'-separated lower-case [a-z0-9] components joined by '.', '_', '__' or '-'",
            max_len=255,
        )

    @rule("image.registry", "error", "host[:port], as in a Docker image reference.")
    def _registry(self) -> list[str]:
        reg = self.image.registry
        if reg is None:
            return []
        m = _REGISTRY.match(reg)
        if m and (m.group(1) is None or 1 <= int(m.group(1)) <= 65535):
            return []
        return [
            f"image.registry: {reg!r} is not a registry host; allowed: host[:port], e.g. "
            "'registry.example.com:5000' (no scheme, no path)"
        ]

    # -- mounts -----------------------------------------------------------------
    def _mounts(self) -> list[tuple[str, str, str]]:
        """(config key, source, target) of every bind the tasks get."""
        t = self.training
        return [
            ("training.data_dir", t.data_dir, DATA_MOUNT),
            *((f"training.datasets[{i}]", m.source, m.target) for i, m in enumerate(t.datasets)),
        ]

    @rule(
        "training.data_dir, training.datasets[]", "error", "Bind sources and targets are absolute."
    )
    def _absolute_paths(self) -> list[str]:
        out = []
        for key, source, target in self._mounts():
            for part, path in (("source", source), ("target", target)):
                if not path.startswith("/"):
                    where = key if key == "training.data_dir" else f"{key}.{part}"
                    out.append(
                        f"{where}: {path!r} is a relative path; allowed: an absolute path "
                        "(Docker bind mounts take no relative paths)"
                    )
        return out

    @rule(
        "training.datasets[].target",
        "error",
        "Clear of /data, /dev/shm, /run/secrets and the image home, and of each other.",
    )
    def _mount_targets(self) -> list[str]:
        out = []
        seen: dict[str, str] = {}
        for key, _, target in self._mounts()[1:]:
            norm = posixpath.normpath(target)
            taken = [p for p in RESERVED_TARGETS if _overlaps(norm, p)]
            if taken:
                out.append(
                    f"{key}.target: {target!r} collides with {taken[0]} "
                    f"({RESERVED_TARGETS[taken[0]]}); allowed: a path outside "
                    f"{', '.join(RESERVED_TARGETS)}"
                )
            elif norm in seen:
                out.append(
                    f"{key}.target: {target!r} is already the target of {seen[norm]}; "
                    "allowed: one mount per target"
                )
            seen.setdefault(norm, key)
        return out

    @rule("training.datasets[].source", "warning", "Not the shared data_dir (or inside it).")
    def _dataset_sources(self) -> list[str]:
        t = self.training
        return [
            f"training.datasets[{i}].source: {m.source!r} overlaps training.data_dir "
            f"{t.data_dir!r}, which the tasks already mount read-write at {DATA_MOUNT}"
            for i, m in enumerate(t.datasets)
            if _overlaps(m.source, t.data_dir)
        ]

    # -- network ----------------------------------------------------------------
    def _subnet(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        return ipaddress.ip_network(self.network.subnet) if self.network.subnet else None

    @rule("network.subnet", "error", "Clear of the hosts' own addresses.")
    def _subnet_hosts(self) -> list[str]:
        net = self._subnet()
        if net is None:
            return []
        return [
            f"network.subnet: {net} contains hosts[{i}].address {h.address}; allowed: a "
            "subnet clear of the hosts' addresses (tasks would shadow the host)"
            for i, h in enumerate(self.hosts)
            if (ip := _ip(h.address)) is not None and ip in net
        ]

    @rule(
        "network.subnet",
        "error",
        f"Room for {OVERLAY_ADDRS_PER_NODE} overlay addresses per host (task, warm-up, LB); "
        "with monitoring one more per host (node exporter) and one for Prometheus.",
    )
    def _subnet_size(self) -> list[str]:
        net = self._subnet()
        need = OVERLAY_ADDRS_PER_NODE * len(self.hosts)
        if self.monitoring.enabled:
            need += MONITORING_ADDRS_PER_NODE * len(self.hosts) + MONITORING_ADDRS
        if net is None or net.num_addresses - SUBNET_OVERHEAD >= need:
            return []
        return [
            f"network.subnet: {net} has {max(net.num_addresses - SUBNET_OVERHEAD, 0)} usable "
            f"addresses but {len(self.hosts)} hosts need {need}; allowed: a prefix with at "
            f"least {need + SUBNET_OVERHEAD} addresses"
        ]

    @rule("network.subnet", "warning", "Clear of Docker's ingress and local address pools.")
    def _subnet_pools(self) -> list[str]:
        net = self._subnet()
        if net is None:
            return []
        return [
            f"network.subnet: {net} overlaps {pool} ({what}); tasks may route that range "
            "the wrong way, or the network create may be refused"
            for pool, what in DOCKER_POOLS.items()
            if net.version == 4 and net.overlaps(ipaddress.IPv4Network(pool))
        ]

    # -- training ---------------------------------------------------------------
    @rule("training.env", "error", "No variable the launcher sets per rank or the stack derives.")
    def _env_owned(self) -> list[str]:
        out = []
        for name in self.training.env:
            if name in LAUNCHER_ENV:
                out.append(
                    f"training.env: {name} is set per rank by the launcher; allowed: any "
                    f"variable except {', '.join(LAUNCHER_ENV)}"
                )
            elif name in STACK_ENV:
                out.append(
                    f"training.env: {name} is derived from {STACK_ENV[name]}; allowed: set "
                    "that key instead"
                )
        return out

    @rule("training.checkpoint_every", "warning", "At most training.steps.")
    def _checkpoint_cadence(self) -> list[str]:
        t = self.training
        if t.checkpoint_every <= t.steps:
            return []
        return [
            f"training.checkpoint_every: {t.checkpoint_every} > training.steps {t.steps}: "
            "the only checkpoint is the final one; a failure restarts from step 0"
        ]

    @rule("training.stop_grace_period", "warning", f"At least {MIN_CHECKPOINT_GRACE_S}s.")
    def _grace_fits_checkpoint(self) -> list[str]:
        grace = duration_seconds(self.training.stop_grace_period)
        if grace >= MIN_CHECKPOINT_GRACE_S:
            return []
        return [
            f"training.stop_grace_period: {self.training.stop_grace_period} leaves little time "
            "for the final checkpoint before SIGKILL; suggested: at least "
            f"{MIN_CHECKPOINT_GRACE_S}s"
        ]

    # -- monitoring ---------------------------------------------------------------
    @rule(
        "monitoring.rank_metrics_port",
        "error",
        "With monitoring: the ranks' ports (one per local rank) clear of the master and "
        "sshd ports and of Swarm's.",
    )
    def _rank_metrics_ports(self) -> list[str]:
        mon, t = self.monitoring, self.training
        if not mon.enabled:
            return []
        ports = range(mon.rank_metrics_port, mon.rank_metrics_port + t.ranks_per_node)
        taken = {
            **SWARM_PORTS,
            t.master_port: "training.master_port",
            t.sshd_port: "training.sshd_port",
        }
        if ports.stop - 1 > 65535:
            return [
                f"monitoring.rank_metrics_port: {mon.rank_metrics_port} + {t.ranks_per_node} "
                f"ranks per node runs past 65535; allowed: at most {65536 - t.ranks_per_node}"
            ]
        return [
            f"monitoring.rank_metrics_port: local rank {p - ports.start} would serve on {p}, "
            f"which is {taken[p]}; allowed: a base port whose {t.ranks_per_node} ports "
            f"({ports.start}-{ports.stop - 1}) avoid {sorted(taken)}"
            for p in ports
            if p in taken
        ]

    @rule(
        "monitoring.prometheus_port",
        "error",
        "With monitoring: not a port Swarm holds nor the master host's SSH port.",
    )
    def _prometheus_port(self) -> list[str]:
        mon = self.monitoring
        if not mon.enabled:
            return []
        taken = {**SWARM_PORTS, self.master.ssh_port: f"hosts[0].ssh_port ({self.master.name})"}
        if mon.prometheus_port not in taken:
            return []
        return [
            f"monitoring.prometheus_port: {mon.prometheus_port} is published on the master "
            f"host, where it is {taken[mon.prometheus_port]}; allowed: any port except "
            f"{sorted(taken)}"
        ]

    @rule(
        "monitoring.enabled",
        "error",
        "The master host (hosts[0]), where Prometheus runs, is a manager.",
    )
    def _prometheus_on_a_manager(self) -> list[str]:
        if not self.monitoring.enabled or self.master.role == "manager":
            return []
        return [
            f"monitoring.enabled: Prometheus runs on the master host {self.master.name!r}, "
            "which has role 'worker'; allowed: a manager as hosts[0] (the master)"
        ]

    @rule(
        "monitoring.evaluation_interval",
        "warning",
        "At most the scrape interval (alerts would lag the data).",
    )
    def _evaluation_interval(self) -> list[str]:
        mon = self.monitoring
        if not mon.enabled or duration_seconds(mon.evaluation_interval) <= mon.scrape_seconds:
            return []
        return [
            f"monitoring.evaluation_interval: {mon.evaluation_interval} is longer than "
            f"monitoring.scrape_interval {mon.scrape_interval}: alerts see new samples late"
        ]

    # -- DeepSpeed (an inline ds_config; a path is read only inside the image) --
    def _ds(self) -> dict[str, Any]:
        ds = self.training.ds_config
        return ds if isinstance(ds, dict) else {}

    @property
    def world_size(self) -> int:
        """Ranks of the whole job: training hosts (spares excluded) x ranks per node."""
        return len(self.training_hosts) * self.training.ranks_per_node

    @rule(
        "training.ds_config",
        "error",
        "train_batch_size = micro batch x gradient accumulation x world size (hosts x ranks "
        "per node); a missing one of the three must divide out evenly.",
    )
    def _ds_batch(self) -> list[str]:
        ds, world = self._ds(), self.world_size
        names = (
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
        )
        bad = [n for n in names if n in ds and not _positive_int(ds[n])]
        if bad:
            return [
                f"training.ds_config.{n}: {ds[n]!r} is not a positive integer; allowed: an "
                "integer >= 1"
                for n in bad
            ]
        tbs, micro, ga = (ds.get(n) for n in names)
        if tbs is None:
            if micro is None and ds:
                return [
                    "training.ds_config: neither train_batch_size nor "
                    "train_micro_batch_size_per_gpu is set; allowed: either (DeepSpeed "
                    "derives the rest)"
                ]
            return []
        world_desc = (
            f"world size {world} ({len(self.training_hosts)} training hosts x "
            f"{self.training.ranks_per_node} ranks per node)"
        )
        if micro is not None and ga is not None:
            if tbs == micro * ga * world:
                return []
            return [
                f"training.ds_config.train_batch_size: {tbs} != train_micro_batch_size_per_gpu "
                f"{micro} x gradient_accumulation_steps {ga} x {world_desc} = "
                f"{micro * ga * world}; allowed: {micro * ga * world}, or leave one unset"
            ]
        # DeepSpeed derives the missing factor(s) by integer division, then asserts.
        given = [f"{n} {ds[n]}" for n in names[1:] if n in ds]
        divisor = (micro or 1) * (ga or 1) * world
        if tbs % divisor == 0:
            return []
        return [
            f"training.ds_config.train_batch_size: {tbs} is not a multiple of "
            f"{' x '.join([*given, world_desc])} = {divisor}; allowed: a multiple of {divisor}"
        ]

    @rule(
        "training.ds_config",
        "error",
        f"With the image's {DEFAULT_SCRIPT}: train_micro_batch_size_per_gpu, "
        "gradient_accumulation_steps and optimizer.type are set.",
    )
    def _ds_image_trainer(self) -> list[str]:
        ds = self._ds()
        if not ds or self.training.script != DEFAULT_SCRIPT:
            return []
        opt = ds.get("optimizer")
        missing = [
            n
            for n in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
            if n not in ds
        ]
        if not (isinstance(opt, dict) and isinstance(opt.get("type"), str)):
            missing.append("optimizer.type")
        if not missing:
            return []
        return [
            f"training.ds_config: {', '.join(missing)} not set; allowed: set them "
            f"({DEFAULT_SCRIPT} in the image requires them)"
        ]

    @rule("training.ds_config", "error", "zero_optimization.stage is 0, 1, 2 or 3.")
    def _ds_zero_stage(self) -> list[str]:
        zero = self._ds().get("zero_optimization", {})
        if isinstance(zero, bool):  # DeepSpeed's legacy spelling: true is stage 1
            return []
        stage = zero.get("stage", 0) if isinstance(zero, dict) else None
        if isinstance(stage, int) and not isinstance(stage, bool) and stage in ZERO_STAGES:
            return []
        return [
            f"training.ds_config.zero_optimization.stage: {stage!r} is not a ZeRO stage; "
            f"allowed: {', '.join(map(str, ZERO_STAGES))}"
        ]

    @rule("training.ds_config", "error", "fp16 and bf16 are not both enabled.")
    def _ds_precision(self) -> list[str]:
        ds = self._ds()
        # DeepSpeed reads `bf16`, falling back to the older `bfloat16` spelling.
        bf16 = ds.get("bf16", ds.get("bfloat16"))
        if _enabled(ds.get("fp16")) and _enabled(bf16):
            return [
                "training.ds_config: fp16.enabled and bf16.enabled are both true; allowed: "
                "at most one of them"
            ]
        return []

    @rule(
        "training.ds_config",
        "error",
        "optimizer.type is a DeepSpeed optimizer or a torch.optim class; no max_grad_norm param.",
    )
    def _ds_optimizer(self) -> list[str]:
        opt = self._ds().get("optimizer")
        if not isinstance(opt, dict):
            return []
        out = []
        name = opt.get("type")
        if name is not None and not (
            isinstance(name, str) and (name.lower() in DS_OPTIMIZERS or name in TORCH_OPTIMIZERS)
        ):
            out.append(
                f"training.ds_config.optimizer.type: {name!r} is not an optimizer DeepSpeed "
                f"knows; allowed: {', '.join(DS_OPTIMIZERS)} (any case), or torch.optim's "
                f"{', '.join(TORCH_OPTIMIZERS)}"
            )
        params = opt.get("params")
        if isinstance(params, dict) and "max_grad_norm" in params:
            out.append(
                "training.ds_config.optimizer.params.max_grad_norm: DeepSpeed refuses it; "
                "allowed: the top-level gradient_clipping key"
            )
        return out

    @rule(
        "training.ds_config",
        "error",
        "scheduler.type is a DeepSpeed schedule or a torch.optim.lr_scheduler class.",
    )
    def _ds_scheduler(self) -> list[str]:
        sched = self._ds().get("scheduler")
        name = sched.get("type") if isinstance(sched, dict) else None
        if name is None or name in DS_SCHEDULERS or name in TORCH_SCHEDULERS:
            return []
        return [
            f"training.ds_config.scheduler.type: {name!r} is not a scheduler DeepSpeed knows; "
            f"allowed: {', '.join(DS_SCHEDULERS)}, or torch.optim.lr_scheduler's "
            f"{', '.join(TORCH_SCHEDULERS)}"
        ]

    @rule("training.ds_config", "warning", "On a CPU-only run: no ZeRO offload, no fp16.")
    def _ds_cpu_only(self) -> list[str]:
        if not self.training.cpu_only:
            return []
        ds = self._ds()
        zero = ds.get("zero_optimization")
        out = [
            f"training.ds_config.zero_optimization.{part}: offloads to "
            f"{section.get('device')!r} on a CPU-only run, where the model already lives in "
            "host memory"
            for part in ("offload_optimizer", "offload_param")
            if isinstance(zero, dict)
            and isinstance(section := zero.get(part), dict)
            and section.get("device") not in (None, "none")
        ]
        if _enabled(ds.get("fp16")):
            out.append(
                "training.ds_config.fp16: enabled on a CPU-only run; DeepSpeed's CPU "
                "accelerator refuses fp16 unless the CPU has native fp16 (use bf16)"
            )
        return out

    # -- derived views the components use -------------------------------------------
    @property
    def managers(self) -> list[Host]:
        return [h for h in self.hosts if h.role == "manager"]

    @property
    def leader(self) -> Host:
        """The manager that initialises the swarm and owns swarm-scoped objects."""
        return self.managers[0]

    @property
    def master(self) -> Host:
        """The host that runs `ds-master` (rank 0): the first host in the list."""
        return self.hosts[0]

    @property
    def active_hosts(self) -> list[Host]:
        """The hosts Swarm may place tasks on (every host but drained ones)."""
        return [h for h in self.hosts if h.availability == "active"]

    @property
    def training_hosts(self) -> list[Host]:
        """The hosts that carry a training task when all are up (active, not spares)."""
        return [h for h in self.active_hosts if not h.spare]

    @property
    def spares(self) -> list[Host]:
        return [h for h in self.hosts if h.spare]

    @property
    def workers(self) -> list[Host]:
        """The training hosts besides the master: one `ds-worker` task each."""
        return self.training_hosts[1:]


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _format_errors(err: ValidationError) -> list[str]:
    problems: list[str] = []
    for e in err.errors(include_url=False):
        loc = _format_loc(tuple(e["loc"]))
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "value_error" and not loc:
            # Cluster-wide rules already name their keys, one per line.
            problems.extend(msg.splitlines())
            continue
        got = e.get("input")
        shown = "" if isinstance(got, dict | list) or e["type"] == "missing" else f" (got {got!r})"
        problems.append(f"{loc}: {msg}{shown}")
    return problems


def parse_stack_config(raw: dict[str, Any], secret_keys: set[str] | None = None) -> StackConfig:
    """Validate raw stack config values (keys without the project prefix).

    `secret_keys` are the top-level keys the engine says are secret; the values
    under `secrets` must be among them, or the stack file holds them in plaintext.
    Raises `ConfigError` listing every problem.
    """
    problems: list[str] = []
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        problems.append(
            f"{unknown[0]}: unknown config key {PROJECT}:{unknown[0]}; allowed: "
            + ", ".join(f"{PROJECT}:{k}" for k in CONFIG_KEYS)
        )
    secrets = raw.get("secrets") or {}
    if not isinstance(secrets, dict):
        problems.append("secrets: must be an object of name -> value")
        secrets = {}
    if secrets and "secrets" not in (secret_keys or set()):
        problems.append(
            f"secrets: {sorted(secrets)} are stored in plaintext in the stack file; allowed: "
            f"only encrypted values, set with `pulumi config set --secret --path "
            f"'secrets.<name>' <value>`"
        )
    data = {k: v for k, v in raw.items() if k in CONFIG_KEYS and k != "secrets"}
    data["secret_names"] = sorted(secrets)
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as e:
        problems.extend(_format_errors(e))
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return cfg


def load() -> tuple[StackConfig, dict[str, Any]]:
    """Read the current stack's config from the engine.

    Returns the validated config and the secret values (still plain Python
    values: the caller wraps each in `pulumi.Output.secret` at once).
    """
    import pulumi
    from pulumi.runtime import config as runtime_config

    # Every key the engine passed in our namespace, so a typo is reported, not ignored.
    present = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    names = {k.split(":", 1)[1] for k in present if k.startswith(f"{PROJECT}:")}
    cfg = pulumi.Config(PROJECT)
    raw: dict[str, Any] = {name: cfg.get_object(name) for name in names}
    secret_keys = {n for n in names if runtime_config.is_config_secret(f"{PROJECT}:{n}")}
    try:
        parsed = parse_stack_config(raw, secret_keys)
    except ConfigError as e:
        # A RunError is reported by the engine as its message alone, without a
        # traceback: the key, the value and what is allowed is all a user needs.
        raise pulumi.RunError(str(e)) from None
    # Suspicious but valid: shown in the preview, the update goes on.
    for warning in parsed.warnings():
        pulumi.log.warn(warning)
    return parsed, dict(raw.get("secrets") or {})


# -- reference documentation -------------------------------------------------------
def _type_name(annotation: Any) -> str:
    """`list[infra.config.Host] | None` -> `list[Host] or None` (table-safe)."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"(?:[A-Za-z_]\w*\.)+(\w+)", r"\1", text)
    return text.replace("NoneType", "None").replace(" | ", " or ")


def config_reference() -> str:
    """Markdown table of every config key: key, type, default, description.

    Generated from the models, so README's table cannot drift from the code.
    """
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]

    def walk(prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            if name == "secret_names":
                continue
            key = f"{prefix}{name}"
            ann = field.annotation
            nested = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
            item = getattr(ann, "__args__", (None,))[0] if str(ann).startswith("list[") else None
            default = "required" if field.is_required() else f"`{field.default!r}`"
            if nested is not None:
                default = "see below"
            doc = (field.description or "").replace("\n", " ").replace("|", "\\|")
            doc = " ".join(doc.split())
            rows.append(f"| `{key}` | {_type_name(ann)} | {default} | {doc} |")
            if nested is not None:
                walk(f"{key}.", nested)
            elif isinstance(item, type) and issubclass(item, BaseModel):
                walk(f"{key}[].", item)

    walk("", StackConfig)
    rows.append(
        "| `secrets.<name>` | str (secret) | none | A value mounted at /run/secrets/<name>; "
        "must be set with `pulumi config set --secret --path 'secrets.<name>'`. |"
    )
    return "\n".join(rows) + "\n"


def rules_reference() -> str:
    """Markdown table of every cross-key rule: key, error or warning, what is allowed.

    Generated from `RULES`, so README's list of rules cannot drift from the checks.
    """
    rows = ["| key | refused or warned | rule |", "| --- | --- | --- |"]
    kinds = {"error": "error", "warning": "warning (preview)"}
    rows += [f"| `{r.key}` | {kinds[r.severity]} | {r.summary} |" for r in RULES]
    return "\n".join(rows) + "\n"


class _StackFileDumper(yaml.SafeDumper):
    """Quotes every string a YAML 1.2 reader (Pulumi's) would take for a number:
    PyYAML (YAML 1.1) writes `1e-3` bare, and Pulumi then hands the program 0.001."""


def _quoted_if_numeric(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    try:
        float(value)
    except ValueError:
        return dumper.represent_str(value)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


_StackFileDumper.add_representer(str, _quoted_if_numeric)


def stack_file_yaml(config: dict[str, Any]) -> str:
    """A `Pulumi.<stack>.yaml` holding `config` (namespaced keys), every value read
    back by Pulumi with the type it has here (tests and benches write stack files)."""
    return yaml.dump({"config": config}, Dumper=_StackFileDumper, sort_keys=False)


def stack_file_values(text: str) -> dict[str, Any]:
    """The raw `deepspeed-swarm:*` values of a stack file's text, prefix stripped (the
    inverse of `stack_file_yaml`; secrets stay as the file holds them)."""
    prefix = f"{PROJECT}:"
    config = yaml.safe_load(text)["config"]
    return {k.removeprefix(prefix): v for k, v in config.items() if k.startswith(prefix)}


README_START, README_END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def readme_with_reference(readme: str) -> str:
    """README text with the generated key and rule tables between its markers."""
    head, _, rest = readme.partition(README_START)
    _, _, tail = rest.partition(README_END)
    body = f"{config_reference()}\nCross-key rules, in the order they run:\n\n{rules_reference()}"
    return f"{head}{README_START}\n{body}{README_END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:] == ["--update-readme"]:
        path = Path(__file__).resolve().parent.parent / "README.md"
        path.write_text(readme_with_reference(path.read_text()))
    else:
        print(config_reference(), rules_reference(), sep="\n", end="")
