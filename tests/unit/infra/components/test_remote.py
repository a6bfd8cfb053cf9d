"""infra.components.remote: pulumi-command's connection to a host (pinned host key,
proxy, no agent path) and the refusal of a host with no key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command
import pytest
from pulumi.runtime.sync_await import _sync_await

from infra.components.remote import (
    DIAL_ERROR_LIMIT,
    HostKeyError,
    connection,
    plain_connection,
    ssh_connection,
    ssh_links,
)
from infra.config import StackConfig, parse_stack_config
from tests.unit.infra.samples import golden_host_key, small_config

pytestmark = pytest.mark.unit


def _cfg(**ssh: Any) -> StackConfig:
    raw: dict[str, Any] = small_config()
    raw["ssh"] = {**raw["ssh"], **ssh}
    return parse_stack_config(raw)


def test_each_ssh_host_pins_its_key_from_known_hosts() -> None:
    cfg = _cfg()
    links = ssh_links(cfg.hosts, cfg.ssh_for)
    conn = ssh_connection(links["gpu-02"])
    assert conn.host_key == golden_host_key("10.0.0.2")


def test_an_ssh_connection_has_no_agent_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider reads its own SSH_AUTH_SOCK: none of the program's reaches the state."""
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    cfg = _cfg()
    conn = ssh_connection(ssh_links(cfg.hosts, cfg.ssh_for)["gpu-01"])
    assert conn.agent_socket_path is None


def test_an_ssh_connection_gives_up_after_few_dials() -> None:
    cfg = _cfg()
    conn = ssh_connection(ssh_links(cfg.hosts, cfg.ssh_for)["gpu-01"])
    assert conn.dial_error_limit == DIAL_ERROR_LIMIT < 10


def test_a_host_with_no_key_is_refused_by_name(ssh_home: Path) -> None:
    (ssh_home / ".ssh" / "known_hosts").write_text(f"10.0.0.1 {golden_host_key('10.0.0.1')}\n")
    cfg = _cfg()
    with pytest.raises(HostKeyError) as err:
        ssh_links(cfg.hosts, cfg.ssh_for)
    said = str(err.value)
    assert "host gpu-02 (10.0.0.2)" in said and "host gpu-03 (10.0.0.3)" in said
    assert "gpu-01" not in said and "~/.ssh/known_hosts" in said


def test_a_missing_known_hosts_file_refuses_every_host(ssh_home: Path) -> None:
    (ssh_home / ".ssh" / "known_hosts").unlink()
    cfg = _cfg()
    with pytest.raises(HostKeyError, match=r"(?s)host gpu-01 .*host gpu-02 .*host gpu-03"):
        ssh_links(cfg.hosts, cfg.ssh_for)


def test_not_strict_pins_no_key(ssh_home: Path) -> None:
    (ssh_home / ".ssh" / "known_hosts").unlink()
    raw: dict[str, Any] = small_config()
    raw["ssh"] = {"strict": False}
    cfg = parse_stack_config(raw)
    conn = ssh_connection(ssh_links(cfg.hosts, cfg.ssh_for)["gpu-01"])
    assert conn.host_key is None


def test_the_jump_host_is_the_proxy_with_its_own_key(ssh_home: Path) -> None:
    with (ssh_home / ".ssh" / "known_hosts").open("a") as f:
        f.write("[bastion]:2222 ssh-ed25519 bastion-key\n")
    cfg = _cfg(jump={"host": "bastion", "port": 2222, "user": "hop"})
    proxy = ssh_connection(ssh_links(cfg.hosts, cfg.ssh_for)["gpu-01"]).proxy
    assert isinstance(proxy, command.remote.ProxyConnectionArgs)
    assert (proxy.host, proxy.port, proxy.user) == ("bastion", 2222, "hop")
    assert proxy.host_key == "ssh-ed25519 bastion-key"
    assert proxy.agent_socket_path is None


def test_a_jump_host_with_no_key_is_refused_by_name() -> None:
    cfg = _cfg(jump={"host": "bastion"})
    with pytest.raises(HostKeyError, match="jump host bastion port 22: no key"):
        ssh_links(cfg.hosts, cfg.ssh_for)


def test_hosts_that_are_not_ssh_get_no_link(dev_unix_raw: dict[str, Any]) -> None:
    """The lab's unix-socket hosts keep the connection they always had."""
    cfg = parse_stack_config(dev_unix_raw)
    assert ssh_links(cfg.hosts, cfg.ssh_for) == {}


def test_a_plain_connection_without_a_key_file_has_no_agent_path(
    dev_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    dev_raw.setdefault("preflight", {})["ssh_private_key_file"] = None
    cfg = parse_stack_config(dev_raw)
    conn = plain_connection(cfg.preflight, cfg.master)
    assert conn.agent_socket_path is None and conn.private_key is None


def test_a_host_known_only_later_follows_its_ssh_link(mocks: Any) -> None:
    """follow_master: the connection's pieces are the host's the roster found."""
    cfg = _cfg()
    links = ssh_links(cfg.hosts, cfg.ssh_for)
    conn = connection(cfg.preflight, pulumi.Output.from_input(cfg.hosts[2]), links)
    both = pulumi.Output.all(conn.host, conn.host_key)
    assert _sync_await(both.future()) == ["10.0.0.3", golden_host_key("10.0.0.3")]
