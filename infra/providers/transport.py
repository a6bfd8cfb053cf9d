"""Reaching a host over SSH with one connection: a shared OpenSSH master per host, the
host's Docker socket forwarded over it, and bounded concurrency.

Why: docker-py's ssh:// client needs paramiko and makes one SSH handshake per request
(docker/docker-py#2966), hundreds per `up`, against sshd's default `MaxStartups 10:30:100`.
Here each host gets one OpenSSH ControlMaster (`ssh -fNM`, started by whoever needs it
first, under `flock(<control path>.lock)` so that processes and threads start one),
every OpenSSH command joins it, and the host's Docker socket is forwarded over it to a
local unix socket (`ssh -O forward -L`): docker-py then talks plain `unix://`, one
handshake per host however many requests, and a forward costs sshd no session. Nobody
stops a master: it exits `persist_s` after its last client, or when the host stops
answering (ServerAlive). A master or forward that went away is made again on the next
call. Every failure of the way to the host is a `TransportError` naming the host, its
URL and ssh's last stderr line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from infra.providers.errors import HostError, TransportError
from infra.render.ssh import (
    CONTROL_PATH,
    common_options,
    control_argv,
    forward_argv,
    master_argv,
    script_argv,
)
from infra.sshspec import SshSpec, parse_ssh_url

SOCKET_PATH_MAX = 104
"""sun_path's size on macOS and the BSDs (Linux allows 108): a longer control path or
forwarded socket cannot be bound, and ssh says only "path too long"."""
MASTER_TIMEOUT_S = 60
"""Connect (ConnectTimeout 20 s, each hop) plus authentication."""
CONTROL_TIMEOUT_S = 15
DOCKER_TIMEOUT_S = 120


def url_of(spec: SshSpec) -> str:
    """How errors name a host reached by SSH alone (no Docker URL)."""
    return f"ssh://{spec.destination}:{spec.port}"


def last_line(text: str) -> str:
    """ssh's last stderr line (what it says last is why), or a placeholder."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "ssh said nothing"


