"""The machines: hosts with their GPUs and Docker endpoints, and the overlay between them."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from infra.config.models.base import MODEL_CONFIG, Mtu, Port
from infra.config.models.ssh import HostSsh


class _Model(BaseModel):
    model_config = MODEL_CONFIG


# VXLAN (outer Ethernet + IP + UDP + VXLAN headers) takes 50 bytes of the underlay MTU.
VXLAN_OVERHEAD = 50
# IPsec ESP in transport mode adds up to this much on top when the overlay is encrypted.
IPSEC_OVERHEAD = 58

_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def user_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels a user adds (to nodes, to services): lower-case keys, none in `dss.`."""
    for key in labels:
        if not _LABEL_KEY.match(key) or key.startswith("dss."):
            raise ValueError(
                f"label key {key!r} is not allowed; allowed: lower-case "
                "[a-z0-9._-] keys, not starting with the reserved prefix 'dss.'"
            )
    return labels


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
    """SSH user for host commands (facts, launch): the older name of `hosts[].ssh.user`,
    which wins over it (both set and different is refused). Default `root`."""
    ssh_port: Port = 22
    """SSH port: the older name of `hosts[].ssh.port`, which wins over it (both set and
    different is refused). Default 22."""
    ssh: HostSsh = HostSsh()
    """This host's SSH settings where they differ from the stack's `ssh` block. Default
    none: the stack's."""
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
        return user_labels(v)

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
    data_plane: Literal["overlay", "host"] = "overlay"
    """Where the training tasks talk (NCCL, gloo, the launcher's SSH, the rendezvous).
    `overlay`: on this overlay (VXLAN over `hosts[].nic`). `host`: on the hosts' own
    network, the training tasks on Swarm's `host` network (sshd on
    `training.sshd_port` of each host, the hostfile and rendezvous on
    `hosts[].address`, NCCL and gloo on `hosts[].nic`, RDMA devices through the
    NVIDIA runtime); everything else (monitoring, JupyterLab) stays on the overlay.
    RDMA (`hosts[].rdma_interface`) needs `host`. Default `overlay`."""
    rdma_gid_index: int | None = Field(default=None, ge=0, le=255)
    """RoCE GID index NCCL uses (`NCCL_IB_GID_INDEX`), the same on every RDMA host; the
    preflight checks it is a RoCE v2 GID on each. Default: unset (NCCL picks one)."""

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
