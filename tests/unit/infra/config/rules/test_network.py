"""infra.config.rules.network: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import monitored, problems, warnings_of
from tests.unit.infra.samples import host

pytestmark = pytest.mark.unit


def test_overlay_mtu_exceeds_underlay(raw: dict[str, Any]) -> None:
    """Overlay MTU + VXLAN overhead above the underlay MTU is refused with the max."""
    raw["network"]["underlay_mtu"] = 1500
    assert problems(raw) == [
        "network.mtu: 9000 + 50 (VXLAN) = 9050 exceeds network.underlay_mtu 1500; "
        "allowed: network.mtu <= 1450"
    ]


def test_encrypted_overlay_counts_ipsec(raw: dict[str, Any]) -> None:
    """An encrypted overlay needs room for IPsec on top of VXLAN."""
    raw["network"].update(encrypted=True, underlay_mtu=9050)
    assert problems(raw) == [
        "network.mtu: 9000 + 108 (VXLAN + IPsec) = 9108 exceeds network.underlay_mtu 9050; "
        "allowed: network.mtu <= 8942"
    ]


def test_network_name(raw: dict[str, Any]) -> None:
    """A network name Swarm refuses is refused."""
    raw["network"]["name"] = "ds.net"
    assert problems(raw) == [
        "network.name: 'ds.net' is not a network name Swarm accepts; allowed: up to 56 letters "
        "and digits, with '-' or '_' only between them"
    ]


def test_subnet_contains_host(raw: dict[str, Any]) -> None:
    """An overlay subnet containing a host's address is refused."""
    raw["network"]["subnet"] = "10.0.0.0/16"
    assert problems(raw)[0] == (
        "network.subnet: 10.0.0.0/16 contains hosts[0].address 10.0.0.1; allowed: a subnet "
        "clear of the hosts' addresses (tasks would shadow the host)"
    )


def test_subnet_too_small(raw: dict[str, Any]) -> None:
    """An overlay subnet without room for every host's tasks is refused."""
    raw["network"]["subnet"] = "10.20.0.0/29"
    assert problems(raw) == [
        "network.subnet: 10.20.0.0/29 has 5 usable addresses but 3 hosts need 9; allowed: a "
        "prefix with at least 12 addresses"
    ]


def test_subnet_docker_pool_warns(raw: dict[str, Any]) -> None:
    """An overlay subnet in Docker's local pool is a warning."""
    raw["network"]["subnet"] = "172.18.0.0/16"
    assert warnings_of(raw) == [
        "network.subnet: 172.18.0.0/16 overlaps 172.18.0.0/15 (Docker's local pool (docker0, "
        "docker_gwbridge)); tasks may route that range the wrong way, or the network create "
        "may be refused"
    ]


def test_subnet_ingress_warns(raw: dict[str, Any]) -> None:
    """An overlay subnet on the swarm's default ingress is a warning."""
    raw["hosts"] = [host(i, "manager" if i == 1 else "worker") for i in (1, 2, 3)]
    for h in raw["hosts"]:
        h["address"] = h["address"].replace("10.0.0.", "192.0.2.")
    raw["network"]["subnet"] = "10.0.0.0/23"
    assert warnings_of(raw) == [
        "network.subnet: 10.0.0.0/23 overlaps 10.0.0.0/24 (the swarm's default ingress "
        "network); tasks may route that range the wrong way, or the network create may be "
        "refused"
    ]


def test_subnet_room_for_monitoring(raw: dict[str, Any]) -> None:
    """With monitoring, the overlay also needs a node exporter per host and Prometheus."""
    raw["hosts"].append(host(4))
    raw["network"]["subnet"] = "10.20.0.0/28"
    assert parse_stack_config(raw), "4 hosts fit a /28 without monitoring"
    assert problems(monitored(raw)) == [
        "network.subnet: 10.20.0.0/28 has 13 usable addresses but 4 hosts need 17; allowed: a "
        "prefix with at least 20 addresses"
    ]


def test_rdma_on_the_overlay_is_refused(raw: dict[str, Any]) -> None:
    """An RDMA device with the overlay data plane (silently TCP) is refused, naming hosts."""
    raw["hosts"][1]["rdma_interface"] = "mlx5_0"
    assert problems(raw) == [
        "network.data_plane: 'overlay' with hosts[].rdma_interface set on gpu-02 (mlx5_0); "
        "RDMA cannot reach tasks on the overlay (their traffic would go over TCP sockets, "
        "about a tenth of RDMA's bandwidth); allowed: network.data_plane 'host', or no "
        "rdma_interface"
    ]


def test_rdma_on_the_host_data_plane_passes(raw: dict[str, Any]) -> None:
    """RDMA devices with the host data plane are accepted."""
    raw["hosts"][1]["rdma_interface"] = "mlx5_0"
    raw["network"]["data_plane"] = "host"
    assert parse_stack_config(raw).network.data_plane == "host"


def test_host_data_plane_needs_one_nic_name(raw: dict[str, Any]) -> None:
    """On the host data plane, active hosts with different nic names are refused."""
    raw["network"]["data_plane"] = "host"
    raw["hosts"][2]["nic"] = "ens1f0np0"
    assert problems(raw) == [
        "hosts[].nic: the active hosts name 2 interfaces ('ens1f0np0' on gpu-03; 'eth0' on "
        "gpu-01, gpu-02), and with network.data_plane 'host' NCCL and gloo bind to one name "
        "on every host; allowed: one nic for every active host (rename the interfaces, e.g. "
        "with a udev rule)"
    ]


def test_a_drained_host_may_name_another_nic(raw: dict[str, Any]) -> None:
    """A drained host carries no training task: its nic does not count."""
    raw["network"]["data_plane"] = "host"
    raw["hosts"][2].update(nic="ens1f0np0", availability="drain")
    assert parse_stack_config(raw).network.data_plane == "host"


def test_gid_index_without_rdma_is_refused(raw: dict[str, Any]) -> None:
    """network.rdma_gid_index with no RDMA device anywhere is refused."""
    raw["network"]["rdma_gid_index"] = 3
    assert problems(raw) == [
        "network.rdma_gid_index: 3 but no host declares an rdma_interface; allowed: unset, "
        "or set hosts[].rdma_interface"
    ]