def _run(
    argv: list[str], timeout: float, script: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ssh with its output captured; stdin is `script`, else nothing (never the
    engine's)."""
    if script is not None:
        return subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=timeout, check=False
        )
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


@dataclass(frozen=True)
class Master:
    """A host's master as this process knows it: the expanded control path."""

    spec: SshSpec
    url: str
    control_path: str


_paths: dict[SshSpec, str] = {}
_paths_lock = threading.Lock()


def control_path(spec: SshSpec, url: str) -> str:
    """`CONTROL_PATH` as ssh expands it for this host (`ssh -G`: the same `%C` and `~`
    that the Docker provider's ssh and every other path compute), once per process."""
    with _paths_lock:
        if spec in _paths:
            return _paths[spec]
    argv = ["ssh", *common_options(spec), "-o", f"ControlPath={CONTROL_PATH}", "-G",
            spec.destination]  # fmt: skip
    try:
        proc = _run(argv, CONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TransportError(spec.address, url, f"ssh -G: {e}") from None
    found = [
        ln.split(" ", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("controlpath ")
    ]
    if proc.returncode != 0 or not found:
        raise TransportError(spec.address, url, last_line(proc.stderr))
    path = found[0]
    if len(path.encode()) >= SOCKET_PATH_MAX:
        raise TransportError(
            spec.address,
            url,
            f"control path {path} is {len(path.encode())} bytes; allowed: under "
            f"{SOCKET_PATH_MAX} (a shorter HOME for the user that runs Pulumi)",
        )
    with _paths_lock:
        _paths[spec] = path
    return path


@contextlib.contextmanager
def _flock(path: str) -> Iterator[None]:
    """Hold an exclusive flock on `path` (flock(1)'s lock: shared with shell scripts)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _master_running(spec: SshSpec, ctl: str) -> tuple[bool, str]:
    """Whether a master answers at `ctl`, and what `ssh -O check` said last."""
    try:
        proc = _run(control_argv(spec, ctl, "check"), CONTROL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"ssh -O check: no answer within {CONTROL_TIMEOUT_S}s"
    return proc.returncode == 0, last_line(proc.stderr)


def _start_master(spec: SshSpec, url: str, ctl: str) -> None:
    """`ssh -fNM`: the parent exits once authenticated, the master stays. Its stderr
    goes to a file, not a pipe: the detached master would hold a pipe open, and the
    wait for its end would last as long as the master."""
    with tempfile.TemporaryFile(mode="w+") as err:
        try:
            proc = subprocess.run(
                master_argv(spec, ctl),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                timeout=MASTER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TransportError(
                spec.address, url, f"no connection within {MASTER_TIMEOUT_S}s"
            ) from None
        err.seek(0)
        if proc.returncode != 0:
            raise TransportError(spec.address, url, last_line(err.read()))


def ensure_master(spec: SshSpec, url: str) -> Master:
    """The host's master, started when none answers (under the control path's lock)."""
    ctl = control_path(spec, url)
    os.makedirs(os.path.dirname(ctl), mode=0o700, exist_ok=True)
    with _flock(f"{ctl}.lock"):
        running, _ = _master_running(spec, ctl)
        if not running:
            # A socket left by a master that died: a new master finding it would run
            # without multiplexing ("already exists, disabling multiplexing"), a plain
            # background connection nobody can join. Nothing answers on it: it goes.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ctl)
            _start_master(spec, url, ctl)
    return Master(spec, url, ctl)


def _listening(path: str) -> bool:
    """Whether something accepts on unix socket `path` (the master's forward)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def socket_path(master: Master, remote: str) -> str:
    """Where the host's `remote` socket is forwarded: beside the control path (the
    user's private ~/.ssh), else under the temp dir when that is too long."""
    name = hashlib.sha256(f"{master.control_path}\0{remote}".encode()).hexdigest()[:16]
    for folder in (
        os.path.join(os.path.dirname(master.control_path), "dss"),
        os.path.join(tempfile.gettempdir(), f"dss-{os.getuid()}"),
    ):
        path = os.path.join(folder, f"{name}.sock")
        if len(path.encode()) < SOCKET_PATH_MAX:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if os.stat(folder).st_uid != os.getuid():
                continue  # someone else's folder: never forward a socket into it
            return path
    raise TransportError(
        master.spec.address,
        master.url,
        f"no folder for the forwarded socket under {SOCKET_PATH_MAX} bytes; allowed: a "
        "shorter HOME or TMPDIR",
    )


def forward(master: Master, remote: str) -> str:
    """The host's unix socket `remote` as a local socket (mode 0600), over the master."""
    local = socket_path(master, remote)
    spec, url, ctl = master.spec, master.url, master.control_path
    with _flock(f"{ctl}.lock"):
        if _listening(local):
            return local
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)  # left by a master that is gone (nothing accepts on it)
        try:
            proc = _run(forward_argv(spec, ctl, local, remote), CONTROL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise TransportError(spec.address, url, "ssh -O forward: no answer") from None
        if proc.returncode != 0:
            raise TransportError(
                spec.address, url, f"forward of {remote} refused: {last_line(proc.stderr)}"
            )
    # The master's StreamLocalBindMask makes it 0600; a master the Docker provider's
    # ssh started (ControlMaster=auto) has ssh's default mask, the same: say it anyway.
    os.chmod(local, 0o600)
    return local


_slots: dict[str, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def slot(spec: SshSpec) -> threading.BoundedSemaphore:
    """The host's semaphore: at most `max_per_host` sessions and Docker requests at once
    in this process (sshd's MaxSessions counts each command over a master)."""
    with _slots_lock:
        return _slots.setdefault(spec.address, threading.BoundedSemaphore(spec.max_per_host))


def run_script(spec: SshSpec, script: str, timeout: int) -> str:
    """Run a shell script on the host (stdin), through its master when it is a `mux`
    host: its stdout. TransportError for ssh's own failure (exit 255), HostError for the
    script's."""
    url = url_of(spec)
    if spec.mux:
        ensure_master(spec, url)
    with slot(spec):
        try:
            proc = _run(script_argv(spec), timeout, script)
        except subprocess.TimeoutExpired:
            raise HostError(f"ssh {spec.address}: no answer within {timeout}s") from None
    if proc.returncode == 255:
        raise TransportError(spec.address, url, last_line(proc.stderr))
    if proc.returncode != 0:
        raise HostError(
            f"ssh {spec.destination}:{spec.port} exited {proc.returncode}: "
            f"{proc.stderr.strip()[-500:]}"
        )
    return proc.stdout


@dataclass
class _Client:
    client: Any
    local: str


_clients: dict[tuple[str, SshSpec], _Client] = {}
_client_locks: dict[tuple[str, SshSpec], threading.Lock] = {}


def docker_client(url: str, spec: SshSpec) -> Any:
    """A Docker API client for ssh:// `url`, over the host's forwarded socket: one per
    endpoint and process (a new client asks the engine its version first), its socket
    made again when the master went away since."""
    parts = parse_ssh_url(url)
    # The URL says which host answers for Docker; the spec how to reach it.
    spec = dataclasses.replace(spec, address=parts.host, mux=True)
    key = (url, spec)
    with _slots_lock:
        lock = _client_locks.setdefault(key, threading.Lock())
    with lock:
        cached = _clients.get(key)
        if cached is not None and _listening(cached.local):
            return cached.client
        master = ensure_master(spec, url)
        local = forward(master, parts.socket)
        if cached is not None:
            return cached.client  # the same local path answers again
        client = _new_client(master, local)
        _clients[key] = _Client(client, local)
        return client


def _why(master: Master) -> str:
    """What the host's master says now (`ssh -O check`'s last line): why a connection
    through it broke, or that it still runs and the engine's side went."""
    return _master_running(master.spec, master.control_path)[1]


def _new_client(master: Master, local: str) -> Any:
    import docker
    from docker.errors import DockerException

    spec = master.spec
    try:
        client = docker.DockerClient(
            base_url=f"unix://{local}", timeout=DOCKER_TIMEOUT_S, max_pool_size=spec.max_per_host
        )
    except DockerException as e:
        raise TransportError(
            spec.address, master.url, f"docker: {e}; ssh: {_why(master)}"
        ) from None
    _bound(client, master)
    return client


def _bound(client: Any, master: Master) -> None:
    """Every request of `client` holds one of the host's slots, and a broken connection
    is a TransportError with what the master says (an HTTP answer, 404 or 500, is
    returned as before)."""
    import requests

    send = client.api.send
    host_slot = slot(master.spec)

    def bounded(request: Any, **kwargs: Any) -> Any:
        with host_slot:
            try:
                return send(request, **kwargs)
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as e:
                detail = f"docker: {e}; ssh: {_why(master)}"
                raise TransportError(master.spec.address, master.url, detail) from None

    # docker-py's APIClient is a requests.Session: every request goes through `send`.
    client.api.send = bounded


def forget() -> None:
    """Drop this process's cached clients, paths and slots (tests)."""
    with _slots_lock:
        _clients.clear()
        _client_locks.clear()
        _slots.clear()
    with _paths_lock:
        _paths.clear()
