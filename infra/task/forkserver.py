"""The fork server of a training task (training.fork_server): launchers and ranks
forked from an interpreter that has already imported torch (and DeepSpeed where that
is fork-safe) instead of each importing them anew.

Why: a launch starts one `deepspeed` runner, one launcher per node and one process
per rank, and every one of them imports torch and DeepSpeed (about 3 s of CPU each in
the CPU image, 23 s for a rank on a GPU host). A code change or an automatic restart
pays that again before the first new step.

How: the launch writes this file into the run's launch dir with the image's python in
its first line, and the launcher command runs it in place of the python interpreter
(`<this> -u -m deepspeed.launcher.runner ...`). Run so, it is the *client*: it asks
the task's server (a unix socket in the task's /tmp, one per task, python and version
of this file) to run the same `[-u] -m module args` or `[-u] script args`, and hands
over its stdin, stdout and stderr. The server forks a *keeper*, which forks the
process that becomes the program: its argv, environment, working directory, stdio and
`sys.executable` are the client's, so what it starts (the runner's per-node launchers
over pdsh, each launcher's ranks) comes through the same path. The client forwards
every catchable signal to it and exits with its exit status; a client killed by
SIGKILL takes its process along (the keeper sees the socket close). So the launcher,
`pkill -f <script>` and the supervisor see the client, whose command line is the one
python would have had, and nothing else changes for them.

No server yet: the first client starts one (under a lock, so that 8 ranks of a node
start one) and waits for it. Anything this does not serve (other python flags, `-c`,
a server that does not answer) runs the image's python as before: the fork server
can make a start faster, never make it fail.

What is preloaded: torch, and DeepSpeed when torch has no CUDA (on a GPU build
`import deepspeed` initialises CUDA, and a process that has cannot fork safely:
docs/gpu.md, "Fork safety"). The server refuses to serve (its clients then run
python) when the preload left a second thread or an initialised CUDA.

Stdlib only: it runs in the task under the image's python, the client with `-S`.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any, NoReturn

SERVE = "--serve"
"""argv[1] of the server process (`python -u -c BOOT --serve <socket>`)."""
PROGRAM_ENV = "DSS_FORK_PROGRAM"
BOOT = f"import os, runpy; runpy.run_path(os.environ.pop({PROGRAM_ENV!r}), run_name='__main__')"
"""The server's `-c`: it runs this file, named in the environment and not on its
command line, so that no `pgrep -f`/`pkill -f` on the run's paths (the launch's check
for a running launcher, the stop) ever matches the server or a process forked from it."""
OFF_ENV = "DSS_FORK_SERVER"
"""Set to 0 in a client's environment: run python, never the server."""
PRELOAD_ENV = "DSS_FORK_PRELOAD"
"""Modules the server imports, comma-separated, in place of torch (and DeepSpeed): for
tests, and for an image whose launchers import something else first."""
START_WAIT_S = 180.0
"""How long a client waits for a server it started (the preload, on a busy host)."""
MAX_REQUEST = 4 << 20
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)


# -- the client ------------------------------------------------------------------------


def parse_python_argv(args: list[str]) -> dict[str, Any] | None:
    """`[-u] -m module args` or `[-u] script args` (what the launchers run) as a
    request's target; None for anything else, which python runs itself."""
    # The server runs unbuffered (-u) whatever the client asked: what the launchers run.
    i = 0
    while i < len(args) and args[i] == "-u":
        i += 1
    if i >= len(args):
        return None
    if args[i] == "-m":
        if i + 1 >= len(args) or args[i + 1].startswith("-"):
            return None
        return {"module": args[i + 1], "args": args[i + 2 :]}
    if args[i].startswith("-"):
        return None
    return {"script": args[i], "args": args[i + 1 :]}


def socket_path(python: str, client: str) -> str:
    """The task's server for this python and this version of the client file (its
    text's hash: a new version gets a server of its own)."""
    with open(client, "rb") as f:
        program = hashlib.sha256(f.read()).hexdigest()
    key = hashlib.sha256(f"{python}\0{program}".encode()).hexdigest()[:12]
    return f"/tmp/dss-fork-{os.getuid()}-{key}.sock"


def _connect(path: str) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        return None
    return s


