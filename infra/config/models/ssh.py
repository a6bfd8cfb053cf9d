"""How the operator's machine reaches the hosts over SSH: one block per stack, and per
host where a host differs (infra/config/ssh.py resolves the two with the older keys)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from infra.config.models.base import MODEL_CONFIG, Port
from infra.sshspec import MAX_PER_HOST, PERSIST_S


class _Model(BaseModel):
    model_config = MODEL_CONFIG


# What the program sets itself on every OpenSSH path (infra/render/ssh.py): an extra
# option naming one of these would make the paths differ or break the shared master.
OWNED_OPTIONS = (
    "BatchMode",
    "ControlMaster",
    "ControlPath",
    "ControlPersist",
    "HostName",
    "IdentitiesOnly",
    "IdentityFile",
    "Port",
    "ProxyCommand",
    "ProxyJump",
    "StrictHostKeyChecking",
    "User",
    "UserKnownHostsFile",
)
_OPTION_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


class SshJump(_Model):
    """A bastion: every connection to the hosts goes through it (`ssh -W`), with the
    same key, known_hosts and strictness as the hosts."""

    host: str
    """The bastion's address or DNS name."""
    port: Port = 22
    """Its SSH port. Default 22."""
    user: str | None = None
    """Its SSH user. Default: the host's SSH user."""


def _options(v: dict[str, str] | None) -> dict[str, str] | None:
    for key, value in (v or {}).items():
        if not _OPTION_KEY.match(key):
            raise ValueError(f"option {key!r} is not allowed; allowed: an ssh_config keyword")
        if key.lower() in {o.lower() for o in OWNED_OPTIONS}:
            raise ValueError(
                f"option {key!r} is set by the program; allowed: any ssh_config keyword "
                f"but {', '.join(OWNED_OPTIONS)} (use the ssh block's own keys)"
            )
        if "\n" in value or not value.strip():
            raise ValueError(f"option {key!r}: value {value!r}; allowed: one non-empty line")
    return v


class Ssh(_Model):
    """How the operator's machine reaches every host: host facts, the launch, the Docker
    engines of ssh:// hosts. Each key is overridden per host by `hosts[].ssh`."""

    user: str | None = None
    """SSH user (`hosts[].ssh_user` is its older per-host name). Default: the user of
    an ssh:// `docker_host`, else `root`."""
    port: Port | None = None
    """SSH port (`hosts[].ssh_port` is its older per-host name). Default: the port of
    an ssh:// `docker_host`, else 22."""
    identity_file: str | None = None
    """Private key file, `~` allowed (`preflight.ssh_private_key_file` is its older
    name). Default: the operator's ssh agent and default keys."""
    known_hosts_file: str | None = None
    """known_hosts the host keys are checked against, `~` allowed
    (`preflight.ssh_known_hosts_file` is its older name). Required with ssh:// hosts
    unless `strict` is false. Default none."""
    strict: bool = True
    """Refuse a host whose key is unknown or changed, naming it. `false` checks no
    key at all (never with a known_hosts_file). Default true."""
    jump: SshJump | None = None
    """A bastion every connection goes through. Default none (direct)."""
    options: dict[str, str] = {}
    """Extra ssh_config options (`-o Key=Value`), e.g. `{Ciphers: aes128-gcm@openssh.com}`;
    not the ones the program sets. Default none."""
    persist_s: Annotated[int, Field(ge=1, le=3600)] = PERSIST_S
    """Seconds an idle shared connection to a host stays up (ControlPersist). Default 60."""
    max_per_host: Annotated[int, Field(ge=1, le=10)] = MAX_PER_HOST
    """Concurrent SSH sessions and Docker API requests per host and process (sshd's
    default MaxSessions is 10 per connection). Default 4."""

    @field_validator("options")
    @classmethod
    def _owned(cls, v: dict[str, str]) -> dict[str, str]:
        return _options(v) or {}


class HostSsh(_Model):
    """One host's SSH settings where they differ from the stack's `ssh` block."""

    user: str | None = None
    """SSH user. Default: `ssh.user`."""
    port: Port | None = None
    """SSH port. Default: `ssh.port`."""
    identity_file: str | None = None
    """Private key file. Default: `ssh.identity_file`."""
    known_hosts_file: str | None = None
    """known_hosts file. Default: `ssh.known_hosts_file`."""
    strict: bool | None = None
    """Strict host keys. Default: `ssh.strict`."""
    jump: SshJump | None = None
    """A bastion. Default: `ssh.jump`."""
    options: dict[str, str] | None = None
    """Extra options, added to (and over) `ssh.options`. Default none."""

    @field_validator("options")
    @classmethod
    def _owned(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return _options(v)
