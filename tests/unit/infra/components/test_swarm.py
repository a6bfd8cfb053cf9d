"""infra.components.swarm: the Docker provider's ssh_opts and the dynamic resources'
`ssh_hosts`, from the ssh:// hosts' settings; endpoints never change."""

from __future__ import annotations

from typing import Any

import pytest

from infra.components.swarm import endpoint, provider_args, ssh_hosts, ssh_prop, ssh_specs
from infra.config import StackConfig, parse_stack_config
from infra.render.ssh import CONTROL_PATH, docker_ssh_opts
from tests.unit.infra.samples import small_config

pytestmark = pytest.mark.unit


def _cfg() -> StackConfig:
    raw: dict[str, Any] = small_config()
    raw["ssh"] = {**raw["ssh"], "jump": {"host": "bastion"}, "identity_file": "~/.ssh/dss"}
    return parse_stack_config(raw)


def test_an_ssh_engine_gets_the_hosts_ssh_opts() -> None:
    """The same key, known_hosts, jump host and shared master as every other path."""
    cfg = _cfg()
    host = cfg.hosts[0]
    args = provider_args(host, cfg.ssh_for(host))
    assert args["ssh_opts"] == docker_ssh_opts(cfg.ssh_for(host))
    assert f"ControlPath={CONTROL_PATH}" in args["ssh_opts"]


def test_the_provider_host_stays_the_url() -> None:
    cfg = _cfg()
    host = cfg.hosts[0]
    assert provider_args(host, cfg.ssh_for(host))["host"] == host.docker_host


def test_no_machine_path_in_ssh_opts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`~` and `%C` as the config wrote them: the state is the same on every machine."""
    monkeypatch.setenv("HOME", "/home/someone")
    cfg = _cfg()
    opts = " ".join(provider_args(cfg.hosts[0], cfg.ssh_for(cfg.hosts[0]))["ssh_opts"])
    assert "/home/someone" not in opts and "~/.ssh/dss" in opts


def test_without_settings_the_old_ssh_opts_stay() -> None:
    cfg = _cfg()
    assert provider_args(cfg.hosts[0])["ssh_opts"] == ["-o", "BatchMode=yes", "-p", "22"]


def test_ssh_hosts_are_keyed_by_endpoint_url() -> None:
    cfg = _cfg()
    got = ssh_hosts(cfg.hosts, ssh_specs(cfg.hosts, cfg.ssh_for))
    assert set(got) == {h.docker_host for h in cfg.hosts}
    assert got[cfg.hosts[1].docker_host] == cfg.ssh_for(cfg.hosts[1]).props()


def test_unix_socket_hosts_add_no_input(dev_unix_raw: dict[str, Any]) -> None:
    """A stack without ssh:// hosts keeps the inputs it had: no `ssh_hosts` key."""
    cfg = parse_stack_config(dev_unix_raw)
    assert ssh_prop(ssh_hosts(cfg.hosts, ssh_specs(cfg.hosts, cfg.ssh_for))) == {}


def test_the_endpoint_holds_no_ssh_settings() -> None:
    """SwarmNode and SwarmInit replace on `endpoint`: the settings stay out of it."""
    cfg = _cfg()
    assert endpoint(cfg.hosts[0]) == {"url": cfg.hosts[0].docker_host}
