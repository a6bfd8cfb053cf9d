"""infra.sshspec: a host's SSH settings as resource inputs and back, and ssh:// URLs."""

from __future__ import annotations

import pytest

from infra.sshspec import Jump, SshSpec, parse_ssh_url, url_spec

pytestmark = pytest.mark.unit


def test_props_of_a_stack_without_newer_keys_are_the_older_inputs() -> None:
    """A key file and known_hosts only: exactly the keys HostFacts always had."""
    spec = SshSpec("10.0.0.1", identity_file="/k", known_hosts_file="/kh", strict=True)
    assert spec.props() == {
        "user": "root", "address": "10.0.0.1", "port": 22, "key_file": "/k", "known_hosts": "/kh"
    }  # fmt: skip


def test_props_without_known_hosts_are_the_older_unchecked_inputs() -> None:
    """No file and not strict: the older inputs, which meant no key checked."""
    assert SshSpec("h", strict=False).props() == {"user": "root", "address": "h", "port": 22}


def test_props_round_trip_every_newer_key() -> None:
    """Every newer key survives props() -> from_props() (ints sent as floats too)."""
    spec = SshSpec(
        "h", user="dss", port=2222, known_hosts_file="~/.ssh/kh", strict=True,
        jump=Jump("b", 2022, "j"), options=(("Ciphers", "aes128-ctr"),), persist_s=90,
        max_per_host=2, mux=True,
    )  # fmt: skip
    wire = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in spec.props().items()}  # fmt: skip
    assert SshSpec.from_props(wire) == spec


def test_strict_without_a_file_is_kept_in_props() -> None:
    """Strict against OpenSSH's default file differs from the older meaning: it is written."""
    assert SshSpec("h", strict=True).props()["strict"] is True


def test_parse_ssh_url_parts() -> None:
    """User, host, port and the remote socket of an ssh:// URL."""
    url = parse_ssh_url("ssh://dss@gpu-01:2222/run/docker.sock")
    assert (url.user, url.host, url.port, url.socket) == ("dss", "gpu-01", 2222,
                                                          "/run/docker.sock")  # fmt: skip


def test_parse_ssh_url_default_socket() -> None:
    """No path: Docker's default socket."""
    assert parse_ssh_url("ssh://gpu-01").socket == "/var/run/docker.sock"


def test_url_spec_is_strict_and_shared() -> None:
    """A URL alone: its user and port, strict keys, the shared master."""
    assert url_spec("ssh://dss@gpu-01:2222") == SshSpec(
        "gpu-01", user="dss", port=2222, strict=True, mux=True
    )


def test_parse_ssh_url_refuses_another_scheme() -> None:
    """A unix:// URL is not an ssh:// one; the error names it."""
    with pytest.raises(ValueError, match=r"'unix:///x\.sock' is not an ssh://"):
        parse_ssh_url("unix:///x.sock")
