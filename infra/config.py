"""The one place stack configuration is read and validated.

Everything under `infra/` receives a validated `StackConfig`; nothing else calls
`pulumi.Config`. Validation runs before any resource is registered, so a bad
stack file fails `pulumi preview` without touching a host. Every error names the
config key, the bad value and what is allowed.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

PROJECT = "deepspeed-swarm"

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
CONFIG_KEYS = ("hosts", "network", "image", "training", "secrets", "preflight")

Port = Annotated[int, Field(ge=1, le=65535)]
Mtu = Annotated[int, Field(ge=MTU_MIN, le=MTU_MAX)]
_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_SECRET_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")


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
    """Network name. Default `ds-net`."""
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
        problems = [
            *self._unique_hosts(),
            *self._manager_quorum(),
            *self._gpu_capacity(),
            *self._mtu_path(),
            *self._ports(),
            *self._workers_for_launcher(),
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return self

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

    def _gpu_capacity(self) -> list[str]:
        want = self.training.gpus_per_node
        return [
            f"training.gpus_per_node: {want} is more than host {h.name!r} declares "
            f"(hosts[{i}].gpus.count={h.gpus.count}); allowed: 0..{h.gpus.count}"
            for i, h in enumerate(self.hosts)
            if want > h.gpus.count
        ]

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

    def _ports(self) -> list[str]:
        t = self.training
        taken = {**SWARM_PORTS, t.sshd_port: "training.sshd_port"}
        if t.master_port in taken:
            return [
                f"training.master_port: {t.master_port} collides with {taken[t.master_port]}; "
                f"allowed: any port except {sorted(taken)}"
            ]
        return []

    def _workers_for_launcher(self) -> list[str]:
        if len(self.hosts) > 1 or self.training.launch_mode == "no_ssh":
            return []
        if self.training.launcher == "torchrun":
            return []
        return [
            f"training.launch_mode: {self.training.launch_mode!r} is a multi-node launcher "
            "but the stack has zero workers (one host); allowed: add worker hosts, or "
            "launch_mode 'no_ssh'"
        ]

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
    def workers(self) -> list[Host]:
        return self.hosts[1:]


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
    parsed = parse_stack_config(raw, secret_keys)
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


README_START, README_END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def readme_with_reference(readme: str) -> str:
    """README text with the generated table between its markers."""
    head, _, rest = readme.partition(README_START)
    _, _, tail = rest.partition(README_END)
    return f"{head}{README_START}\n{config_reference()}{README_END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:] == ["--update-readme"]:
        path = Path(__file__).resolve().parent.parent / "README.md"
        path.write_text(readme_with_reference(path.read_text()))
    else:
        print(config_reference(), end="")
