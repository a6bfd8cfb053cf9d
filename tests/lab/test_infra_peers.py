"""The peer lookups of the host data plane against lab hosts: the host facts ask each
host, over real SSH, for the names of its peers with the host's own glibc, hosts file and
resolver (a lab host's /etc/hosts and /etc/resolv.conf are its own files: lab/up.py). A
resolver that does not answer is a real one: a UDP socket on another lab host that reads
and never replies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness.configs import dev_config, unprefixed
from infra.components.hostfacts import facts_props
from infra.config import StackConfig, parse_stack_config
from infra.providers.hostfacts import HostFactsProvider
from infra.providers.hostops import ssh_run
from infra.providers.peers import LOOKUP_DEADLINE_S
from infra.render.remedy import drain_remedies
from lab import config as c
from lab import hostfiles as hf
from tests.lab.conftest import Lab, outs

pytestmark = pytest.mark.lab

# Binds UDP port 53 and reads what comes, answering nothing: a nameserver that hangs.
SILENT_DNS = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.bind(('0.0.0.0', 53))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    s.recvfrom(512)\n"
)


@pytest.fixture
def host_cfg() -> StackConfig:
    """The dev stack on the host data plane."""
    raw = unprefixed(dev_config())
    raw["network"].update(data_plane="host")
    return parse_stack_config(raw)


@pytest.fixture
def resolver(bare_lab: Lab) -> Iterator[Lab]:
    """The lab, with lab-h1's hosts and resolver files put back after each test."""
    hp = bare_lab.paths.host(1)
    hosts, resolv = hp.etc_hosts.read_text(), hp.resolv_conf.read_text()
    try:
        yield bare_lab
    finally:
        # Written in place: the host's /etc files are bind mounts of these inodes.
        hp.etc_hosts.write_text(hosts)
        hp.resolv_conf.write_text(resolv)


@pytest.fixture
def silent_dns(bare_lab: Lab) -> Iterator[str]:
    """A nameserver on lab-h2 that never answers; its address."""
    argv = ["ip", "netns", "exec", c.netns_name(2), sys.executable, "-c", SILENT_DNS]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield c.host_addr(2)
    finally:
        proc.kill()
        proc.wait()


def props(cfg: StackConfig, name: str) -> dict[str, Any]:
    """The facts resource's inputs for a host, as the program passes them."""
    host = next(h for h in cfg.hosts if h.name == name)
    return {**facts_props(cfg, host, drain_remedies(cfg.hosts)[name]), "observed": None}


def forget_peer(lab: Lab, nameserver: str) -> None:
    """lab-h1 without lab-h2 in its hosts file, asking `nameserver` instead."""
    hp = lab.paths.host(1)
    kept = [ln for ln in hp.etc_hosts.read_text().splitlines() if c.host_name(2) not in ln]
    hp.etc_hosts.write_text("\n".join(kept) + "\n")
    hp.resolv_conf.write_text(f"nameserver {nameserver}\n")


def test_peers_named_by_the_hosts_file_pass(resolver: Lab, host_cfg: StackConfig) -> None:
    """The lab's hosts files name every host: lab-h1 names lab-h2 in time."""
    seen = outs(HostFactsProvider().create(props(host_cfg, "lab-h1")))["observed"]
    assert seen["peer_lookups"] == {c.host_addr(2): {"in_time": True, "name": c.host_name(2)}}


def test_a_resolver_that_hangs_is_refused(
    resolver: Lab, silent_dns: str, host_cfg: StackConfig
) -> None:
    """A peer known only to a nameserver that does not answer is refused, host and peer
    named, in about the deadline (the lookups run at once)."""
    forget_peer(resolver, silent_dns)
    with pytest.raises(Exception) as err:
        HostFactsProvider().create(props(host_cfg, "lab-h1"))
    assert (
        f"host lab-h1: the reverse lookup of {c.host_addr(2)} ({c.host_name(2)}) did not "
        f"answer within {LOOKUP_DEADLINE_S} s" in str(err.value)
    ), err.value


def test_a_quick_no_such_name_passes(resolver: Lab, host_cfg: StackConfig) -> None:
    """A nameserver address where nothing listens fails the lookup at once (port
    unreachable): no name, no wait, nothing for the rendezvous to wait out."""
    forget_peer(resolver, c.host_addr(2))
    seen = outs(HostFactsProvider().create(props(host_cfg, "lab-h1")))["observed"]
    assert seen["peer_lookups"] == {c.host_addr(2): {"in_time": True, "name": ""}}


def test_a_refresh_names_the_peer_that_went_slow(
    resolver: Lab, silent_dns: str, host_cfg: StackConfig
) -> None:
    """Deployed while the names answered, then the name left the hosts file and the
    resolver hangs: a read reports the peer's address as the drifted fact."""
    p = HostFactsProvider()
    deployed = outs(p.create(props(host_cfg, "lab-h1")))
    forget_peer(resolver, silent_dns)
    read = p.read("facts-lab-h1", deployed)
    assert read.inputs is not None
    assert read.inputs["expected"]["slow_peer_lookups"] == [c.host_addr(2)]
    want = props(host_cfg, "lab-h1")
    assert p.diff("facts-lab-h1", read.inputs, want).changes is True


def test_lab_hosts_start_with_the_machines_resolver(bare_lab: Lab, host_cfg: StackConfig) -> None:
    """What a lab host reads as /etc/resolv.conf (over SSH, in its mount namespace) is its
    own file, a copy of this machine's: the lab's resolution is as before."""
    for host in host_cfg.hosts:
        seen = ssh_run(props(host_cfg, host.name)["ssh"], "cat /etc/resolv.conf")
        assert seen == hf.machine_resolv_conf(), host.name
