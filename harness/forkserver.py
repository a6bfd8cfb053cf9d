"""The fork server's client as the launch writes it, for a given python, and its
server stopped afterwards: for the tests that run it for real (unit, on the project's
python; gpu, on the GPU host's)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from infra.render.run import forkserver_program
from infra.task import forkserver


def write_client(path: Path, python: str, token: str) -> Path:
    """The client at `path` (made executable) running `python`; `token` in its text
    gives it a server of its own (the socket is keyed by the text)."""
    body = forkserver_program().split("\n", 1)[1] + f"\n# {token}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{python} -S\n{body}")
    path.chmod(0o755)
    return path


def server_socket(client: Path, python: str) -> str:
    return forkserver.socket_path(python, str(client))


def stop_server(client: Path, python: str) -> None:
    """SIGKILL the client's server (its pid from its log) and remove its files."""
    sock = server_socket(client, python)
    log = Path(f"{sock}.log")
    for line in log.read_text().splitlines() if log.exists() else []:
        if "(pid " in line:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.rsplit("(pid ", 1)[1].rstrip(")")), signal.SIGKILL)
    for leftover in (sock, f"{sock}.log", f"{sock}.lock", f"{sock}.failed"):
        Path(leftover).unlink(missing_ok=True)
