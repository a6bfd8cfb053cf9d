"""infra.providers.hostfacts against lab hosts: preflight refuses, refresh names drifted facts.

These drive the dynamic provider's create/read/diff directly (the engine calls
the same methods), over real SSH to real lab hosts.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from harness.configs import dev_config
from harness.sshd import end_master
from infra.components.hostfacts import facts_props
from infra.providers import factcheck
from infra.providers.hostfacts import HostFactsProvider
from infra.render.remedy import drain_remedies
from lab import config as c
from lab import hostfiles as hf
from tests.lab.conftest import Lab, outs

pytestmark = pytest.mark.lab


def props(cfg: Any, name: str, **expected: Any) -> dict[str, Any]:
    """The facts resource's inputs for a dev-stack host, with expectations overridden."""
    host = next(h for h in cfg.hosts if h.name == name)
    base = facts_props(cfg, host, drain_remedies(cfg.hosts)[name])
    return {
        **base,
        "min_driver": expected.pop("min_driver", cfg.preflight.min_driver_version),
        "expected": {**base["expected"], **expected},
        "observed": None,
    }


def test_create_reads_the_host(bare_lab: Lab, dev_cfg: Any) -> None:
    """Create reads hostname, GPUs, driver, NIC MTU and docker version from lab-h2."""
    seen = outs(HostFactsProvider().create(props(dev_cfg, "lab-h2")))["observed"]
    assert seen["hostname"] == "lab-h2" and seen["nic_mtu"] == 9100, seen
    assert seen["gpu_uuids"] == sorted(c.gpu_uuids(2, 2)), seen
    assert seen["driver_version"] == hf.FAKE_DRIVER_VERSION and seen["docker_version"], seen


def test_preflight_refuses_missing_gpus(bare_lab: Lab, dev_cfg: Any) -> None:
    """A host with fewer GPUs than configured stops the deployment, naming both counts."""
    with pytest.raises(Exception, match="host lab-h2: gpu_count is 2, config says 3"):
        HostFactsProvider().create(props(dev_cfg, "lab-h2", gpu_count=3))


def test_preflight_refuses_old_driver(bare_lab: Lab, dev_cfg: Any) -> None:
    """A driver older than preflight.min_driver_version stops the deployment."""
    with pytest.raises(Exception, match=r"NVIDIA driver 550\.54\.15 is older than .* 560\.0"):
        HostFactsProvider().create(props(dev_cfg, "lab-h1", min_driver="560.0"))


def test_refresh_without_drift_proposes_nothing(bare_lab: Lab, dev_cfg: Any) -> None:
    """Reading an untouched host gives no diff against the config."""
    p = HostFactsProvider()
    want = props(dev_cfg, "lab-h1")
    created = outs(p.create(want))
    read = p.read("facts-lab-h1", created)
    assert p.diff("facts-lab-h1", outs(read), want).changes is False


def test_refresh_names_a_lost_gpu(bare_lab: Lab, dev_cfg: Any) -> None:
    """After a GPU disappears, read reports gpu_count 1 and diff proposes a change."""
    p = HostFactsProvider()
    want = props(dev_cfg, "lab-h2")
    created = outs(p.create(want))
    gpus = bare_lab.paths.host(2).gpu_list
    before = gpus.read_text()
    gpus.write_text(before.splitlines(keepends=True)[0])
    try:
        read = p.read("facts-lab-h2", created)
        assert read.inputs is not None and read.inputs["expected"]["gpu_count"] == 1
        assert p.diff("facts-lab-h2", outs(read), want).changes is True
    finally:
        gpus.write_text(before)


def test_refresh_names_a_changed_mtu(bare_lab: Lab, dev_cfg: Any) -> None:
    """After the NIC MTU changes on the host, read reports it and diff proposes a change."""
    p = HostFactsProvider()
    want = props(dev_cfg, "lab-h2")
    created = outs(p.create(want))
    ns = ["ip", "netns", "exec", c.netns_name(2), "ip", "link", "set", "eth0", "mtu"]
    subprocess.run([*ns, "1500"], check=True)
    # The shared SSH connection was made at the old MTU: its segments from this machine
    # (bridge MTU 9100) would be dropped by the host's veth, which sends no ICMP back, so
    # it is ended and the next one agrees on the new size (a lab artefact: on prod the
    # operator's path to a host is not the host's NIC).
    end_master(dev_config(), 2)
    try:
        read = p.read("facts-lab-h2", created)
        assert read.inputs is not None and read.inputs["expected"]["nic_mtu"] == 1500
        assert p.diff("facts-lab-h2", outs(read), want).changes is True
        with pytest.raises(Exception, match=r"NIC MTU is 1500, .*\(too small for the overlay\)"):
            p.update("facts-lab-h2", outs(read), want)
    finally:
        subprocess.run([*ns, "9100"], check=True)


