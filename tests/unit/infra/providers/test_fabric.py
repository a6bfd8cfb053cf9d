"""infra.providers.fabric: parsing ibv_devinfo, lsmod and the daemon config, and the
sentence for each fabric fact that is not as RDMA needs it."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from infra.providers.fabric import (
    daemon_memlock,
    fabric_problem,
    gid_ok,
    injects_rdma,
    parse_fabric,
    seen_fabric,
)
from infra.providers.factcheck import compare, mismatches
from infra.providers.hostfacts import parse_facts
from lab.hostfiles import render_devinfo

pytestmark = pytest.mark.unit

UNLIMITED = {"default-ulimits": {"memlock": {"Name": "memlock", "Hard": -1, "Soft": -1}}}


def report(devinfo: str, daemon: dict[str, Any] | None = UNLIMITED, peermem: bool = True) -> str:
    """FABRIC_SCRIPT's output around one ibv_devinfo text."""
    lines = [f"ibv|{line}" for line in devinfo.splitlines()]
    if peermem:
        lines.append("peermem=loaded")
    encoded = base64.b64encode(json.dumps(daemon).encode()).decode() if daemon else ""
    lines.append(f"daemon_json={encoded}")
    return "\n".join(lines) + "\n"


def test_parse_a_roce_port() -> None:
    """State, link layer, active MTU and GID types come from the first port."""
    seen = parse_fabric(report(render_devinfo("mlx5_0")))
    assert seen["rdma_found"] and seen["rdma_state"] == "PORT_ACTIVE"
    assert (seen["rdma_link_layer"], seen["rdma_active_mtu"]) == ("Ethernet", 4096)
    assert seen["rdma_gids"] == {"0": "RoCE v1", "1": "RoCE v2", "2": "RoCE v1", "3": "RoCE v2"}
    assert seen["nvidia_peermem"] and seen["memlock"] == "unlimited"


def test_parse_the_devinfo_sample_with_hex_v1_gids() -> None:
    """A v1 GID in full hex and a v2 one in compressed form both parse (devinfo.c)."""
    text = (
        "ibv|\t\t\tlink_layer:\t\tEthernet\n"
        "ibv|\t\tport:\t1\n"
        "ibv|\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0e42:a1ff:fef1:2a3e, RoCE v1\n"
        "ibv|\t\t\tGID[ 13]:\t\t::ffff:10.0.0.1, RoCE v2\n"
    )
    assert parse_fabric(text)["rdma_gids"] == {"0": "RoCE v1", "13": "RoCE v2"}


def test_only_the_first_port_counts() -> None:
    """A second port's down state does not overwrite the first's."""
    text = render_devinfo("mlx5_0") + "\t\tport:\t2\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n"
    assert parse_fabric(report(text))["rdma_state"] == "PORT_ACTIVE"


def test_missing_device_keeps_ibv_devinfo_s_message() -> None:
    """A device the tool does not know: not found, with what the tool said."""
    seen = parse_fabric("ibv|IB device 'mlx5_9' wasn't found\n")
    assert not seen["rdma_found"] and seen["rdma_error"] == "IB device 'mlx5_9' wasn't found"


@pytest.mark.parametrize(
    ("daemon", "memlock"),
    [
        (UNLIMITED, "unlimited"),
        (
            {"default-ulimits": {"memlock": {"Name": "memlock", "Hard": 65536, "Soft": 65536}}},
            "65536",
        ),
        ({"default-ulimits": {"nofile": {"Name": "nofile", "Hard": 1, "Soft": 1}}}, ""),
        ({}, ""),
    ],
)
def test_daemon_memlock(daemon: dict[str, Any], memlock: str) -> None:
    """The daemon's default memlock: unlimited, a number, or nothing configured."""
    assert daemon_memlock(base64.b64encode(json.dumps(daemon).encode()).decode()) == memlock


def test_daemon_memlock_of_garbage_is_unknown() -> None:
    """An unreadable daemon.json is no memlock default (refused, never a crash)."""
    assert daemon_memlock("not-base64!") == "" and daemon_memlock("") == ""


def test_gid_index_must_be_roce_v2() -> None:
    """On Ethernet the configured GID must be RoCE v2; unset, any v2 GID will do."""
    seen = parse_fabric(report(render_devinfo("mlx5_0")))
    assert gid_ok(seen, 3) and not gid_ok(seen, 2) and gid_ok(seen, None)


def test_infiniband_needs_no_roce_gid() -> None:
    """An InfiniBand port passes the GID fact whatever its GIDs."""
    seen = parse_fabric(report(render_devinfo("mlx5_0", link_layer="InfiniBand")))
    assert gid_ok(seen, 3)


