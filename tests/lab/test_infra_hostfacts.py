"""infra.providers.hostfacts against lab hosts: preflight refuses, refresh names drifted facts.

These drive the dynamic provider's create/read/diff directly (the engine calls
the same methods), over real SSH to real lab hosts.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from infra.components.hostfacts import expected_facts, ssh_target
from infra.providers.hostfacts import HostFactsProvider
from lab import config as c
from lab import hostfiles as hf
from tests.lab.conftest import Lab, outs

pytestmark = pytest.mark.lab


def props(cfg: Any, name: str, **expected: Any) -> dict[str, Any]:
    """The facts resource's inputs for a dev-stack host, with expectations overridden."""
    host = next(h for h in cfg.hosts if h.name == name)
    return {
        "host": name,
        "ssh": ssh_target(cfg, host),
        "nic": host.nic,
        "min_driver": expected.pop("min_driver", cfg.preflight.min_driver_version),
        "needed_mtu": cfg.network.mtu + cfg.network.overhead,
        "expected": {**expected_facts(cfg, host), **expected},
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
