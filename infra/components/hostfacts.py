"""HostFacts: preflight and drift detection for every host of the stack.

One `HostFactsResource` per host (infra/providers/hostfacts.py says how it reads
and compares): its `expected` input is what the config promises for the host, so
a refresh names each fact that drifted, and create refuses a host that lacks what
the config promises before any service is placed on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import pulumi

from infra.config import Host, Network, Preflight, Ssh, host_ssh
from infra.providers.fabric import RDMA_MTU
from infra.providers.health import HEALTH_KEYS
from infra.providers.hostfacts import HostFactsResource
from infra.providers.nic import nic_expected
from infra.render.remedy import drain_remedies


class FactsSource(Protocol):
    """The config sections a host's expected facts and SSH target come from."""

    @property
    def hosts(self) -> Sequence[Host]: ...

    @property
    def network(self) -> Network: ...

    @property
    def preflight(self) -> Preflight: ...

    @property
    def ssh(self) -> Ssh: ...


@dataclass(frozen=True)
class HostFactsArgs:
    """What HostFacts reads: the hosts, the overlay's MTUs, the preflight settings, how
    the hosts are reached over SSH."""

    hosts: Sequence[Host]
    network: Network
    preflight: Preflight
    ssh: Ssh


def expected_facts(cfg: FactsSource, host: Host) -> dict[str, Any]:
    """The facts the config promises for a host (the resource's `expected` input)."""
    exp: dict[str, Any] = {
        "hostname": host.name,
        "gpu_count": host.gpus.count,
        "nic_mtu": cfg.network.underlay_mtu,
    }
    if host.gpus.uuids is not None:
        exp["gpu_uuids"] = sorted(host.gpus.uuids)
    if host.gpus.count:
        exp["driver_meets_minimum"] = True
        if cfg.preflight.require_gpu_isolation:
            exp["gpu_isolation"] = True
            # The toolkit must also honour the assignment (infra/providers/gpuruntime.py).
            # Only under require_gpu_isolation: stacks that opt out (the lab's fake
            # GPUs) keep the inputs they were deployed with.
            exp["gpu_runtime_isolates"] = True
    if checks_health(cfg, host) and host.availability == "active":
        # GPU health (infra/providers/health.py): healthy is no fault of any kind. A
        # drained host carries no training: read, not judged.
        exp |= {k: [] for k in HEALTH_KEYS}
        if cfg.preflight.dcgm_diag_level is not None:
            exp["dcgm_diag_failures"] = []  # infra/providers/dcgm.py
    if host.availability == "active":
        # The NIC's health (infra/providers/nic.py), only the limits the stack sets: a
        # stack without them keeps the inputs it was deployed with.
        exp |= nic_expected(nic_limits(cfg))
    if host.rdma_interface:
        # The fabric (infra/providers/fabric.py): only on hosts that declare a device,
        # so every other host keeps the inputs it was deployed with.
        exp |= {
            "rdma_port_active": True,
            "rdma_gid_ok": True,
            "rdma_active_mtu": RDMA_MTU,
            "memlock_unlimited": True,
        }
        if host.gpus.count and cfg.preflight.require_gpu_isolation:
            exp["rdma_devices_injected"] = True
    if peer_names(cfg, host):
        # Peer lookups (infra/providers/peers.py): only on the host data plane, so an
        # overlay stack keeps the inputs it was deployed with.
        exp["slow_peer_lookups"] = []
    return exp


def peer_names(cfg: FactsSource, host: Host) -> dict[str, str]:
    """The addresses (and names) of the stack's other hosts, which an active host on the
    host data plane must look up quickly (its tasks use its resolver; rank 0's rendezvous
    looks up every peer). Every other host, drained ones too: a drain then changes only
    the drained host's facts. None on the overlay (Docker's DNS answers there)."""
    if cfg.network.data_plane != "host" or host.availability != "active":
        return {}
    return {h.address: h.name for h in cfg.hosts if h.name != host.name}


def checks_health(cfg: FactsSource, host: Host) -> bool:
    """Whether a host's GPU health is read: a GPU host, with preflight.gpu_health."""
    return bool(host.gpus.count) and cfg.preflight.gpu_health


