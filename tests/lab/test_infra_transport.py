"""infra.providers.transport against the lab's real sshd's (issue 45, C2): one handshake
for many Docker clients, a changed host key refused by name, a stopped sshd named.

Each test first ends the host's master (`ssh -O exit`): a live master would carry the
next connection without a handshake and hide a changed key or a stopped sshd.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import sshd
from infra.providers import transport
from infra.providers.errors import TransportError
from infra.render.ssh import control_argv
from infra.sshspec import SshSpec
from lab import config as c
from tests.lab.conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]

HOST = 2
CLIENTS = 6


def _spec(lab: Lab, known_hosts: Path | None = None) -> SshSpec:
    """How the transport reaches lab host HOST: root, the lab key, strict host keys."""
    return SshSpec(
        address=c.host_addr(HOST),
        user="root",
        identity_file=str(lab.paths.ssh_key),
        known_hosts_file=str(known_hosts or lab.paths.known_hosts),
        strict=True,
        mux=True,
    )


def _url() -> str:
    return f"ssh://root@{c.host_addr(HOST)}"


def _exit_master(spec: SshSpec) -> None:
    """End the host's master if one runs (its absence is fine)."""
    ctl = transport.control_path(spec, _url())
    subprocess.run(control_argv(spec, ctl, "exit"), capture_output=True, timeout=30, check=False)


def _accepted() -> int:
    """How many logins host HOST's sshd has accepted so far."""
    return len(sshd.logins(HOST))


@pytest.fixture
def fresh(bare_lab: Lab) -> Iterator[Lab]:
    """No master for host HOST and nothing cached in this process, before and after."""
    _exit_master(_spec(bare_lab))
    transport.forget()
    yield bare_lab
    _exit_master(_spec(bare_lab))
    transport.forget()


def test_many_clients_one_handshake(fresh: Lab) -> None:
    """Six Docker clients (as six processes would make them) over one master: the
    host's sshd logs one accepted login, and each client reaches host HOST's engine."""
    before = _accepted()
    for _ in range(CLIENTS):
        transport.forget()  # a new process: nothing cached, the master on disk is shared
        client = transport.docker_client(_url(), _spec(fresh))
        assert client.info()["Name"] == c.host_name(HOST), "reached another engine"
    assert _accepted() - before == 1, f"{c.host_name(HOST)}: sshd.log"


def test_changed_host_key_is_refused_by_name(fresh: Lab, tmp_path: Path) -> None:
    """known_hosts holding another key for the host: TransportError naming the host."""
    key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kind, blob = (tmp_path / "other.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"{c.host_addr(HOST)} {kind} {blob}\n")
    with pytest.raises(TransportError) as e:
        transport.docker_client(_url(), _spec(fresh, known))
    assert e.value.host == c.host_addr(HOST) and e.value.url == _url()
    assert "Host key verification failed" in str(e.value)


def test_stopped_sshd_is_a_transport_error_naming_the_host(fresh: Lab) -> None:
    """sshd of host HOST stopped: the next client fails naming the host and ssh's line;
    sshd is started again afterwards in the host's namespaces."""
    with sshd.stopped(HOST):
        with pytest.raises(TransportError) as e:
            transport.docker_client(_url(), _spec(fresh))
        assert e.value.host == c.host_addr(HOST)
        assert "Connection refused" in e.value.detail, e.value.detail