@pytest.mark.parametrize(
    ("observed", "ok"),
    [
        (
            {"default_runtime": "nvidia", "toolkit_version": "1.17.9", "toolkit_mode": "legacy"},
            True,
        ),
        ({"default_runtime": "nvidia", "toolkit_version": "1.19.0", "toolkit_mode": "auto"}, True),
        ({"default_runtime": "nvidia", "toolkit_version": "1.10.0", "toolkit_mode": ""}, False),
        ({"default_runtime": "nvidia", "toolkit_version": "1.17.9", "toolkit_mode": "cdi"}, False),
        ({"default_runtime": "runc", "toolkit_version": "1.19.0", "toolkit_mode": ""}, False),
        ({"default_runtime": "nvidia"}, False),
    ],
)
def test_injects_rdma(observed: dict[str, Any], ok: bool) -> None:
    """The runtime injects the devices: nvidia runtime, toolkit >= 1.11.0, not cdi."""
    assert injects_rdma(observed) is ok


EXPECTED = {
    "rdma_port_active": True,
    "rdma_gid_ok": True,
    "rdma_active_mtu": 4096,
    "memlock_unlimited": True,
}


def problems(observed: dict[str, Any], gid_index: int | None = 3) -> list[str]:
    """The preflight's sentences for gpu-01's fabric (the rest of its facts beside)."""
    observed = {**parse_facts("hostname=gpu-01\n"), **observed}
    seen = compare(EXPECTED, observed, "535.0", gid_index)
    return mismatches("gpu-01", EXPECTED, seen, observed, "535.0", 9050, "mlx5_0", gid_index)


def fabric(**devinfo: Any) -> dict[str, Any]:
    return parse_fabric(report(render_devinfo("mlx5_0", **devinfo)))


def test_a_ready_fabric_has_no_problem() -> None:
    """An active RoCE v2 port with MTU 4096 and unlimited memlock passes."""
    assert problems(fabric()) == []


def test_port_down_is_named() -> None:
    """A port that is not active is refused, naming host, device and state."""
    assert problems(fabric(state="PORT_DOWN")) == [
        "host gpu-01: RDMA device mlx5_0 port 1 is PORT_DOWN, not PORT_ACTIVE (link down: "
        "cable, switch port, or the netdev is down)"
    ]


def test_gid_index_of_a_v1_gid_is_named_with_the_v2_ones() -> None:
    """A GID index that is RoCE v1 is refused, listing the RoCE v2 indexes."""
    assert problems(fabric(), gid_index=2) == [
        "host gpu-01: RDMA device mlx5_0: GID 2 (network.rdma_gid_index) is RoCE v1, not "
        "RoCE v2; RoCE v2 GIDs here: [1, 3]"
    ]


def test_small_mtu_is_named() -> None:
    """An active MTU of 1024 (a 1500-byte netdev) is refused, saying what to set."""
    assert problems(fabric(active_mtu=1024)) == [
        "host gpu-01: RDMA device mlx5_0 port 1 has active_mtu 1024, not 4096 (on RoCE it "
        "follows the NIC's MTU: give the netdev at least 4200, e.g. 9000)"
    ]


def test_limited_memlock_is_named() -> None:
    """A daemon without unlimited memlock is refused, saying what to configure."""
    observed = parse_fabric(report(render_devinfo("mlx5_0"), daemon={}))
    (sentence,) = problems(observed)
    assert sentence.startswith(
        "host gpu-01: the Docker daemon gives containers locked memory no default"
    )
    assert '"default-ulimits": {"memlock"' in sentence


def test_missing_device_is_one_sentence() -> None:
    """A missing device fails every fabric fact, and is said once."""
    observed = parse_fabric("ibv|IB device 'mlx5_0' wasn't found\ndaemon_json=\n")
    assert problems(observed) == [
        "host gpu-01: RDMA device mlx5_0 not found (ibv_devinfo said: IB device 'mlx5_0' "
        "wasn't found); check hosts[].rdma_interface",
        "host gpu-01: the Docker daemon gives containers locked memory no default (the "
        "daemon's own limit), not unlimited, and RDMA pins what NCCL registers; set "
        '"default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}} in '
        "/etc/docker/daemon.json and restart dockerd",
    ]


def test_missing_tool_is_named() -> None:
    """No ibv_devinfo: the fabric cannot be checked, and the preflight says so."""
    observed = parse_fabric("ibv_tool=missing\n" + report("", daemon=UNLIMITED))
    assert problems(observed)[0] == (
        "host gpu-01: RDMA device mlx5_0: ibv_devinfo is not installed (rdma-core's "
        "ibverbs-utils), so the fabric cannot be checked; install it"
    )


def test_injection_problem_names_runtime_and_toolkit() -> None:
    """A host whose runtime cannot inject the devices is refused, naming both."""
    observed = {"default_runtime": "runc", "toolkit_version": "1.17.9", "rdma_found": True}
    assert fabric_problem("gpu-01", "rdma_devices_injected", observed, "mlx5_0", 3) == (
        "host gpu-01: the NVIDIA runtime cannot add the RDMA devices to the tasks "
        "(NVIDIA_MOFED=enabled needs the default runtime 'nvidia', here 'runc', and toolkit "
        ">= 1.11.0 not in mode 'cdi', here 1.17.9); Swarm cannot pass devices itself"
    )


def test_seen_fabric_is_in_the_expected_shape() -> None:
    """seen_fabric gives every fabric key compare() diffs against the config."""
    assert set(seen_fabric(fabric(), 3)) == {*EXPECTED, "rdma_devices_injected"}
