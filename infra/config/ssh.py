"""A host's SSH settings, resolved from the `ssh:` block, the host's own `ssh:` and the
older keys that stay as aliases.

Which wins, most specific first: `hosts[].ssh.<key>`, then the host's older key
(`hosts[].ssh_user`, `hosts[].ssh_port`), then `ssh.<key>`, then the stack's older key
(`preflight.ssh_private_key_file`, `preflight.ssh_known_hosts_file`), then the user and
port of an ssh:// `docker_host`, then the default. Two keys of the same level that
both say something different are refused (infra/config/rules/ssh.py names both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.sshspec import DEFAULT_PORT, DEFAULT_USER, Jump, SshSpec, SshUrl, parse_ssh_url

if TYPE_CHECKING:
    # Types only: the rules import this module, and the models import the rules.
    from infra.config.models.cluster import Host
    from infra.config.models.services import Preflight
    from infra.config.models.ssh import Ssh


@dataclass(frozen=True)
class Source:
    """A resolved value and the key it came from (`default` when none set it)."""

    key: str
    value: Any


def _first(*candidates: tuple[str, Any], default: Any) -> Source:
    for key, value in candidates:
        if value is not None:
            return Source(key, value)
    return Source("default", default)


def _older(host: Host, name: str) -> Any:
    """A host's older key when the stack file sets it (its default is no setting)."""
    return getattr(host, name) if name in host.model_fields_set else None


def docker_url(host: Host) -> SshUrl | None:
    """The parts of the host's ssh:// `docker_host`; None for another scheme or a URL
    that is not one (infra/config/rules/ssh.py refuses that)."""
    if not host.docker_host.startswith("ssh://"):
        return None
    try:
        return parse_ssh_url(host.docker_host)
    except ValueError:
        return None


def user_source(ssh: Ssh, host: Host, i: int) -> Source:
    url = u.user if (u := docker_url(host)) else None
    return _first(
        (f"hosts[{i}].ssh.user", host.ssh.user),
        (f"hosts[{i}].ssh_user", _older(host, "ssh_user")),
        ("ssh.user", ssh.user),
        (f"hosts[{i}].docker_host", url),
        default=DEFAULT_USER,
    )


def port_source(ssh: Ssh, host: Host, i: int) -> Source:
    url = u.port if (u := docker_url(host)) else None
    return _first(
        (f"hosts[{i}].ssh.port", host.ssh.port),
        (f"hosts[{i}].ssh_port", _older(host, "ssh_port")),
        ("ssh.port", ssh.port),
        (f"hosts[{i}].docker_host", url),
        default=DEFAULT_PORT,
    )


def known_hosts_source(ssh: Ssh, preflight: Preflight, host: Host, i: int) -> Source:
    return _first(
        (f"hosts[{i}].ssh.known_hosts_file", host.ssh.known_hosts_file),
        ("ssh.known_hosts_file", ssh.known_hosts_file),
        ("preflight.ssh_known_hosts_file", preflight.ssh_known_hosts_file),
        default=None,
    )


def strict_source(ssh: Ssh, host: Host, i: int) -> Source:
    return _first((f"hosts[{i}].ssh.strict", host.ssh.strict), ("ssh.strict", ssh.strict),
                  default=True)  # fmt: skip


def host_ssh(ssh: Ssh, preflight: Preflight, host: Host, i: int = 0) -> SshSpec:
    """Host `host` (`hosts[i]`)'s resolved SSH settings. Strict host keys need a
    known_hosts file: without one (a unix-socket stack's facts, as before the model)
    no key is checked; a stack with ssh:// hosts and no file is refused instead."""
    known = known_hosts_source(ssh, preflight, host, i).value
    jump = host.ssh.jump or ssh.jump
    identity = _first(
        ("", host.ssh.identity_file),
        ("", ssh.identity_file),
        ("", preflight.ssh_private_key_file),
        default=None,
    ).value
    return SshSpec(
        address=host.address,
        user=user_source(ssh, host, i).value,
        port=port_source(ssh, host, i).value,
        identity_file=identity,
        known_hosts_file=known,
        strict=bool(strict_source(ssh, host, i).value) and known is not None,
        jump=None if jump is None else Jump(jump.host, jump.port, jump.user),
        options=tuple(sorted({**ssh.options, **(host.ssh.options or {})}.items())),
        persist_s=ssh.persist_s,
        max_per_host=ssh.max_per_host,
        mux=host.docker_host.startswith("ssh://"),
    )
