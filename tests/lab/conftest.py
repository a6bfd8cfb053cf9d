"""Lab fixtures: one lab per module, always torn down (also when a test fails)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pulumi.dynamic import CreateResult, ReadResult, UpdateResult

from harness.configs import dev_stack_config
from harness.lab import docker_run
from infra.components.swarm import endpoint as swarm_endpoint
from infra.components.swarm import ssh_hosts, ssh_prop, ssh_specs
from infra.config import StackConfig
from infra.config.models import Host
from infra.providers.hostops import docker_client
from infra.render.labels import node_labels
from lab import config as c
from lab import engines
from lab.down import down
from lab.status import status
from lab.testimage import build_and_push
from lab.up import up

HOSTS = 3
GPUS = 2
# The engine every lab fixture runs (`python -m lab engine list`); CI can run the suite per engine.
ENGINE = engines.default_engine()


@dataclass
class Lab:
    root: Path
    hosts: int
    gpus: int
    mtu: int
    image: str
    info: dict[str, Any]

    @property
    def paths(self) -> c.LabPaths:
        return c.LabPaths(self.root)

    def docker(
        self, i: int, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """The docker CLI against host i's own unix socket."""
        return docker_run(i, *args, check=check, timeout=timeout)


def overlay_9000(lab: Lab, net: str) -> None:
    """An attachable overlay with MTU 9000, made on lab host 1."""
    mtu = "com.docker.network.driver.mtu=9000"
    lab.docker(1, "network", "create", "-d", "overlay", "--attachable", "--opt", mtu, net)


def df_ping(
    lab: Lab, net: str, target: str, size: int, count: int, wait: int
) -> subprocess.CompletedProcess[str]:
    """From a fresh container on host 1: ping `target` with DF set and `size` bytes."""
    ping = ["/bin/ping", "-c", str(count), "-W", str(wait), "-M", "do", "-s", str(size), target]
    return lab.docker(1, "run", "--rm", "--network", net, lab.image, *ping, check=False)


def pinned_service(lab: Lab, svc: str, net: str, host: int) -> None:
    """A one-task dnsrr service of the test image on `net`, pinned to lab host `host`."""
    on_host = f"node.hostname=={c.host_name(host)}"
    create = ["service", "create", "-d", "--name", svc, "--endpoint-mode", "dnsrr"]
    placed = ["--network", net, "--constraint", on_host]
    lab.docker(1, *create, *placed, lab.image, "sleep", "3600")


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")


def start_lab(hosts: int, gpus: int, mtu: int, swarm: bool = True, engine: str = ENGINE) -> Lab:
    root = c.lab_root()
    down(root)  # leftovers of an earlier, crashed run
    up(root, hosts, gpus, mtu, swarm=swarm, managers=1, engine=engine)
    image = build_and_push(c.LabPaths(root).host(1).socket)
    return Lab(root, hosts, gpus, mtu, image, status(root))


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    """A 3-host swarm, 2 fake GPUs each, bridge MTU 9100, test image in the registry."""
    _require_root()
    root = c.lab_root()
    try:
        yield start_lab(HOSTS, GPUS, c.DEFAULT_MTU)
    finally:
        down(root)


@pytest.fixture(scope="module")
def small_mtu_lab() -> Iterator[Lab]:
    """A 2-host swarm whose underlay (bridge and veths) has MTU 1500."""
    _require_root()
    root = c.lab_root()
    try:
        yield start_lab(2, 1, 1500)
    finally:
        down(root)


@pytest.fixture(scope="module")
def bare_lab() -> Iterator[Lab]:
    """A 2-host lab, 2 fake GPUs each, no swarm yet (as the Pulumi program finds it)."""
    _require_root()
    root = c.lab_root()
    try:
        yield start_lab(2, 2, c.DEFAULT_MTU, swarm=False)
    finally:
        down(root)


@pytest.fixture
def dev_cfg() -> StackConfig:
    """The dev stack's validated config."""
    return dev_stack_config()


def outs(result: CreateResult | ReadResult | UpdateResult) -> dict[str, Any]:
    """A dynamic provider's result outputs (the SDK types them optional; the project's
    providers always return them)."""
    assert result.outs is not None, f"{type(result).__name__} without outputs"
    return result.outs


def ssh_props(cfg: StackConfig) -> dict[str, Any]:
    """The `ssh_hosts` input the program adds to every provider that reaches an engine
    when the config has ssh:// hosts (the lab stacks' form), else nothing."""
    return ssh_prop(ssh_hosts(cfg.hosts, ssh_specs(cfg.hosts, cfg.ssh_for)))


def client_of(cfg: StackConfig, host: Host) -> Any:
    """A Docker client of one host of `cfg`, reached as the program reaches it (over
    its SSH settings for an ssh:// engine)."""
    ssh = cfg.ssh_for(host).props() if host.docker_host.startswith("ssh://") else None
    return docker_client(swarm_endpoint(host), ssh)


def init_props(cfg: StackConfig) -> dict[str, Any]:
    """SwarmInit inputs for a config's leader, as the program passes them."""
    leader = cfg.leader
    return {
        **ssh_props(cfg),
        "host": leader.name,
        "endpoint": swarm_endpoint(leader),
        "advertise_addr": leader.address,
        "addr_pool": None,
        "swarm_id": None,
    }


def node_props(cfg: StackConfig, name: str, swarm_id: str) -> dict[str, Any]:
    """SwarmNode inputs for one host of a config, as the program passes them."""
    h = next(h for h in cfg.hosts if h.name == name)
    return {
        **ssh_props(cfg),
        "host": h.name,
        "is_leader": h is cfg.leader,
        "endpoint": swarm_endpoint(h),
        "leader_endpoint": swarm_endpoint(cfg.leader),
        "leader_addr": cfg.leader.address,
        "advertise_addr": h.address,
        "swarm_id": swarm_id,
        "role": h.role,
        "availability": "active",
        "labels": node_labels(cfg, h),
        "node_id": None,
    }
