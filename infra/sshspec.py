"""How the operator's machine reaches one host over SSH, resolved, as plain data.

Below the parts that share it: the config resolves a host's `ssh:` settings to a
`SshSpec` (infra/config/ssh.py), the renderers turn one into OpenSSH argv, the Docker
provider's `ssh_opts` and pulumi-command's connection (infra/render/ssh.py), and the
dynamic providers get it back from their inputs (`from_props`) to open the host's
shared master (infra/providers/transport.py). Nothing here reads a file or the
environment: paths stay as the config wrote them (`~` included; OpenSSH expands it),
so a spec in the state is the same on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

DEFAULT_USER = "root"
DEFAULT_PORT = 22
PERSIST_S = 60
"""How long an idle master stays up (ControlPersist): long enough to carry one
preview or `up` from host to host, short enough that a changed host key or a stopped
sshd shows at the next command."""
MAX_PER_HOST = 4
"""Concurrent SSH sessions (and Docker API requests) per host and process: under
sshd's default `MaxSessions 10` with room for the Docker provider's own sessions."""
DOCKER_SOCKET = "/var/run/docker.sock"
"""The remote Docker socket when an ssh:// URL names no path (the Docker CLI's default)."""


@dataclass(frozen=True)
class Jump:
    """A bastion every connection to the host goes through (`ssh -W`)."""

    host: str
    port: int = DEFAULT_PORT
    user: str | None = None
    """None: the target host's user."""


@dataclass(frozen=True)
class SshSpec:
    """One host's resolved SSH settings (see infra/config/models/ssh.py for each)."""

    address: str
    user: str = DEFAULT_USER
    port: int = DEFAULT_PORT
    identity_file: str | None = None
    known_hosts_file: str | None = None
    strict: bool = True
    """Refuse an unknown or changed host key. With no `known_hosts_file`, OpenSSH's
    own default file (~/.ssh/known_hosts)."""
    jump: Jump | None = None
    options: tuple[tuple[str, str], ...] = ()
    """Extra `-o Key=Value` options, sorted by key."""
    persist_s: int = PERSIST_S
    max_per_host: int = MAX_PER_HOST
    mux: bool = False
    """Reached through the host's shared ControlMaster (the hosts whose Docker engine is
    an ssh:// URL); False: one plain connection per command, as before the transport."""

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.address}"

    def props(self) -> dict[str, Any]:
        """The spec as resource inputs: the keys HostFacts always had (`user`,
        `address`, `port`, `key_file` and `known_hosts` when set), then each newer key
        only where it differs from what those imply, so the inputs of a stack that
        sets none of them are what they were."""
        out: dict[str, Any] = {"user": self.user, "address": self.address, "port": self.port}
        if self.identity_file:
            out["key_file"] = self.identity_file
        if self.known_hosts_file:
            out["known_hosts"] = self.known_hosts_file
        # Before the model, a known_hosts file meant strict checking, none meant none.
        if self.strict != bool(self.known_hosts_file):
            out["strict"] = self.strict
        if self.jump is not None:
            jump: dict[str, Any] = {"host": self.jump.host, "port": self.jump.port}
            if self.jump.user:
                jump["user"] = self.jump.user
            out["jump"] = jump
        if self.options:
            out["options"] = dict(self.options)
        if self.persist_s != PERSIST_S:
            out["persist_s"] = self.persist_s
        if self.max_per_host != MAX_PER_HOST:
            out["max_per_host"] = self.max_per_host
        if self.mux:
            out["mux"] = True
        return out

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> SshSpec:
        """The spec back from `props()` (numbers may arrive as floats: int() them)."""
        known = props.get("known_hosts") or None
        jump = props.get("jump")
        return cls(
            address=str(props["address"]),
            user=str(props.get("user") or DEFAULT_USER),
            port=int(props.get("port") or DEFAULT_PORT),
            identity_file=props.get("key_file") or None,
            known_hosts_file=known,
            strict=bool(props.get("strict", bool(known))),
            jump=None
            if not jump
            else Jump(str(jump["host"]), int(jump.get("port") or DEFAULT_PORT), jump.get("user")),
            options=tuple(
                sorted((str(k), str(v)) for k, v in (props.get("options") or {}).items())
            ),
            persist_s=int(props.get("persist_s", PERSIST_S)),
            max_per_host=int(props.get("max_per_host", MAX_PER_HOST)),
            mux=bool(props.get("mux", False)),
        )


@dataclass(frozen=True)
class SshUrl:
    """The parts of an `ssh://[user@]host[:port][/socket]` Docker endpoint."""

    host: str
    user: str | None
    port: int | None
    socket: str


def parse_ssh_url(url: str) -> SshUrl:
    """An ssh:// Docker endpoint's parts; ValueError naming the URL when it is not one."""
    parts = urlsplit(url)
    if parts.scheme != "ssh" or not parts.hostname:
        raise ValueError(f"{url!r} is not an ssh://[user@]host[:port] URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number from 1 to 65535") from None
    return SshUrl(
        host=parts.hostname,
        user=parts.username or None,
        port=port,
        socket=parts.path if parts.path not in ("", "/") else DOCKER_SOCKET,
    )


def url_spec(url: str) -> SshSpec:
    """The spec of an ssh:// endpoint when nothing else is known of it (a caller with
    the URL only, as `scripts/recover` reading the state): its user and port, strict
    host keys against OpenSSH's default known_hosts, the shared master."""
    parts = parse_ssh_url(url)
    return SshSpec(
        address=parts.host,
        user=parts.user or DEFAULT_USER,
        port=parts.port or DEFAULT_PORT,
        strict=True,
        mux=True,
    )
