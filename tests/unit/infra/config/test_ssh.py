"""infra.config.ssh and the ssh models: which SSH setting wins, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse_stack_config
from infra.sshspec import Jump

pytestmark = pytest.mark.unit


def _spec(raw: dict[str, Any], i: int = 0) -> Any:
    cfg = parse_stack_config(raw)
    return cfg.ssh_for(cfg.hosts[i])


def test_defaults_for_an_ssh_host(raw: dict[str, Any]) -> None:
    """With only a known_hosts file: root, port 22, strict, the shared master."""
    spec = _spec(raw)
    assert (spec.user, spec.port, spec.strict, spec.mux) == ("root", 22, True, True)


def test_host_ssh_wins_over_the_older_host_key(raw: dict[str, Any]) -> None:
    """hosts[].ssh.port wins over an equal hosts[].ssh_port and over ssh.port."""
    raw["ssh"]["port"] = 2200
    raw["hosts"][0] |= {"ssh_port": 2222, "ssh": {"port": 2222}}
    assert _spec(raw).port == 2222


def test_older_host_key_wins_over_the_stack_block(raw: dict[str, Any]) -> None:
    """hosts[].ssh_port, a per-host key, wins over the stack's ssh.port."""
    raw["ssh"]["port"] = 2200
    raw["hosts"][0]["ssh_port"] = 2222
    assert _spec(raw).port == 2222


def test_stack_block_wins_over_the_url(raw: dict[str, Any]) -> None:
    """ssh.user applies to a host whose URL names no user."""
    raw["ssh"]["user"] = "dss"
    for h in raw["hosts"]:
        h["docker_host"] = f"ssh://{h['name']}"
    assert _spec(raw).user == "dss"


def test_url_user_and_port_apply_when_nothing_else_says(raw: dict[str, Any]) -> None:
    """`ssh://dss@gpu-01:2201` gives user dss and port 2201 to every path."""
    raw["hosts"][0]["docker_host"] = "ssh://dss@gpu-01:2201"
    spec = _spec(raw)
    assert (spec.user, spec.port) == ("dss", 2201)


def test_host_options_add_to_and_override_the_stack_options(raw: dict[str, Any]) -> None:
    """hosts[].ssh.options merge over ssh.options, sorted by key."""
    raw["ssh"]["options"] = {"Compression": "no", "Ciphers": "aes128-ctr"}
    raw["hosts"][0]["ssh"] = {"options": {"Compression": "yes"}}
    assert _spec(raw).options == (("Ciphers", "aes128-ctr"), ("Compression", "yes"))


def test_host_jump_overrides_the_stack_jump(raw: dict[str, Any]) -> None:
    """A host's own bastion replaces the stack's."""
    raw["ssh"]["jump"] = {"host": "bastion-a"}
    raw["hosts"][1]["ssh"] = {"jump": {"host": "bastion-b", "port": 2022, "user": "j"}}
    assert (_spec(raw, 0).jump, _spec(raw, 1).jump) == (
        Jump("bastion-a", 22, None),
        Jump("bastion-b", 2022, "j"),
    )


def test_unix_host_without_known_hosts_is_not_strict(raw: dict[str, Any]) -> None:
    """A unix-socket host with no known_hosts file: no key checked, as before the model."""
    del raw["ssh"]
    for i, h in enumerate(raw["hosts"]):
        h["docker_host"] = f"unix:///run/h{i}.sock"
    spec = _spec(raw)
    assert (spec.strict, spec.mux) == (False, False)


def test_an_option_the_program_sets_is_refused(raw: dict[str, Any]) -> None:
    """ssh.options cannot set ControlPath (the shared master's path)."""
    raw["ssh"]["options"] = {"ControlPath": "/tmp/x"}
    with pytest.raises(ConfigError, match=r"ssh\.options: option 'ControlPath' is set"):
        parse_stack_config(raw)


def test_an_option_that_is_no_keyword_is_refused(raw: dict[str, Any]) -> None:
    """An option key with a space or '=' is refused (it would be a second option)."""
    raw["hosts"][0]["ssh"] = {"options": {"Ciphers=x -o Foo": "y"}}
    with pytest.raises(ConfigError, match="allowed: an ssh_config keyword"):
        parse_stack_config(raw)


def test_ssh_settings_stay_out_of_the_cluster_digest(raw: dict[str, Any]) -> None:
    """How this machine reaches the hosts is not what the cluster deployed: a job's
    cluster digest is the same with or without the ssh settings."""
    before = parse_stack_config(raw).cluster_digest
    raw["ssh"]["persist_s"] = 120
    raw["hosts"][0]["ssh"] = {"user": "root"}
    assert parse_stack_config(raw).cluster_digest == before
