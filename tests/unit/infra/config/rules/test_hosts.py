"""infra.config.rules.hosts: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.infra.config.checks import problems

pytestmark = pytest.mark.unit


def test_spare_cannot_be_the_master(raw: dict[str, Any]) -> None:
    """The first host (rank 0) cannot be the spare."""
    raw["hosts"][0]["spare"] = True
    assert problems(raw) == [
        "hosts[0].spare: true on 'gpu-01', the master (rank 0); allowed: spare on any host "
        "but the first"
    ]


def test_master_cannot_be_drained(raw: dict[str, Any]) -> None:
    """The first host (rank 0) cannot be drained: another host must come first."""
    raw["hosts"][0]["availability"] = "drain"
    assert problems(raw) == [
        "hosts[0].availability: 'drain' on 'gpu-01', the master (rank 0); allowed: 'active' "
        "(to move the master, list another host first)"
    ]


def test_spare_needs_the_pdsh_launch(raw: dict[str, Any]) -> None:
    """Per-node launches are tied to hosts: a spare needs deepspeed with pdsh."""
    raw["hosts"][2]["spare"] = True
    raw["training"] = {"gpus_per_node": 8, "launch_mode": "no_ssh"}
    assert problems(raw) == [
        "hosts[].spare: spare hosts ['gpu-03'] with launcher 'deepspeed' and launch_mode "
        "'no_ssh'; allowed: spares only with launcher 'deepspeed' and launch_mode 'pdsh' (one "
        "launcher that follows the real placement; per-node launches are tied to hosts)"
    ]


def test_duplicate_host_name(raw: dict[str, Any]) -> None:
    """Two hosts with one name are refused, naming the name."""
    raw["hosts"][2]["name"] = "gpu-02"
    assert problems(raw) == ["hosts[].name: 'gpu-02' appears 2 times; allowed: each host name once"]


def test_duplicate_host_address(raw: dict[str, Any]) -> None:
    """Two hosts with one address are refused, naming the address."""
    raw["hosts"][1]["address"] = "10.0.0.1"
    assert problems(raw) == [
        "hosts[].address: '10.0.0.1' appears 2 times; allowed: each host address once"
    ]


def test_no_manager(raw: dict[str, Any]) -> None:
    """A swarm without a manager is refused."""
    raw["hosts"][0]["role"] = "worker"
    assert problems(raw) == [
        "hosts[].role: no host has role 'manager'; allowed: 1, 3, 5 or 7 managers "
        "(an odd number keeps Raft quorum)"
    ]


def test_even_managers(raw: dict[str, Any]) -> None:
    """Two managers are refused: an even count adds no fault tolerance."""
    raw["hosts"][1]["role"] = "manager"
    assert problems(raw) == [
        "hosts[].role: 2 managers ['gpu-01', 'gpu-02']; allowed: an odd number (1, 3, 5, 7): "
        "an even count adds a failure without adding fault tolerance"
    ]


def test_shared_docker_endpoint(raw: dict[str, Any]) -> None:
    """Two hosts on one Docker engine endpoint are refused."""
    raw["hosts"][2]["docker_host"] = "ssh://root@gpu-02"
    assert problems(raw) == [
        "hosts[].docker_host: 'ssh://root@gpu-02' is the endpoint of 2 hosts; allowed: each "
        "host its own Docker engine (one engine is one swarm node)"
    ]


def test_host_address_not_a_name(raw: dict[str, Any]) -> None:
    """A host address that is neither an IP nor a DNS name is refused."""
    raw["hosts"][1]["address"] = "gpu_02.example"
    assert problems(raw) == [
        "hosts[1].address: 'gpu_02.example' is neither an IP address nor a DNS host name; "
        "allowed: an IP address, or dot-separated labels of letters, digits and inner '-'"
    ]


def test_gpu_uuid_on_two_hosts(raw: dict[str, Any]) -> None:
    """One GPU UUID pinned on two hosts is refused."""
    for h in raw["hosts"][:2]:
        h["gpus"].update(count=1, uuids=["GPU-a"])
    raw["training"]["gpus_per_node"] = 1
    assert problems(raw) == [
        "hosts[].gpus.uuids: 'GPU-a' is listed on hosts ['gpu-01', 'gpu-02']; allowed: each "
        "GPU UUID on one host"
    ]


def test_driver_version_not_numeric(raw: dict[str, Any]) -> None:
    """A minimum driver version that is not dotted numbers is refused."""
    raw["preflight"] = {"min_driver_version": "r550"}
    assert problems(raw) == [
        "preflight.min_driver_version: 'r550' is not a driver version; allowed: dotted numbers, "
        "e.g. '535.0' or '550.54.15'"
    ]