def test_preflight_requires_gpu_isolation(bare_lab: Lab, dev_cfg: Any) -> None:
    """Where isolation is required, a host whose engine cannot isolate GPUs (the lab's
    runc) stops the deployment, saying what to configure."""
    with pytest.raises(Exception, match=r"host lab-h1: tasks would see every GPU: .*'runc'"):
        HostFactsProvider().create(props(dev_cfg, "lab-h1", gpu_isolation=True))


def fake_toolkit(lab: Lab, i: int, version: str, config: str | None = None) -> None:
    """Give lab host i an NVIDIA container toolkit (the fake nvidia-ctk reads these)."""
    hp = lab.paths.host(i)
    hp.toolkit_version.write_text(version + "\n")
    if config is not None:
        hp.toolkit_config.write_text(config)


def test_no_toolkit_adds_no_observed_facts(bare_lab: Lab, dev_cfg: Any) -> None:
    """A lab host without a faked toolkit reports no toolkit keys (the upgrade check's
    refresh compares outputs too)."""
    seen = outs(HostFactsProvider().create(props(dev_cfg, "lab-h1")))["observed"]
    assert "toolkit_version" not in seen and "toolkit_mode" not in seen, seen


def test_preflight_refuses_toolkit_1_18_in_auto_mode(bare_lab: Lab, dev_cfg: Any) -> None:
    """Toolkit 1.18 with no mode set (auto: jit-cdi) stops the deployment, saying what to set."""
    fake_toolkit(bare_lab, 1, "1.18.2")
    with pytest.raises(
        Exception,
        match=r"host lab-h1: tasks would see every GPU: NVIDIA container toolkit 1\.18\.2 runs "
        r"in mode 'jit-cdi' \(config.toml sets mode 'auto'.*set mode = \"legacy\"",
    ):
        HostFactsProvider().create(props(dev_cfg, "lab-h1", gpu_runtime_isolates=True))


def test_preflight_refuses_toolkit_1_18_in_jit_cdi_mode(bare_lab: Lab, dev_cfg: Any) -> None:
    """Toolkit 1.18 with mode = "jit-cdi" in its config.toml stops the deployment."""
    fake_toolkit(bare_lab, 2, "1.18.1", '[nvidia-container-runtime]\nmode = "jit-cdi"\n')
    with pytest.raises(Exception, match=r"host lab-h2: .*1\.18\.1 runs in mode 'jit-cdi' \(as"):
        HostFactsProvider().create(props(dev_cfg, "lab-h2", gpu_runtime_isolates=True))


def test_toolkit_in_legacy_mode_passes_and_is_observed(bare_lab: Lab, dev_cfg: Any) -> None:
    """Toolkit 1.18 in legacy mode passes; the host's version and mode are observed."""
    fake_toolkit(bare_lab, 1, "1.18.2", '[nvidia-container-runtime]\nmode = "legacy"\n')
    created = HostFactsProvider().create(props(dev_cfg, "lab-h1", gpu_runtime_isolates=True))
    seen = outs(created)["observed"]
    assert seen["toolkit_version"] == "1.18.2" and seen["toolkit_mode"] == "legacy", seen


def test_refresh_names_a_toolkit_that_stopped_isolating(bare_lab: Lab, dev_cfg: Any) -> None:
    """After the toolkit's mode changes to jit-cdi, read reports gpu_runtime_isolates false."""
    fake_toolkit(bare_lab, 2, "1.18.2", '[nvidia-container-runtime]\nmode = "legacy"\n')
    p = HostFactsProvider()
    want = props(dev_cfg, "lab-h2", gpu_runtime_isolates=True)
    created = outs(p.create(want))
    bare_lab.paths.host(2).toolkit_config.write_text('[nvidia-container-runtime]\nmode = "auto"\n')
    read = p.read("facts-lab-h2", created)
    assert read.inputs is not None and read.inputs["expected"]["gpu_runtime_isolates"] is False
    assert p.diff("facts-lab-h2", outs(read), want).changes is True


def test_preflight_refuses_an_old_engine(
    bare_lab: Lab, dev_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine older than the minimum stops the deployment, naming host and version (the
    lab's engines all meet 20.10.0, so the minimum is raised past them)."""
    monkeypatch.setattr(factcheck, "MIN_DOCKER_ENGINE", "99.0.0")
    with pytest.raises(Exception, match=r"host lab-h1: Docker engine \d+\.\d+\.\S+ is older than"):
        HostFactsProvider().create(props(dev_cfg, "lab-h1"))
