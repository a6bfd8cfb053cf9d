"""The host data plane on the lab with the real engine: the training tasks on Swarm's
`host` network, the hostfile and rendezvous on the hosts' addresses, gloo over the
hosts' own interface, and a stack that is a no-op after `up` (preview and refresh).
Tests run in file order against one deployed stack.

In the acceptance suite, not the test command (it was tests/engine/test_dataplane.py,
2.6 min there): the test command keeps the host data plane's rendering under unit
tests and golden files; the acceptance suite deploys it here, and trains, loses and
takes over a master on it in test_takeover_host.py."""

from __future__ import annotations

import ipaddress
import subprocess
import time
from typing import Any

import pytest

from harness.configs import dev_config, on_data_plane
from harness.lab import docker, logged_steps
from harness.stack import Stack
from lab import config as c
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.acceptance

RUN = "hostplane"
LAB_NET = ipaddress.ip_network("10.213.0.0/24")
# Swarm and the hosts' own sshd: connections that are not training traffic.
NOT_TRAINING = {22, 2377, 7946}


@pytest.fixture(scope="module")
def deployed(lab: dict[str, Any], make_stack: MakeStack) -> Stack:
    """The dev stack on the host data plane, brought up once for the module."""
    cfg = on_data_plane(dev_config(run_name=RUN, steps=2000, checkpoint_every=10), "host")
    stack = make_stack("test-hostplane", cfg, {"wandb_api_key": "lab-hostplane"})
    stack.pulumi("up", "--yes", "--skip-preview")
    return stack


def training_containers(i: int) -> list[str]:
    """Ids of lab host i's running ds-master / ds-worker containers."""
    out = docker(i, "ps", "-q", "--filter", "label=com.docker.swarm.service.name")
    ids = out.split()
    return [
        cid
        for cid in ids
        if docker(
            i, "inspect", "-f", '{{index .Config.Labels "com.docker.swarm.service.name"}}', cid
        ).strip()
        in ("ds-master", "ds-worker")
    ]


def test_training_tasks_are_on_the_host_network(deployed: Stack) -> None:
    """Each host's training task runs in the host's own network namespace."""
    for i in (1, 2):
        ctrs = training_containers(i)
        assert len(ctrs) == 1, f"{c.host_name(i)}: training containers {ctrs}"
        mode = docker(i, "inspect", "-f", "{{.HostConfig.NetworkMode}}", ctrs[0]).strip()
        assert mode == "host", f"{c.host_name(i)}: network mode {mode!r}"


def test_hostfile_lists_the_hosts_addresses(deployed: Stack) -> None:
    """The hostfile and the rendezvous address are the hosts' own, master first."""
    out = deployed.outputs()
    lines = out["hostfile"].splitlines()
    assert lines == [f"{c.host_addr(1)} slots=1", f"{c.host_addr(2)} slots=1"], lines
    assert out["masterAddress"] == c.host_addr(1)


def test_training_runs_over_the_hosts_interface(deployed: Stack) -> None:
    """Steps advance, and the ranks' TCP connections join the two hosts' own addresses
    (no overlay address in them): gloo and the rendezvous use the host data plane."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(logged_steps(RUN)) < 5:
        time.sleep(5)
    assert len(logged_steps(RUN)) >= 5, f"{len(logged_steps(RUN))} steps after 600 s"
    ss = subprocess.run(
        ["ip", "netns", "exec", c.netns_name(2), "ss", "-tnH", "state", "established"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    peers = []
    for line in ss.splitlines():
        local, remote = line.split()[-2:]
        (la, lp), (ra, rp) = (x.rsplit(":", 1) for x in (local, remote))
        if {int(lp), int(rp)} & NOT_TRAINING:
            continue
        peers.append((ipv4(la), ipv4(ra)))
    assert peers, f"no training connection on {c.host_name(2)}:\n{ss}"
    assert all(ipaddress.ip_address(a) in LAB_NET for pair in peers for a in pair), peers
    assert (c.host_addr(2), c.host_addr(1)) in peers, peers


def test_a_peer_address_is_named_without_dns(deployed: Stack) -> None:
    """In the master's task (host network: its host's /etc/hosts) the worker host's
    address resolves to its name at once, as the runbook's step 0 asks of real hosts:
    rank 0's reverse lookups never wait for a resolver (docs/dataplane.md, "Reverse DNS
    on the host network"; the lab's hosts file, lab/hostfiles.py)."""
    (ctr,) = training_containers(1)
    out = docker(1, "exec", ctr, "getent", "hosts", c.host_addr(2), timeout=30)
    assert out.split() == [c.host_addr(2), c.host_name(2)], out


def ipv4(text: str) -> str:
    """An address as `ss` prints it (`10.0.0.1`, `[::ffff:10.0.0.1]`), as IPv4 text."""
    addr = ipaddress.ip_address(text.strip("[]"))
    mapped = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) else None
    return str(mapped or addr)


def test_second_preview_has_no_changes(deployed: Stack) -> None:
    """A preview right after up proposes nothing (the host network's id included)."""
    deployed.pulumi("preview", "--expect-no-changes")


def test_refresh_preview_only_finds_no_drift(deployed: Stack) -> None:
    """The CI drift check exits 0 on the host data plane."""
    deployed.pulumi("refresh", "--preview-only", "--expect-no-changes")
