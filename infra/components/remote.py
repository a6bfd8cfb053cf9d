"""pulumi-command's SSH connection to a host (the launch, a job's scrape config).

Two forms. A host whose Docker engine is an ssh:// URL gets its resolved `ssh:`
settings (infra/config/ssh.py): its host key pinned from the stack's known_hosts,
the jump host as the one proxy hop, few dial retries, and no agent socket path (the
provider reads its own `SSH_AUTH_SOCK`: a path in the inputs changes with every CI
runner and makes a preview that is not a no-op). Any other host keeps the connection
it always had when it names a key file (the lab's stacks: a live unix-socket stack's
launch is not updated by this code); without one, the agent's socket path is no
longer an input either.

The known_hosts files are read here, once, while the program runs: pulumi-command has
no known_hosts option, only one pinned key (`host_key`); without it the Go client
ignores host keys. A strict host with no entry is refused by name before any
resource is registered.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command

from infra.config import ConfigError, Host, Preflight
from infra.render.ssh import ConnectionPieces, connection_pieces
from infra.sshspec import SshSpec

DIAL_ERROR_LIMIT = 3
"""Dial attempts before the command fails (the provider's default is 10, each up to
`per_dial_timeout`, 15 s: two and a half minutes for a host that is down). A
refused host key or a dead host is reported within a minute instead."""


@dataclass(frozen=True)
class SshLink:
    """How pulumi-command reaches one ssh:// host: its spec (for the key file) and the
    connection pieces with the pinned host key (and the bastion's)."""

    spec: SshSpec
    pieces: ConnectionPieces


class HostKeyError(ConfigError):
    """A strict host (or its bastion) with no entry in the known_hosts file: one line
    per host, shown as the config's problems are (before anything is registered)."""


def _known_hosts_text(spec: SshSpec) -> str:
    """The known_hosts file's text ('' when it does not exist: every host is then
    refused by name, with the file named)."""
    path = Path(os.path.expanduser(spec.known_hosts_file or "~/.ssh/known_hosts"))
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _missing(name: str, link: SshLink) -> list[str]:
    """What `link` lacks to pin its keys: the host's entry, the bastion's."""
    if not link.spec.strict:
        return []
    spec, out = link.spec, []
    where = spec.known_hosts_file or "~/.ssh/known_hosts"
    port = "" if spec.port == 22 else f" port {spec.port}"
    if link.pieces.host_key is None:
        out.append(f"host {name} ({spec.address}{port}): no key in {where}")
    if link.pieces.proxy is not None and "host_key" not in link.pieces.proxy:
        j = link.pieces.proxy
        out.append(f"host {name}'s jump host {j['host']} port {j['port']}: no key in {where}")
    return out


def ssh_links(hosts: Iterable[Host], spec_of: Callable[[Host], SshSpec]) -> dict[str, SshLink]:
    """The links of the hosts whose Docker engine is an ssh:// URL (by host name);
    HostKeyError naming every strict host (or bastion) the known_hosts file has no key
    for, and what to do."""
    links: dict[str, SshLink] = {}
    for host in hosts:
        spec = spec_of(host)
        if spec.mux:
            links[host.name] = SshLink(spec, connection_pieces(spec, _known_hosts_text(spec)))
    missing = [m for name, link in links.items() for m in _missing(name, link)]
    if missing:
        raise HostKeyError(
            [f"ssh.known_hosts_file: {m}" for m in missing]
            + [
                "the launch's SSH connection pins each ssh:// host's key (ssh.strict); "
                "allowed: an entry per host (ssh-keyscan, each fingerprint checked against "
                "the host's own: docs/operations.md, 'Host keys'), or ssh.strict: false"
            ]
        )
    return links


def _key(path: str) -> pulumi.Output[str]:
    return pulumi.Output.secret(Path(os.path.expanduser(path)).read_text())


def _proxy(link: SshLink) -> command.remote.ProxyConnectionArgs | None:
    p = link.pieces.proxy
    if p is None:
        return None
    key = link.spec.identity_file
    return command.remote.ProxyConnectionArgs(
        host=p["host"],
        port=p["port"],
        user=p["user"],
        host_key=p.get("host_key"),
        private_key=_key(key) if key else None,
        dial_error_limit=DIAL_ERROR_LIMIT,
    )


def ssh_connection(link: SshLink) -> command.remote.ConnectionArgs:
    """The connection of an ssh:// host: no agent socket path (the provider's own
    `SSH_AUTH_SOCK`), the key file when the spec names one, the pinned key, the proxy."""
    key = link.spec.identity_file
    return command.remote.ConnectionArgs(
        host=link.pieces.host,
        port=link.pieces.port,
        user=link.pieces.user,
        private_key=_key(key) if key else None,
        host_key=link.pieces.host_key,
        proxy=_proxy(link),
        dial_error_limit=DIAL_ERROR_LIMIT,
    )


def plain_connection(
    preflight: Preflight, host: Host | pulumi.Output[Host]
) -> command.remote.ConnectionArgs:
    """The connection of a host that is not ssh://: the configured key file (lab: the
    inputs it always had), else the agent of the provider's own environment."""
    address: pulumi.Input[str]
    port: pulumi.Input[int]
    user: pulumi.Input[str]
    if isinstance(host, Host):
        address, port, user = host.address, host.ssh_port, host.ssh_user
    else:
        address = host.apply(lambda h: h.address)
        port = host.apply(lambda h: h.ssh_port)
        user = host.apply(lambda h: h.ssh_user)
    key_file = preflight.ssh_private_key_file
    # Without a key file, no `agent_socket_path`: the provider reads its own
    # SSH_AUTH_SOCK, which is what it was given before, minus the path in the state.
    private_key = pulumi.Output.secret(Path(key_file).read_text()) if key_file else None
    return command.remote.ConnectionArgs(
        host=address, port=port, user=user, private_key=private_key
    )


def _one(
    preflight: Preflight, host: Host, links: Mapping[str, SshLink]
) -> command.remote.ConnectionArgs:
    link = links.get(host.name)
    return ssh_connection(link) if link is not None else plain_connection(preflight, host)


def _following(
    preflight: Preflight, host: pulumi.Output[Host], links: Mapping[str, SshLink]
) -> command.remote.ConnectionArgs:
    """A connection that follows the host the roster found, in a stack with ssh://
    hosts: each piece from that host's connection (every link was checked up front)."""

    def piece(name: str) -> pulumi.Output[Any]:
        return host.apply(lambda h: pulumi.get(_one(preflight, h, links), name))

    return command.remote.ConnectionArgs(
        host=piece("host"),
        port=piece("port"),
        user=piece("user"),
        private_key=piece("private_key"),
        host_key=piece("host_key"),
        proxy=piece("proxy"),
        dial_error_limit=DIAL_ERROR_LIMIT,
    )


def connection(
    preflight: Preflight,
    host: Host | pulumi.Output[Host],
    links: Mapping[str, SshLink] | None = None,
) -> command.remote.ConnectionArgs:
    """SSH connection for remote commands: the host's ssh link's when its Docker engine
    is ssh://, else the plain one. `host` may be known only once the roster is read
    (follow_master's launch): the connection then follows it."""
    known = links or {}
    if isinstance(host, Host):
        return _one(preflight, host, known)
    if known:
        return _following(preflight, host, known)
    return plain_connection(preflight, host)
