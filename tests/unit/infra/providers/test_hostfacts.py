"""infra.providers.hostfacts: parsing what a host reports, and naming every drifted fact."""

from __future__ import annotations

import pytest

from infra.providers.hostfacts import compare, mismatches, parse_facts

pytestmark = pytest.mark.unit

REPORT = """hostname=gpu-01
nic_mtu=9100
gpu=GPU-b
driver=550.54.15
gpu=GPU-a
driver=550.54.15
docker=27.3.1
default_runtime=nvidia
swarm_resource=DOCKER_RESOURCE_NVIDIA-GPU
"""


def test_parse_facts() -> None:
    """The facts script's lines become sorted UUIDs, MTU, driver and docker versions."""
    assert parse_facts(REPORT) == {
        "hostname": "gpu-01",
        "nic_mtu": 9100,
        "docker_version": "27.3.1",
        "gpu_uuids": ["GPU-a", "GPU-b"],
        "driver_version": "550.54.15",
        "default_runtime": "nvidia",
        "swarm_resource": "DOCKER_RESOURCE_NVIDIA-GPU",
    }


def test_parse_facts_no_gpus() -> None:
    """A host without nvidia-smi has no GPUs and no driver."""
    facts = parse_facts("hostname=cpu-1\nnic_mtu=1500\ndocker=27.0\n")
    assert facts["gpu_uuids"] == [] and facts["driver_version"] == ""


def test_compare_and_mismatch_lost_gpu() -> None:
    """A host that lost a GPU is named with both counts."""
    expected = {"hostname": "gpu-01", "gpu_count": 3, "nic_mtu": 9100, "driver_meets_minimum": True}
    observed = parse_facts(REPORT)
    seen = compare(expected, observed, "535.0")
    assert seen == {
        "hostname": "gpu-01",
        "gpu_count": 2,
        "nic_mtu": 9100,
        "driver_meets_minimum": True,
    }
    assert mismatches("gpu-01", expected, seen, observed, "535.0", 9050) == [
        "host gpu-01: gpu_count is 2, config says 3"
    ]


def test_old_driver_is_named() -> None:
    """A driver older than the minimum is named with both versions."""
    expected = {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100, "driver_meets_minimum": True}
    observed = parse_facts(REPORT)
    seen = compare(expected, observed, "560.1")
    assert mismatches("gpu-01", expected, seen, observed, "560.1", 9050) == [
        "host gpu-01: NVIDIA driver 550.54.15 is older than preflight.min_driver_version 560.1"
    ]


def test_small_mtu_is_named() -> None:
    """A NIC MTU too small for the overlay says so and what is needed."""
    expected = {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100}
    observed = parse_facts(REPORT.replace("nic_mtu=9100", "nic_mtu=1500"))
    seen = compare(expected, observed, "535.0")
    assert mismatches("gpu-01", expected, seen, observed, "535.0", 9050) == [
        "host gpu-01: NIC MTU is 1500, config network.underlay_mtu says 9100 (too small for the "
        "overlay); the overlay needs at least 9050"
    ]


def test_pinned_uuids_compared() -> None:
    """With UUIDs pinned in config, a swapped GPU is drift."""
    expected = {
        "hostname": "gpu-01",
        "gpu_count": 2,
        "nic_mtu": 9100,
        "gpu_uuids": ["GPU-a", "GPU-z"],
    }
    observed = parse_facts(REPORT)
    seen = compare(expected, observed, "535.0")
    assert seen["gpu_uuids"] == ["GPU-a", "GPU-b"]
    assert mismatches("gpu-01", expected, seen, observed, "535.0", 9050) == [
        "host gpu-01: gpu_uuids is ['GPU-a', 'GPU-b'], config says ['GPU-a', 'GPU-z']"
    ]


def test_gpu_isolation_ok() -> None:
    """The NVIDIA default runtime reading Swarm's assignment isolates GPUs: no drift."""
    expected = {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100, "gpu_isolation": True}
    observed = parse_facts(REPORT)
    seen = compare(expected, observed, "535.0")
    assert mismatches("gpu-01", expected, seen, observed, "535.0", 9050) == []


def test_gpu_isolation_missing_is_named() -> None:
    """runc as default runtime means every task sees every GPU: preflight says why."""
    expected = {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100, "gpu_isolation": True}
    report = REPORT.replace("default_runtime=nvidia", "default_runtime=runc").replace(
        "swarm_resource=DOCKER_RESOURCE_NVIDIA-GPU", "swarm_resource="
    )
    observed = parse_facts(report)
    seen = compare(expected, observed, "535.0")
    assert mismatches("gpu-01", expected, seen, observed, "535.0", 9050) == [
        "host gpu-01: tasks would see every GPU: the Docker default runtime is 'runc' (needs "
        "'nvidia') and /etc/nvidia-container-runtime/config.toml sets swarm-resource to "
        "'nothing' (needs 'DOCKER_RESOURCE_NVIDIA-GPU')"
    ]