def _start_server(python: str, me: str, path: str) -> None:
    """The server, detached from this client (its own session, stdio to a log)."""
    log = os.open(f"{path}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 1024)
        if os.fork() == 0:
            env = {**os.environ, PROGRAM_ENV: me}
            # argv[0] the python itself: python finds its venv from it.
            os.execve(python, [python, "-u", "-c", BOOT, SERVE, path], env)
        os._exit(0)
    os.close(log)
    os.close(null)
    os.waitpid(pid, 0)


def connect_or_start(python: str, me: str, path: str) -> socket.socket | None:
    """A connection to the task's server, starting it when there is none (one client
    at a time: the others wait on the lock, then find it)."""
    s = _connect(path)
    if s is not None:
        return s
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        s = _connect(path)
        if s is not None:
            return s
        if os.path.exists(f"{path}.failed"):
            return None  # it refused to serve once (its log says why): python from now on
        _start_server(python, me, path)
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            s = _connect(path)
            if s is not None or os.path.exists(f"{path}.failed"):
                return s
            time.sleep(0.05)
    return None


def _send(conn: socket.socket, body: bytes, fds: list[int]) -> None:
    head = len(body).to_bytes(4, "big")
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
    conn.sendmsg([head + body], rights)


def _lines(conn: socket.socket) -> Any:
    """The keeper's reply lines, one at a time; ends when it closes."""
    buf = b""
    while True:
        chunk = conn.recv(4096)  # retried by python after a forwarded signal (PEP 475)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


def _exit_like(status: str) -> NoReturn:
    """Exit as the served process did: its code, or killed by its signal."""
    kind, value = status.split()
    if kind == "signal":
        sig = int(value)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # which have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)
        os._exit(128 + sig)
    os._exit(int(value))


def run_python(python: str, args: list[str]) -> NoReturn:
    os.execv(python, [python, *args])


def client(me: str, args: list[str]) -> NoReturn:
    """Run `python args` through the task's server, or python itself."""
    python = sys.executable
    target = parse_python_argv(args)
    if target is None or os.environ.get(OFF_ENV) == "0":
        run_python(python, args)
    conn = connect_or_start(python, me, socket_path(python, me))
    if conn is None:
        run_python(python, args)
    request = {**target, "env": dict(os.environ), "cwd": os.getcwd(), "executable": me}
    served: list[int] = []
    pending: list[int] = []

    def forward(sig: int, _frame: Any) -> None:
        if not served:
            pending.append(sig)  # before the pid is known: sent once it is
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(served[0], sig)

    # Before the request: a stop that comes while the process starts must reach it.
    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        _send(conn, json.dumps(request).encode(), [0, 1, 2])
        replies = _lines(conn)
        first = next(replies)
    except (OSError, StopIteration):
        fatal = [n for n in pending if n != signal.SIGCONT]
        if fatal:  # nothing was started, and a stop came: die of it as python would
            _exit_like(f"signal {fatal[0]}")
        run_python(python, args)  # nothing was started: python runs it as before
    served.append(int(first.split()[1]))
    for n in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(served[0], n)
    for line in replies:
        if line.startswith(("exit ", "signal ")):
            _exit_like(line)
    sys.stderr.write("fork server: the served process's keeper went away\n")
    os._exit(1)


# -- the server ------------------------------------------------------------------------


def preload() -> str | None:
    """Import what every launcher and rank imports (or the modules PRELOAD_ENV names);
    why the server must not serve, or None."""
    import importlib

    named = os.environ.get(PRELOAD_ENV)
    if named is None:
        # Through importlib: the image has torch, the machine that checks this file not.
        torch: Any = importlib.import_module("torch")
        if torch.version.cuda is None:
            importlib.import_module("deepspeed")
    else:
        for name in filter(None, named.split(",")):
            importlib.import_module(name)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised by the preload"
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return f"the preload left {threads} threads"
    return None


def _recv(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    msg, anc, _, _ = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    size = int.from_bytes(msg[:4], "big")
    body = msg[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("request cut short")
        body += chunk
    return json.loads(body), list(fds)


def base_path(path: list[str], environ: dict[str, str]) -> list[str]:
    """The server's module path without its own entries (this file's directory, the
    server's PYTHONPATH): what a served process's path is built on."""
    own = set(filter(None, environ.get("PYTHONPATH", "").split(os.pathsep)))
    return [p for p in path[1:] if p not in own]


def served_path(request: dict[str, Any], base: list[str]) -> list[str]:
    """sys.path as python would set it for the request: the script's directory (or
    the working directory for -m), the request's PYTHONPATH, then the rest."""
    if "module" in request:
        first = request["cwd"]
    else:
        first = os.path.dirname(os.path.join(request["cwd"], request["script"]))
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *extra, *[p for p in base if p not in extra]]


def become(request: dict[str, Any], fds: list[int], base: list[str]) -> NoReturn:
    """In the forked process: take the client's stdio, environment, directory and
    argv, then run its target as `__main__`; exits with the status python would."""
    import random
    import runpy

    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.executable = request["executable"]
    sys.path[:] = served_path(request, base)
    # A fork shares its parent's random state: each served process draws its own.
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    threads = request["env"].get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        # The OpenMP runtime read the server's environment when torch was imported.
        torch.set_num_threads(int(threads))
    try:
        if "module" in request:
            sys.argv = [request["module"], *request["args"]]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [request["script"], *request["args"]]
            runpy.run_path(request["script"], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = exit_code(e.code)
    except KeyboardInterrupt:
        # Python's own way out of an uncaught Ctrl-C: the traceback, then death by SIGINT.
        sys.excepthook(*sys.exc_info())
        finish(1, signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    finish(code)


def exit_code(code: object) -> int:
    """sys.exit's argument as python's exit status (a message is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(code: int, sig: int = 0) -> NoReturn:
    """Exit as python's shutdown would for the script, without its module teardown
    (about 1 s with torch and DeepSpeed loaded, paid by every rank at every restart):
    wait for the script's non-daemon threads, run its atexit handlers (a logger's
    last flush), flush the stdio, then leave, as a forked multiprocessing child does."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize calls first
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        if sig:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(code)


def client_gone(conn: socket.socket) -> bool:
    """The client closed its end: it exited, or was killed (then the kernel may answer
    with a reset instead of an end of stream)."""
    try:
        return not conn.recv(64)
    except OSError:
        return True


def keep(conn: socket.socket, base: list[str]) -> NoReturn:
    """The keeper (forked per request): forks the served process, tells the client its
    pid and then its exit status; SIGKILLs it when the client goes away first."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request, fds = _recv(conn)
    pid = os.fork()
    if pid == 0:
        conn.close()
        become(request, fds, base)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"pid {pid}\n".encode())
    except OSError:
        os.kill(pid, signal.SIGKILL)  # the client is gone already
    done, client_fd = os.pidfd_open(pid), conn.fileno()
    while True:
        ready, _, _ = select.select([done, client_fd], [], [])
        if client_fd in ready and client_gone(conn):
            os.kill(pid, signal.SIGKILL)
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            break
    if os.WIFSIGNALED(status):
        reply = f"signal {os.WTERMSIG(status)}\n"
    else:
        reply = f"exit {os.waitstatus_to_exitcode(status)}\n"
    with contextlib.suppress(OSError):
        conn.sendall(reply.encode())
    os._exit(0)


def serve(path: str) -> None:
    """The server: preload, listen on `path`, fork a keeper per request. Returns only
    when it cannot serve (a served process leaves through `finish`)."""
    why = preload()
    if why is not None:
        with open(f"{path}.failed", "w") as f:
            f.write(why + "\n")
        print(f"fork server: not serving: {why}", flush=True)
        return
    base = base_path(sys.path, dict(os.environ))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(64)
    os.replace(tmp, path)
    # Keepers are reaped by the kernel; each resets this for its own child.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print(f"fork server: serving on {path} (pid {os.getpid()})", flush=True)
    while True:
        try:
            conn, _ = listener.accept()  # EINTR is retried by python (PEP 475)
        except OSError as e:
            if e.errno == errno.ECONNABORTED:
                continue
            raise
        if os.fork() == 0:
            listener.close()
            keep(conn, base)
        conn.close()


def main(argv: list[str]) -> None:
    if argv[1:2] == [SERVE]:
        serve(argv[2])
        return
    client(os.path.abspath(argv[0]), argv[1:])


if __name__ == "__main__":
    main(sys.argv)