def nic_limits(cfg: FactsSource) -> dict[str, Any]:
    """preflight.nic's limits that are set (none: the NIC is not checked)."""
    return cfg.preflight.nic.model_dump(exclude_none=True)


def health_props(cfg: FactsSource, host: Host, remedy: str) -> dict[str, Any]:
    """The health checks' inputs (none where neither is on): GPU health (and DCGM's
    level) on a GPU host, the NIC's limits where the stack sets any, and the remedy
    their refusals name."""
    props: dict[str, Any] = {}
    if checks_health(cfg, host):
        props["gpu_health"] = True
        if cfg.preflight.dcgm_diag_level is not None:
            props["dcgm_level"] = cfg.preflight.dcgm_diag_level
    if limits := nic_limits(cfg):
        props["nic_health"] = limits
    return {**props, "remedy": remedy} if props else {}


def fabric_props(cfg: FactsSource, host: Host) -> dict[str, Any]:
    """The RDMA device (and the GID index NCCL is told) a host's facts check; none
    without an rdma_interface."""
    if not host.rdma_interface:
        return {}
    props: dict[str, Any] = {"rdma": host.rdma_interface}
    if cfg.network.rdma_gid_index is not None:
        props["rdma_gid_index"] = cfg.network.rdma_gid_index
    return props


def peermem_warning(host: Host, observed: dict[str, Any] | None) -> str:
    """A host with an RDMA device and GPUs but no nvidia_peermem: NCCL still uses RDMA,
    through host memory instead of GPUDirect (slower); "" otherwise or unread."""
    if not observed or not host.rdma_interface or not host.gpus.count:
        return ""
    if observed.get("nvidia_peermem", True):
        return ""
    return (
        f"host {host.name}: nvidia_peermem is not loaded; NCCL over {host.rdma_interface} "
        "goes through host memory instead of GPUDirect RDMA (`modprobe nvidia_peermem`)"
    )


def ssh_target(cfg: FactsSource, host: Host) -> dict[str, Any]:
    """How the operator's machine reaches a host over SSH (no secrets: agent or key
    file), as resource inputs: a stack that sets no newer SSH key gets the inputs it
    always had (infra/sshspec.py `props`)."""
    i = next(i for i, h in enumerate(cfg.hosts) if h is host or h.name == host.name)
    return host_ssh(cfg.ssh, cfg.preflight, host, i).props()


def facts_props(cfg: FactsSource, host: Host, remedy: str) -> dict[str, Any]:
    """A host's facts resource inputs: where to reach it, what to expect, the fabric
    and GPU health checks it gets (`remedy`: what a health refusal tells to do)."""
    return {
        "host": host.name,
        "ssh": ssh_target(cfg, host),
        "nic": host.nic,
        "min_driver": cfg.preflight.min_driver_version,
        "needed_mtu": cfg.network.mtu + cfg.network.overhead,
        "expected": expected_facts(cfg, host),
        **fabric_props(cfg, host),
        **health_props(cfg, host, remedy),
        **({"peers": peers} if (peers := peer_names(cfg, host)) else {}),
    }


class HostFacts(pulumi.ComponentResource):
    """Preflight and drift detection for every host of the stack."""

    facts: dict[str, HostFactsResource]
    """Per host name, its facts resource (services depend on all of them)."""

    def __init__(
        self, name: str, args: HostFactsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:hostfacts:HostFacts", name, None, opts)
        remedies = drain_remedies(args.hosts)
        self.facts = {
            h.name: HostFactsResource(
                f"{name}-{h.name}",
                facts_props(args, h, remedies[h.name]),
                pulumi.ResourceOptions(parent=self),
            )
            for h in args.hosts
        }
        for h in args.hosts:
            if h.rdma_interface:
                # Logged, not a resource: a warning in `up` and in a deployed stack's preview.
                resource = self.facts[h.name]
                resource.observed.apply(partial(_warn_peermem, h, resource))
        self.register_outputs({h: f.observed for h, f in self.facts.items()})


def _warn_peermem(host: Host, resource: pulumi.Resource, observed: dict[str, Any] | None) -> None:
    message = peermem_warning(host, observed)
    if message:
        pulumi.log.warn(message, resource=resource)
