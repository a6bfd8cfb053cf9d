"""The fabric preflight against lab hosts: the host facts read each RDMA fact over real
SSH from a lab host whose `ibv_devinfo` and `lsmod` are faked per host (lab/hostfiles.py)
and whose Docker daemon really has the memlock default it reports; each refusal names
host, device and fact, and a refresh names the fact that drifted."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from harness.configs import dev_config, unprefixed
from infra.components.hostfacts import facts_props, peermem_warning
from infra.config import StackConfig, parse_stack_config
from infra.providers.hostfacts import HostFactsProvider
from infra.render.remedy import drain_remedies
from lab import hostfiles as hf
from tests.lab.conftest import Lab, outs

pytestmark = pytest.mark.lab


@pytest.fixture
def rdma_cfg() -> StackConfig:
    """The dev stack on the host data plane with mlx5_0 on both hosts, GID index 3."""
    raw = unprefixed(dev_config())
    for h in raw["hosts"]:
        h["rdma_interface"] = "mlx5_0"
    raw["network"].update(data_plane="host", rdma_gid_index=3)
    return parse_stack_config(raw)


UNLIMITED = {"Name": "memlock", "Hard": -1, "Soft": -1}


@pytest.fixture
def fabric(bare_lab: Lab) -> Iterator[Lab]:
    """The lab with unlimited locked memory in each host's daemon config, and no fake RDMA
    files after each test. The file only: this machine refuses containers an unlimited
    memlock (runc: "error setting rlimit type 8: operation not permitted"), so the lab's
    dockerds are not restarted with it; the facts read the file, as on a GPU server."""
    originals = {}
    for i in (1, 2):
        path = bare_lab.paths.host(i).daemon_json
        originals[path] = path.read_text()
        cfg = json.loads(originals[path])
        cfg["default-ulimits"] = {"memlock": UNLIMITED}
        path.write_text(json.dumps(cfg, indent=2) + "\n")
    try:
        yield bare_lab
    finally:
        for path, text in originals.items():
            path.write_text(text)
        for i in (1, 2):
            hp = bare_lab.paths.host(i)
            shutil.rmtree(hp.rdma_devinfo, ignore_errors=True)
            hp.kernel_modules.unlink(missing_ok=True)


def nic(lab: Lab, i: int, dev: str = "mlx5_0", **devinfo: Any) -> None:
    """Give lab host i an RDMA device as ibv_devinfo would show it."""
    d = lab.paths.host(i).rdma_devinfo
    d.mkdir(exist_ok=True)
    (d / dev).write_text(hf.render_devinfo(dev, **devinfo))


def props(cfg: StackConfig, name: str) -> dict[str, Any]:
    """The facts resource's inputs for a host, as the program passes them."""
    host = next(h for h in cfg.hosts if h.name == name)
    return {**facts_props(cfg, host, drain_remedies(cfg.hosts)[name]), "observed": None}


def test_ready_fabric_passes_and_is_observed(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """An active RoCE port with a v2 GID at the index, MTU 4096, and the lab daemon's
    unlimited memlock pass; the facts say so, and that nvidia_peermem is not loaded."""
    nic(fabric, 1)
    seen = outs(HostFactsProvider().create(props(rdma_cfg, "lab-h1")))["observed"]
    assert (seen["rdma_state"], seen["rdma_link_layer"], seen["rdma_active_mtu"]) == (
        "PORT_ACTIVE",
        "Ethernet",
        4096,
    ), seen
    assert seen["rdma_gids"]["3"] == "RoCE v2" and seen["memlock"] == "unlimited", seen
    host = rdma_cfg.hosts[0]
    assert peermem_warning(host, seen).startswith("host lab-h1: nvidia_peermem is not loaded")


def test_peermem_loaded_is_observed(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """With nvidia_peermem in lsmod the host has GPUDirect RDMA and no warning."""
    nic(fabric, 2)
    fabric.paths.host(2).kernel_modules.write_text("nvidia_peermem         16384  0\n")
    seen = outs(HostFactsProvider().create(props(rdma_cfg, "lab-h2")))["observed"]
    assert seen["nvidia_peermem"] and not peermem_warning(rdma_cfg.hosts[1], seen)


def test_preflight_refuses_a_missing_device(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """No such RDMA device on the host: refused with what ibv_devinfo said."""
    with pytest.raises(
        Exception,
        match=r"host lab-h1: RDMA device mlx5_0 not found \(ibv_devinfo said: IB device "
        r"'mlx5_0' wasn't found\)",
    ):
        HostFactsProvider().create(props(rdma_cfg, "lab-h1"))


def test_preflight_refuses_a_port_down(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """A port that is down stops the deployment, naming host, device and state."""
    nic(fabric, 2, state="PORT_DOWN")
    with pytest.raises(Exception, match=r"host lab-h2: RDMA device mlx5_0 port 1 is PORT_DOWN"):
        HostFactsProvider().create(props(rdma_cfg, "lab-h2"))


def test_preflight_refuses_a_roce_v1_gid(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """GID 3 being RoCE v1 stops the deployment, listing the RoCE v2 indexes."""
    nic(fabric, 1, gids={0: "RoCE v1", 1: "RoCE v2", 3: "RoCE v1"})
    with pytest.raises(
        Exception,
        match=r"GID 3 \(network.rdma_gid_index\) is RoCE v1, not RoCE v2; RoCE v2 GIDs here: \[1\]",
    ):
        HostFactsProvider().create(props(rdma_cfg, "lab-h1"))


def test_preflight_refuses_a_small_mtu(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """An active MTU of 1024 stops the deployment, saying what MTU the NIC needs."""
    nic(fabric, 1, active_mtu=1024)
    with pytest.raises(Exception, match=r"port 1 has active_mtu 1024, not 4096"):
        HostFactsProvider().create(props(rdma_cfg, "lab-h1"))


def test_preflight_refuses_limited_memlock(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """A daemon config with a limited memlock default stops the deployment, saying what
    to set (the lab's daemon.json, which /etc/docker/daemon.json is on a lab host)."""
    nic(fabric, 2)
    path = fabric.paths.host(2).daemon_json
    cfg = json.loads(path.read_text())
    cfg["default-ulimits"]["memlock"] = {"Name": "memlock", "Hard": 65536, "Soft": 65536}
    path.write_text(json.dumps(cfg))
    with pytest.raises(
        Exception, match=r"host lab-h2: the Docker daemon gives containers locked memory 65536"
    ):
        HostFactsProvider().create(props(rdma_cfg, "lab-h2"))


def test_preflight_refuses_no_memlock_default(bare_lab: Lab, rdma_cfg: StackConfig) -> None:
    """The lab's own daemon config (no default-ulimits) is refused as a GPU server's would be."""
    nic(bare_lab, 1)
    try:
        with pytest.raises(Exception, match=r"locked memory no default \(the daemon's own limit\)"):
            HostFactsProvider().create(props(rdma_cfg, "lab-h1"))
    finally:
        shutil.rmtree(bare_lab.paths.host(1).rdma_devinfo, ignore_errors=True)


def test_refresh_names_a_port_that_went_down(fabric: Lab, rdma_cfg: StackConfig) -> None:
    """After a port goes down, read reports it and the diff against the config changes."""
    nic(fabric, 1)
    p = HostFactsProvider()
    want = props(rdma_cfg, "lab-h1")
    created = outs(p.create(want))
    nic(fabric, 1, state="PORT_DOWN")
    read = p.read("facts-lab-h1", created)
    assert read.inputs is not None and read.inputs["expected"]["rdma_port_active"] is False
    assert p.diff("facts-lab-h1", outs(read), want).changes is True
