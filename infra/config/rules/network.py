"""Rules about the overlay network: MTU path, name, subnet room and clashes."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from infra.config.rules.common import ip, pattern_problems

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

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
# Swarm's name rule for networks (swarmkit controlapi isValidDNSName), max 63.
_SWARM_NAME = re.compile(r"^[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*$")


def mtu_path(cfg: StackConfig) -> list[str]:
    net = cfg.network
    if net.mtu + net.overhead <= net.underlay_mtu:
        return []
    extra = " + IPsec" if net.encrypted else ""
    return [
        f"network.mtu: {net.mtu} + {net.overhead} (VXLAN{extra}) = "
        f"{net.mtu + net.overhead} exceeds network.underlay_mtu {net.underlay_mtu}; "
        f"allowed: network.mtu <= {net.underlay_mtu - net.overhead}"
    ]


# 56: infra/components/network.py appends `-<6 hex>` (the VNI) and Swarm takes 63.
def network_name(cfg: StackConfig) -> list[str]:
    return pattern_problems(
        "network.name",
        cfg.network.name,
        _SWARM_NAME,
        "a network name Swarm accepts",
        "up to 56 letters and digits, with '-' or '_' only between them",
        max_len=56,
    )


def _subnet(cfg: StackConfig) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    return ipaddress.ip_network(cfg.network.subnet) if cfg.network.subnet else None


def subnet_hosts(cfg: StackConfig) -> list[str]:
    net = _subnet(cfg)
    if net is None:
        return []
    return [
        f"network.subnet: {net} contains hosts[{i}].address {h.address}; allowed: a "
        "subnet clear of the hosts' addresses (tasks would shadow the host)"
        for i, h in enumerate(cfg.hosts)
        if (addr := ip(h.address)) is not None and addr in net
    ]


def subnet_size(cfg: StackConfig) -> list[str]:
    net = _subnet(cfg)
    need = OVERLAY_ADDRS_PER_NODE * len(cfg.hosts)
    if cfg.monitoring.enabled:
        need += MONITORING_ADDRS_PER_NODE * len(cfg.hosts) + MONITORING_ADDRS
    if net is None or net.num_addresses - SUBNET_OVERHEAD >= need:
        return []
    return [
        f"network.subnet: {net} has {max(net.num_addresses - SUBNET_OVERHEAD, 0)} usable "
        f"addresses but {len(cfg.hosts)} hosts need {need}; allowed: a prefix with at "
        f"least {need + SUBNET_OVERHEAD} addresses"
    ]


def subnet_pools(cfg: StackConfig) -> list[str]:
    net = _subnet(cfg)
    if net is None:
        return []
    return [
        f"network.subnet: {net} overlaps {pool} ({what}); tasks may route that range "
        "the wrong way, or the network create may be refused"
        for pool, what in DOCKER_POOLS.items()
        if net.version == 4 and net.overlaps(ipaddress.IPv4Network(pool))
    ]


def data_plane_nic(cfg: StackConfig) -> list[str]:
    # NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are one value for every task (a
    # service's environment is the same on every node): one interface name it is.
    if cfg.network.data_plane != "host":
        return []
    by_nic: dict[str, list[str]] = {}
    for h in cfg.active_hosts:
        by_nic.setdefault(h.nic, []).append(h.name)
    if len(by_nic) < 2:
        return []
    seen = "; ".join(f"{nic!r} on {', '.join(names)}" for nic, names in sorted(by_nic.items()))
    return [
        f"hosts[].nic: the active hosts name {len(by_nic)} interfaces ({seen}), and with "
        "network.data_plane 'host' NCCL and gloo bind to one name on every host; allowed: "
        "one nic for every active host (rename the interfaces, e.g. with a udev rule)"
    ]


def rdma_needs_host(cfg: StackConfig) -> list[str]:
    # Inside a task on the overlay, RoCE cannot work: the RDMA device's GIDs belong to
    # the host's interface, in another network namespace (NVIDIA's OFED refuses such
    # addresses), and NCCL would fall back to sockets over VXLAN without a word.
    rdma = [f"{h.name} ({h.rdma_interface})" for h in cfg.hosts if h.rdma_interface]
    if not rdma or cfg.network.data_plane == "host":
        return []
    return [
        f"network.data_plane: 'overlay' with hosts[].rdma_interface set on {', '.join(rdma)}; "
        "RDMA cannot reach tasks on the overlay (their traffic would go over TCP "
        "sockets, about a tenth of RDMA's bandwidth); allowed: network.data_plane "
        "'host', or no rdma_interface"
    ]


def rdma_gid_index(cfg: StackConfig) -> list[str]:
    index = cfg.network.rdma_gid_index
    if index is None or any(h.rdma_interface for h in cfg.hosts):
        return []
    return [
        f"network.rdma_gid_index: {index} but no host declares an rdma_interface; allowed: "
        "unset, or set hosts[].rdma_interface"
    ]
