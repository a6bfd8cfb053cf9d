"""infra.providers.hostfacts: parsing what a host reports, and naming every drifted fact."""

from __future__ import annotations

from typing import Any

import pytest

from infra.providers import hostfacts
from infra.providers.factcheck import compare, engine_problem, mismatches
from infra.providers.hostfacts import parse_facts

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


ISOLATING = {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100, "gpu_runtime_isolates": True}


def test_parse_facts_toolkit() -> None:
    """A host whose nvidia-ctk answered reports the toolkit's version and mode."""
    facts = parse_facts(REPORT + "toolkit_version=1.18.2\ntoolkit_mode=auto\n")
    assert facts["toolkit_version"] == "1.18.2" and facts["toolkit_mode"] == "auto"


def test_parse_facts_no_toolkit_adds_no_keys() -> None:
    """An empty toolkit version (nothing printed) adds no observed keys: lab hosts'
    observed facts stay what stacks deployed before the toolkit check recorded."""
    facts = parse_facts(REPORT + "toolkit_version=\ntoolkit_mode=\n")
    assert set(facts) == set(parse_facts(REPORT))
    assert "toolkit_version" not in facts and "toolkit_mode" not in facts


def test_toolkit_not_isolating_is_named() -> None:
    """Toolkit 1.18 in jit-cdi mode is refused, naming host, version, mode and the fix."""
    observed = parse_facts(REPORT + "toolkit_version=1.18.2\ntoolkit_mode=jit-cdi\n")
    seen = compare(ISOLATING, observed, "535.0")
    assert seen["gpu_runtime_isolates"] is False
    (said,) = mismatches("gpu-01", ISOLATING, seen, observed, "535.0", 9050)
    assert said.startswith("host gpu-01: tasks would see every GPU: NVIDIA container toolkit ")
    assert "1.18.2 runs in mode 'jit-cdi'" in said and 'mode = "legacy"' in said, said


def test_toolkit_in_legacy_mode_passes() -> None:
    """Toolkit 1.18 in legacy mode reads swarm-resource: no drift."""
    observed = parse_facts(REPORT + "toolkit_version=1.18.2\ntoolkit_mode=legacy\n")
    seen = compare(ISOLATING, observed, "535.0")
    assert mismatches("gpu-01", ISOLATING, seen, observed, "535.0", 9050) == []


def test_toolkit_fact_only_where_expected() -> None:
    """Without gpu_runtime_isolates expected (isolation not required), a broken toolkit
    is neither compared nor refused."""
    expected = {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100}
    observed = parse_facts(REPORT + "toolkit_version=1.18.2\ntoolkit_mode=auto\n")
    seen = compare(expected, observed, "535.0")
    assert "gpu_runtime_isolates" not in seen
    assert mismatches("gpu-01", expected, seen, observed, "535.0", 9050) == []


@pytest.mark.parametrize("version", ["20.10.0", "20.10.24+dfsg1", "28.5.2", ""])
def test_engine_at_or_above_minimum_passes(version: str) -> None:
    """The minimum engine and newer (or an engine that reported nothing) pass."""
    assert engine_problem("gpu-01", {"docker_version": version}) == []


def test_old_engine_is_named() -> None:
    """An engine older than MIN_DOCKER_ENGINE is named with host and version."""
    assert engine_problem("gpu-01", {"docker_version": "19.03.15"}) == [
        "host gpu-01: Docker engine 19.03.15 is older than the minimum 20.10.0 "
        "(infra/layout.py MIN_DOCKER_ENGINE); upgrade the engine"
    ]


@pytest.mark.parametrize("version", ["23.0.2", "24.0.7", "25.0.2"])
def test_counted_resources_defect_refused_on_gpu_host(version: str) -> None:
    """A GPU host on an engine whose Swarm rejects counted resources is refused, naming
    host, version, the upstream fix and the engine to upgrade to."""
    problems = engine_problem("gpu-01", {"docker_version": version}, gpus=8)
    assert problems == [
        f"host gpu-01: Docker engine {version} rejects every task that reserves GPUs as "
        "generic resources ('assigned node no longer meets constraints', "
        "moby/swarmkit#3162, from 23.0.2 until 25.0.3); upgrade the engine to 25.0.3 or newer"
    ]


@pytest.mark.parametrize("version", ["20.10.24", "23.0.1", "25.0.3", "26.1.5+dfsg1", "28.5.2"])
def test_gpu_host_outside_the_defect_passes(version: str) -> None:
    """A GPU host on an engine before 23.0.2 or from 25.0.3 on passes."""
    assert engine_problem("gpu-01", {"docker_version": version}, gpus=8) == []


