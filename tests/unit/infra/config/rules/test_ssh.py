"""infra.config.rules.ssh: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import problems

pytestmark = pytest.mark.unit


def test_ssh_hosts_without_known_hosts_are_refused(raw: dict[str, Any]) -> None:
    """ssh:// hosts with strict keys and no known_hosts file: refused, naming the hosts."""
    del raw["ssh"]
    assert problems(raw) == [
        "ssh.known_hosts_file: not set, and hosts ['gpu-01', 'gpu-02', 'gpu-03'] are "
        "reached over ssh:// with strict host keys; allowed: ssh.known_hosts_file (e.g. "
        "~/.ssh/known_hosts, its entries from ssh-keyscan checked against each host's "
        "fingerprint, docs/operations.md), or ssh.strict: false to check no host key"
    ]


def test_strict_false_lets_ssh_hosts_go_unchecked(raw: dict[str, Any]) -> None:
    """`ssh.strict: false` is the explicit way to check no host key."""
    raw["ssh"] = {"strict": False}
    assert parse_stack_config(raw).ssh_for(parse_stack_config(raw).hosts[0]).strict is False


def test_older_known_hosts_key_counts(raw: dict[str, Any]) -> None:
    """`preflight.ssh_known_hosts_file` still satisfies the ssh:// rule."""
    raw["ssh"] = {}
    raw["preflight"] = {"ssh_known_hosts_file": "~/.ssh/kh"}
    cfg = parse_stack_config(raw)
    assert cfg.ssh_for(cfg.hosts[0]).known_hosts_file == "~/.ssh/kh"


def test_unix_socket_hosts_need_no_known_hosts(raw: dict[str, Any]) -> None:
    """A stack without ssh:// hosts is not asked for a known_hosts file."""
    del raw["ssh"]
    for i, h in enumerate(raw["hosts"]):
        h["docker_host"] = f"unix:///run/h{i}.sock"
    assert parse_stack_config(raw).ssh.known_hosts_file is None


def test_known_hosts_alias_contradiction(raw: dict[str, Any]) -> None:
    """ssh.known_hosts_file and preflight.ssh_known_hosts_file that differ: both named."""
    raw["preflight"] = {"ssh_known_hosts_file": "/etc/ssh/kh"}
    assert problems(raw) == [
        "ssh.known_hosts_file: '~/.ssh/known_hosts' but preflight.ssh_known_hosts_file: "
        "'/etc/ssh/kh'; allowed: one of the two, or both the same (ssh.known_hosts_file is "
        "the newer name and wins)"
    ]


def test_identity_alias_contradiction(raw: dict[str, Any]) -> None:
    """ssh.identity_file and preflight.ssh_private_key_file that differ: both named."""
    raw["ssh"]["identity_file"] = "~/.ssh/a"
    raw["preflight"] = {"ssh_private_key_file": "~/.ssh/b"}
    assert problems(raw) == [
        "ssh.identity_file: '~/.ssh/a' but preflight.ssh_private_key_file: '~/.ssh/b'; "
        "allowed: one of the two, or both the same (ssh.identity_file is the newer name "
        "and wins)"
    ]


def test_host_user_alias_contradiction(raw: dict[str, Any]) -> None:
    """hosts[].ssh.user and hosts[].ssh_user that differ: both named."""
    raw["hosts"][1] |= {"ssh_user": "ops", "ssh": {"user": "dss"},
                        "docker_host": "ssh://gpu-02"}  # fmt: skip
    assert problems(raw) == [
        "hosts[1].ssh.user: 'dss' but hosts[1].ssh_user: 'ops'; allowed: one of the two, "
        "or both the same (hosts[1].ssh.user is the newer name and wins)"
    ]


def test_host_port_alias_contradiction(raw: dict[str, Any]) -> None:
    """hosts[].ssh.port and hosts[].ssh_port that differ: both named."""
    raw["hosts"][2] |= {"ssh_port": 2200, "ssh": {"port": 2222}}
    assert problems(raw) == [
        "hosts[2].ssh.port: 2222 but hosts[2].ssh_port: 2200; allowed: one of the two, or "
        "both the same (hosts[2].ssh.port is the newer name and wins)"
    ]


def test_url_user_differs_from_the_ssh_user(raw: dict[str, Any]) -> None:
    """An ssh:// URL naming root while ssh.user says dss: refused, naming both keys."""
    raw["ssh"]["user"] = "dss"
    raw["hosts"] = raw["hosts"][:1]
    raw["training"]["launch_mode"] = "no_ssh"
    assert problems(raw) == [
        "hosts[0].docker_host: 'ssh://root@gpu-01' names user 'root' but ssh.user says "
        "'dss'; allowed: the same user in both (one SSH connection per host), or no user "
        "in the URL"
    ]


def test_url_port_differs_from_the_ssh_port(raw: dict[str, Any]) -> None:
    """An ssh:// URL naming port 2200 while the host's ssh_port is 22: refused."""
    raw["hosts"][0] |= {"docker_host": "ssh://root@gpu-01:2200", "ssh_port": 22}
    assert problems(raw) == [
        "hosts[0].docker_host: 'ssh://root@gpu-01:2200' names port 2200 but "
        "hosts[0].ssh_port says 22; allowed: the same port in both (one SSH connection "
        "per host), or no port in the URL"
    ]


def test_ssh_url_without_a_host(raw: dict[str, Any]) -> None:
    """An ssh:// docker_host with no host part is refused."""
    raw["hosts"][0]["docker_host"] = "ssh://"
    assert problems(raw) == [
        "hosts[0].docker_host: 'ssh://' is not an ssh:// URL; allowed: ssh://[user@]host[:port]"
    ]


def test_strict_false_with_a_known_hosts_file(raw: dict[str, Any]) -> None:
    """strict: false and a known_hosts file for the same host contradict: both named."""
    raw["hosts"][1]["ssh"] = {"strict": False}
    assert problems(raw) == [
        "hosts[1].ssh.strict: false but ssh.known_hosts_file: '~/.ssh/known_hosts' for host "
        "'gpu-02'; allowed: strict host keys with a known_hosts file, or strict: false "
        "without one (no key is checked then)"
    ]
