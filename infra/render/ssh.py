"""A host's SSH settings (`SshSpec`) as each client wants them: OpenSSH argv, the Docker
provider's `ssh_opts`, pulumi-command's connection pieces.

Pure: no file is read and nothing is expanded here, so what reaches the state is the
config's text (`~`, `%C`) and the same on every machine. Every OpenSSH path gets
`-F none` (an operator's ~/.ssh/config cannot make two paths differ), BatchMode (never
a prompt inside the engine) and the same host key checking; the ones that share the
host's master name it by `CONTROL_PATH`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import shlex
from dataclasses import dataclass
from typing import Any

from infra.sshspec import SshSpec

CONNECT_TIMEOUT_S = 20
CONTROL_PATH = "~/.ssh/dss-%C"
"""One master per (local host, host, port, user): `%C` is their hash, so the text is the
same on every machine and short enough for a unix socket's 104 bytes under a usual
HOME. The Docker provider's own ssh (pulumi-docker's `ssh_opts`) names the same path."""
SERVER_ALIVE = ("ServerAliveInterval=5", "ServerAliveCountMax=3")
"""A master whose host stopped answering exits within 15 s, not at TCP's timeout."""


def _o(*options: str) -> list[str]:
    return [arg for opt in options for arg in ("-o", opt)]


def host_key_options(spec: SshSpec) -> list[str]:
    """Host key checking: strict against the spec's file (OpenSSH's default file when it
    names none), or none at all, nothing remembered."""
    if not spec.strict:
        return _o("StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null")
    out = _o("StrictHostKeyChecking=yes")
    if spec.known_hosts_file:
        out += _o(f"UserKnownHostsFile={spec.known_hosts_file}")
    return out


def identity_options(spec: SshSpec) -> list[str]:
    """The key file, alone (no agent key tried first), when the spec names one."""
    if not spec.identity_file:
        return []
    return ["-i", spec.identity_file, *_o("IdentitiesOnly=yes")]


def proxy_command(spec: SshSpec) -> str | None:
    """The jump host as an explicit ProxyCommand: ProxyJump's own hop gets only -l, -p,
    -J, -F and -v of the command line, never `-o UserKnownHostsFile` or `-i`, so the
    bastion's key would go unchecked against our file. `%` in the words is doubled
    (ssh expands % tokens in a ProxyCommand); each word is shell-quoted."""
    if spec.jump is None:
        return None
    jump = spec.jump
    words = [
        "ssh", "-F", "none",
        *_o("BatchMode=yes", f"ConnectTimeout={CONNECT_TIMEOUT_S}"),
        *host_key_options(spec),
        *identity_options(spec),
        "-p", str(jump.port),
        "-l", jump.user or spec.user,
    ]  # fmt: skip
    quoted = [shlex.quote(w).replace("%", "%%") for w in words]
    return " ".join([*quoted, "-W", "'[%h]:%p'", shlex.quote(jump.host).replace("%", "%%")])


def common_options(spec: SshSpec) -> list[str]:
    """What every OpenSSH path to the host shares, master or not (before the destination)."""
    out = ["-F", "none", *_o("BatchMode=yes", f"ConnectTimeout={CONNECT_TIMEOUT_S}")]
    out += host_key_options(spec) + identity_options(spec)
    if (proxy := proxy_command(spec)) is not None:
        out += _o(f"ProxyCommand={proxy}")
    out += _o(*SERVER_ALIVE, *(f"{k}={v}" for k, v in spec.options))
    return [*out, "-p", str(spec.port)]


def mux_options(spec: SshSpec, master: str = "no") -> list[str]:
    """The shared master: `no` joins one when it runs (else connects alone), `auto`
    starts one when none runs (the Docker provider's ssh), `yes` is the master."""
    return _o(f"ControlPath={CONTROL_PATH}", f"ControlMaster={master}",
              f"ControlPersist={spec.persist_s}")  # fmt: skip


def script_argv(spec: SshSpec) -> list[str]:
    """Run the POSIX shell script given on stdin on the host (nothing of it in a process
    list), through the host's master when it has one (`mux`)."""
    mux = mux_options(spec) if spec.mux else []
    return ["ssh", *common_options(spec), *mux, *_o("LogLevel=ERROR"), spec.destination,
            "sh", "-s"]  # fmt: skip


