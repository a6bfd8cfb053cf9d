"""infra.task.forkserver: what the client runs through the task's server behaves as
python running it would (output, argv, directory, environment, exit status, signals),
the server is started once, and whatever it cannot serve runs as plain python. Real
processes: the client as the launch writes it (this python in its first line), a
server preloading a small stdlib module in place of torch."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.forkserver import server_socket, stop_server, write_client
from infra.layout import IMAGE_PYTHON
from infra.render.run import forkserver_program
from infra.task import forkserver

pytestmark = pytest.mark.unit

MARK = "wave"
"""The module the test server preloads: a served process has it imported already."""

PROBE = """\
import json, os, sys
print(json.dumps({
    "preloaded": "wave" in sys.modules, "argv": sys.argv, "cwd": os.getcwd(),
    "token": os.environ.get("PROBE_TOKEN"), "path0": sys.path[0],
    "executable": sys.executable, "pid": os.getpid(),
}), flush=True)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Path]:
    """The client as the launch writes it, this python in its first line, with a
    server of its own (stopped afterwards)."""
    path = write_client(tmp_path / "bin" / "python", sys.executable, f"test {tmp_path.name}")
    yield path
    stop_server(path, sys.executable)


def run(client: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, forkserver.PRELOAD_ENV: MARK, "PYTHONPATH": "", **env}
    return subprocess.run(
        [str(client), *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=60
    )


def probe(tmp_path: Path) -> Path:
    script = tmp_path / "work" / "probe.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(PROBE)
    return script


def parsed(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    import json

    assert proc.stdout, f"no output; stderr:\n{proc.stderr}"
    out: dict[str, object] = json.loads(proc.stdout.splitlines()[0])
    return out


def test_the_launch_writes_it_for_the_images_python() -> None:
    """Its first line runs the image's python with -S (stdlib only: a fast start)."""
    assert forkserver_program().startswith(f'#!{IMAGE_PYTHON} -S\n"""')


def test_parse_python_argv_takes_what_the_launchers_run() -> None:
    """`-u -m module args` and `-u script args` are served; other flags and `-c` not."""
    parse = forkserver.parse_python_argv
    assert parse(["-u", "-m", "deepspeed.launcher.launch", "--x=1"]) == {
        "module": "deepspeed.launcher.launch",
        "args": ["--x=1"],
    }
    assert parse(["-u", "train.py", "--local_rank=0"]) == {
        "script": "train.py",
        "args": ["--local_rank=0"],
    }
    assert parse(["train.py"]) == {"script": "train.py", "args": []}
    for other in ([], ["-u"], ["-c", "pass"], ["-B", "x.py"], ["-m"], ["-m", "-x"]):
        assert parse(other) is None, other


def test_a_script_runs_forked_as_python_would_run_it(client: Path, tmp_path: Path) -> None:
    """Output, argv, directory, environment and sys.path[0] are the client's; the
    process comes from the preloaded server; its sys.executable is the client."""
    script = probe(tmp_path)
    proc = run(client, "-u", str(script), "--local_rank=3", cwd=tmp_path, PROBE_TOKEN="t1")
    out = parsed(proc)
    assert proc.returncode == 0, proc.stderr
    assert out["preloaded"] is True
    assert out["argv"] == [str(script), "--local_rank=3"]
    assert out["cwd"] == str(tmp_path)
    assert out["token"] == "t1"
    assert out["path0"] == str(script.parent)
    assert out["executable"] == str(client)


def test_one_server_serves_every_client(client: Path, tmp_path: Path) -> None:
    """The second client finds the server the first one started (one log line)."""
    script = probe(tmp_path)
    first = run(client, str(script), cwd=tmp_path)
    second = run(client, str(script), cwd=tmp_path)
    assert parsed(first)["preloaded"] and parsed(second)["preloaded"]
    log = Path(f"{server_socket(client, sys.executable)}.log").read_text()
    assert log.count("serving on") == 1, log


def test_a_module_runs_with_dash_m(client: Path, tmp_path: Path) -> None:
    """`-m package.module` runs the module as __main__ from the working directory."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(PROBE)
    proc = run(client, "-u", "-m", "pkg.main", "a", cwd=tmp_path)
    out = parsed(proc)
    assert out["preloaded"] is True and out["argv"][1:] == ["a"]  # type: ignore[index]
    assert out["path0"] == str(tmp_path)


def test_the_exit_code_is_the_scripts(client: Path, tmp_path: Path) -> None:
    """sys.exit(3) in the served script: the client exits 3."""
    proc = run(client, str(probe(tmp_path)), cwd=tmp_path, PROBE_EXIT="3")
    assert parsed(proc)["preloaded"] is True
    assert proc.returncode == 3, proc.stderr


def test_an_exception_exits_1_with_its_traceback(client: Path, tmp_path: Path) -> None:
    """An uncaught exception: its traceback on the client's stderr, exit 1."""
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('boom 42')\n")
    proc = run(client, str(script), cwd=tmp_path)
    assert proc.returncode == 1
    assert "RuntimeError: boom 42" in proc.stderr


def test_atexit_handlers_and_threads_finish_before_the_exit(client: Path, tmp_path: Path) -> None:
    """A served script's non-daemon thread ends and its atexit handler runs (a logger's
    last flush), as at python's exit."""
    script = tmp_path / "late.py"
    script.write_text(
        "import atexit, threading, time\n"
        "atexit.register(print, 'atexit ran', flush=True)\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread done', flush=True)))"
        ".start()\n"
    )
    proc = run(client, "-u", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["thread done", "atexit ran"], proc.stdout


def test_sys_exit_with_a_message_prints_it_and_exits_1(client: Path, tmp_path: Path) -> None:
    """sys.exit('bad config'): the message on stderr, exit status 1."""
    script = tmp_path / "msg.py"
    script.write_text("import sys\nsys.exit('bad config')\n")
    proc = run(client, str(script), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip() == "bad config", proc.stderr


def wait_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return line.strip()


def started(client: Path, tmp_path: Path, body: str) -> subprocess.Popen[str]:
    script = tmp_path / "long.py"
    script.write_text(body)
    env = {**os.environ, forkserver.PRELOAD_ENV: MARK}
    return subprocess.Popen(
        [str(client), "-u", str(script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_reaches_the_served_process(client: Path, tmp_path: Path) -> None:
    """SIGTERM to the client (the launcher's stop) reaches the script's handler (its
    final checkpoint); the client exits with the script's code."""
    body = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('checkpointed', flush=True),"
        " sys.exit(7)))\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = started(client, tmp_path, body)
    wait_line(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 7
    assert wait_line(proc) == "checkpointed"


def test_a_killed_client_takes_the_served_process_along(client: Path, tmp_path: Path) -> None:
    """SIGKILL to the client (a killed rank): the served process dies too, and the
    client's exit status is the kill's."""
    body = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
    proc = started(client, tmp_path, body)
    served = int(wait_line(proc))
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(served, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the served process {served} outlived its killed client")


def test_a_client_gone_with_unread_replies_is_gone() -> None:
    """A killed client that had not read the keeper's reply resets the connection
    instead of closing it: that too is a client gone (once, the keeper died of the
    reset and left the served process running)."""
    keeper, client = socket.socketpair()
    keeper.sendall(b"pid 1\n")
    client.close()
    assert forkserver.client_gone(keeper) is True
    keeper, client = socket.socketpair()
    client.close()
    assert forkserver.client_gone(keeper) is True


def test_a_served_process_killed_by_a_signal_kills_the_client_alike(
    client: Path, tmp_path: Path
) -> None:
    """A script that dies of SIGKILL (the OOM killer): the client dies of SIGKILL too,
    as the launcher expects of its child."""
    body = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    proc = started(client, tmp_path, body)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_off_in_the_environment_runs_python(client: Path, tmp_path: Path) -> None:
    """DSS_FORK_SERVER=0: python runs the script itself (nothing preloaded)."""
    proc = run(client, str(probe(tmp_path)), cwd=tmp_path, **{forkserver.OFF_ENV: "0"})
    assert parsed(proc)["preloaded"] is False


def test_what_it_cannot_serve_runs_as_python(client: Path, tmp_path: Path) -> None:
    """`-c` (multiprocessing's spawn, say) is run by python as it is."""
    proc = run(client, "-c", "import sys; print('wave' in sys.modules)", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


def test_a_server_that_refuses_leaves_clients_to_python(client: Path, tmp_path: Path) -> None:
    """A preload that fails to meet the server's terms (here: a module that starts a
    thread) is recorded once; clients then run python, and still succeed."""
    (tmp_path / "threaded.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True)"
        ".start()\n"
    )
    env = {forkserver.PRELOAD_ENV: "threaded", "PYTHONPATH": str(tmp_path)}
    proc = run(client, str(probe(tmp_path)), cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert parsed(proc)["preloaded"] is False
    failed = Path(f"{server_socket(client, sys.executable)}.failed")
    assert "threads" in failed.read_text()


def test_the_server_names_no_run_path_on_its_command_line(client: Path, tmp_path: Path) -> None:
    """The server's (and so every served process's) command line does not name the
    client's path: `pgrep -f <client>` (the launch's check for a running launcher)
    finds only clients."""
    body = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
    proc = started(client, tmp_path, body)
    served = int(wait_line(proc))
    try:
        cmdline = Path(f"/proc/{served}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert str(client) not in cmdline and "long.py" not in cmdline, cmdline
        assert cmdline.startswith(f"{sys.executable} -u -c ") and " --serve " in cmdline, cmdline
    finally:
        proc.kill()
        proc.wait(timeout=30)