@pytest.mark.parametrize("version", ["20.10.24", "23.0.2", "24.0.7", "25.0.3", "28.5.2"])
def test_counted_resources_defect_ignored_without_gpus(version: str) -> None:
    """A host without GPUs reserves no counted resource: any engine from the minimum on passes."""
    assert engine_problem("cpu-01", {"docker_version": version}, gpus=0) == []


def provider_props(**expected: Any) -> dict[str, Any]:
    """A facts resource's inputs for host gpu-01 (what the component registers)."""
    return {
        "host": "gpu-01",
        "ssh": {"user": "root", "address": "10.0.0.1", "port": 22},
        "nic": "eth0",
        "min_driver": "535.0",
        "needed_mtu": 9050,
        "expected": {"hostname": "gpu-01", "gpu_count": 2, "nic_mtu": 9100, **expected},
        "observed": None,
    }


def test_create_refuses_an_old_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Create refuses a host whose engine is older than the minimum, expected facts or not."""
    report = REPORT.replace("docker=27.3.1", "docker=19.03.15")
    monkeypatch.setattr(hostfacts, "ssh_run", lambda _ssh, _script: report)
    with pytest.raises(Exception, match=r"host gpu-01: Docker engine 19\.03\.15 is older"):
        hostfacts.HostFactsProvider().create(provider_props())


def test_read_of_an_old_engine_proposes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine minimum is no expected fact: a refresh of a deployed host is unchanged."""
    report = REPORT.replace("docker=27.3.1", "docker=19.03.15")
    monkeypatch.setattr(hostfacts, "ssh_run", lambda _ssh, _script: report)
    p = hostfacts.HostFactsProvider()
    want = provider_props()
    read = p.read("facts-gpu-01", {**want, "observed": parse_facts(REPORT)})
    assert read.inputs is not None and read.inputs["expected"] == want["expected"]
    assert p.diff("facts-gpu-01", read.inputs, want).changes is False


def test_create_refuses_a_broken_toolkit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Create refuses toolkit 1.18 under auto where gpu_runtime_isolates is expected."""
    report = REPORT + "toolkit_version=1.18.2\ntoolkit_mode=\n"
    monkeypatch.setattr(hostfacts, "ssh_run", lambda _ssh, _script: report)
    with pytest.raises(Exception, match=r"toolkit 1\.18\.2 runs in mode 'jit-cdi'"):
        hostfacts.HostFactsProvider().create(provider_props(gpu_runtime_isolates=True))


def test_facts_script_carries_the_toolkit_probe() -> None:
    """The one round trip per host also asks nvidia-ctk, and still formats."""
    script = hostfacts.FACTS_SCRIPT.format(nic="eth0")
    assert "nvidia-ctk --version" in script and "/sys/class/net/eth0/mtu" in script


def peer_props(**expected: Any) -> dict[str, Any]:
    """provider_props() on the host data plane: one peer to look up."""
    return {**provider_props(slow_peer_lookups=[], **expected), "peers": {"10.0.0.2": "gpu-02"}}


def test_create_refuses_a_slow_peer_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer whose reverse lookup took past the deadline is refused, the peer named."""
    report = REPORT + "peer_lookup=10.0.0.2 2003 ?\n"
    scripts: list[str] = []

    def ssh_run(_ssh: dict[str, Any], script: str) -> str:
        scripts.append(script)
        return report

    monkeypatch.setattr(hostfacts, "ssh_run", ssh_run)
    refused = r"host gpu-01: the reverse lookup of 10\.0\.0\.2 \(gpu-02\)"
    with pytest.raises(Exception, match=refused):
        hostfacts.HostFactsProvider().create(peer_props())
    assert "getent hosts" in scripts[0] and "10.0.0.2" in scripts[0]


def test_quick_peer_lookups_pass_and_read_back_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quick lookups pass, and a read of the same host proposes nothing (no timings kept)."""
    monkeypatch.setattr(
        hostfacts, "ssh_run", lambda _ssh, _s: REPORT + "peer_lookup=10.0.0.2 4 gpu-02\n"
    )
    p = hostfacts.HostFactsProvider()
    want = peer_props()
    outs = p.create(want).outs or {}
    assert outs["observed"]["peer_lookups"] == {"10.0.0.2": {"in_time": True, "name": "gpu-02"}}
    read = p.read("facts-gpu-01", outs)
    assert read.inputs is not None and p.diff("facts-gpu-01", read.inputs, want).changes is False


def test_a_slow_peer_is_drift_naming_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read after the names went away reports the slow peer's address as the fact."""
    monkeypatch.setattr(
        hostfacts, "ssh_run", lambda _ssh, _s: REPORT + "peer_lookup=10.0.0.2 2010 ?\n"
    )
    read = hostfacts.HostFactsProvider().read("facts-gpu-01", peer_props())
    assert read.inputs is not None and read.inputs["expected"]["slow_peer_lookups"] == ["10.0.0.2"]