def master_argv(spec: SshSpec, control_path: str) -> list[str]:
    """Start the host's master in the background once authenticated (`-f`): no command
    (`-N`); a forward that cannot be set up fails the request instead of warning; a
    local socket left by an earlier master is replaced; forwarded sockets are 0600."""
    return [
        "ssh", *common_options(spec),
        *_o(f"ControlPath={control_path}", "ControlMaster=yes",
            f"ControlPersist={spec.persist_s}", "ExitOnForwardFailure=yes",
            "StreamLocalBindUnlink=yes", "StreamLocalBindMask=0177", "LogLevel=ERROR"),
        "-f", "-N", spec.destination,
    ]  # fmt: skip


def control_argv(spec: SshSpec, control_path: str, command: str, *extra: str) -> list[str]:
    """Ask the master at `control_path` (`-O check`, `-O forward -L ...`, `-O exit`)."""
    return ["ssh", "-F", "none", "-S", control_path, "-O", command, *extra, "-p",
            str(spec.port), spec.destination]  # fmt: skip


def forward_argv(spec: SshSpec, control_path: str, local: str, remote: str) -> list[str]:
    """Forward local unix socket `local` to `remote` on the host, over the master."""
    return control_argv(spec, control_path, "forward", "-L", f"{local}:{remote}")


def docker_ssh_opts(spec: SshSpec) -> list[str]:
    """pulumi-docker's `ssh_opts` (the Docker CLI's connection helper puts them before
    `-- host docker system dial-stdio`): the same checks and jump as every other path,
    joining the host's master or starting it (`auto`)."""
    return [*common_options(spec), *mux_options(spec, "auto")]


@dataclass(frozen=True)
class ConnectionPieces:
    """pulumi-command's remote `Connection` for a host, less the credentials: `host_key`
    pins one key (pulumi-command has no known_hosts), `proxy` is its one hop."""

    host: str
    port: int
    user: str
    host_key: str | None
    proxy: dict[str, Any] | None


def _host_patterns(host: str, port: int) -> set[str]:
    return {host if port == 22 else f"[{host}]:{port}"}


def _hashed_match(entry: str, names: set[str]) -> bool:
    """A hashed known_hosts name `|1|salt|hash` (HMAC-SHA1 of the name under the salt)."""
    try:
        _, _, salt, digest = entry.split("|")
        key = base64.b64decode(salt)
        want = base64.b64decode(digest)
    except ValueError:
        return False
    return any(hmac.compare_digest(hmac.new(key, n.encode(), hashlib.sha1).digest(), want)
               for n in names)  # fmt: skip


def host_keys(known_hosts: str, host: str, port: int = 22) -> list[str]:
    """The `type base64` keys that known_hosts text holds for `host` at `port` (plain or
    hashed names; revoked and CA lines skipped), in the file's order."""
    names = _host_patterns(host, port)
    found = []
    for line in known_hosts.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith(("#", "@")):
            continue
        patterns = fields[0].split(",")
        if any(p in names for p in patterns) or any(
            p.startswith("|1|") and _hashed_match(p, names) for p in patterns
        ):
            found.append(f"{fields[1]} {fields[2]}")
    return found


HOST_KEY_PREFERENCE = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "ssh-rsa")


def pinned_key(keys: list[str]) -> str | None:
    """The one key to pin among a host's: by key type, in `HOST_KEY_PREFERENCE` order."""
    rank = {t: i for i, t in enumerate(HOST_KEY_PREFERENCE)}
    ordered = sorted(keys, key=lambda k: rank.get(k.split()[0], len(rank)))
    return ordered[0] if ordered else None


def connection_pieces(spec: SshSpec, known_hosts: str) -> ConnectionPieces:
    """The connection of `spec` with its host key (and the bastion's) looked up in the
    known_hosts text; None where the text has none (the caller refuses the host by
    name when strict) or when not strict."""
    strict = spec.strict
    proxy: dict[str, Any] | None = None
    if spec.jump is not None:
        j = spec.jump
        proxy = {"host": j.host, "port": j.port, "user": j.user or spec.user}
        if strict and (key := pinned_key(host_keys(known_hosts, j.host, j.port))):
            proxy["host_key"] = key
    return ConnectionPieces(
        host=spec.address,
        port=spec.port,
        user=spec.user,
        host_key=pinned_key(host_keys(known_hosts, spec.address, spec.port)) if strict else None,
        proxy=proxy,
    )
