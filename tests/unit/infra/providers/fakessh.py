"""A fake `ssh` on PATH for the transport's unit tests: it records every argv, plays a
master by a marker file beside the control path, and answers a forward with a real
listening unix socket (a small background process) so that the transport's checks are
the real ones. Nothing connects anywhere.

Scripted by files in its folder: `master_rc` and `master_err` (the master's start),
`forward_rc`, `script_rc` and `script_err` (a command over SSH).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKE = r"""#!PYTHON
import hashlib, json, os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
argv = sys.argv[1:]
stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
with open(os.path.join(here, "log.jsonl"), "a") as f:
    f.write(json.dumps({"argv": argv, "stdin": stdin}) + "\n")
def opt(name):
    for i, a in enumerate(argv):
        if a == "-o" and argv[i + 1].startswith(name + "="):
            return argv[i + 1].split("=", 1)[1]
    if name == "ControlPath" and "-S" in argv:
        return argv[argv.index("-S") + 1]
    return None
def scripted(name, default):
    p = os.path.join(here, name)
    return open(p).read() if os.path.exists(p) else default
dest = argv[-1]
if "-G" in argv:
    port = argv[argv.index("-p") + 1]
    h = hashlib.sha1((dest + port).encode()).hexdigest()[:8]
    print("controlpath " + os.path.join(os.environ["HOME"], ".ssh", "dss-" + h))
    sys.exit(0)
ctl = opt("ControlPath")
if "-O" in argv:
    cmd = argv[argv.index("-O") + 1]
    if cmd == "check":
        if os.path.exists(ctl + ".master"):
            sys.stderr.write("Master running (pid=1)\n"); sys.exit(0)
        sys.stderr.write("Control socket connect(%s): No such file or directory\n" % ctl)
        sys.exit(255)
    if cmd == "forward":
        rc = int(scripted("forward_rc", "0"))
        if rc:
            sys.stderr.write("mux_client_forward: forwarding request failed: "
                             "Port forwarding failed\n")
            sys.exit(rc)
        local = argv[argv.index("-L") + 1].split(":", 1)[0]
        p = subprocess.Popen([sys.executable, os.path.join(here, "listen.py"), local],
                             start_new_session=True, stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p.stdout.readline()
        with open(os.path.join(here, "pids"), "a") as f:
            f.write("%d\n" % p.pid)
        sys.exit(0)
if opt("ControlMaster") == "yes":
    rc = int(scripted("master_rc", "0"))
    if rc:
        sys.stderr.write(scripted("master_err", "ssh: connect to host: Connection refused\n"))
        sys.exit(rc)
    open(ctl + ".master", "w").close()
    sys.exit(0)
rc = int(scripted("script_rc", "0"))
sys.stderr.write(scripted("script_err", ""))
sys.stdout.write("ran\n")
sys.exit(rc)
"""

LISTEN = r"""import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(64)
print("ready", flush=True)
s.settimeout(0.5)
end = time.time() + 120
while time.time() < end:
    try:
        c, _ = s.accept(); c.close()
    except OSError:
        pass
"""


def _stop(pid: int) -> None:
    """End one listener this fake started, by its id (its parent, the fake, is gone, so
    someone else reaps it: no wait here)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class FakeSsh:
    """The fake's folder (its scripts and log) and the HOME the transport sees."""

    dir: Path
    home: Path

    def calls(self) -> list[list[str]]:
        log = self.dir / "log.jsonl"
        if not log.exists():
            return []
        return [json.loads(line)["argv"] for line in log.read_text().splitlines()]

    def stdins(self) -> list[str]:
        log = self.dir / "log.jsonl"
        return [json.loads(line)["stdin"] for line in log.read_text().splitlines()]

    def starts(self) -> list[list[str]]:
        """The master starts among the calls (ControlMaster=yes)."""
        return [a for a in self.calls() if "ControlMaster=yes" in a]

    def forwards(self) -> list[list[str]]:
        return [a for a in self.calls() if "forward" in a]

    def script(self, name: str, text: str) -> None:
        (self.dir / name).write_text(text)

    def lose_master(self) -> None:
        """The master exits: its marker goes, its forwards stop accepting."""
        for marker in (self.home / ".ssh").glob("*.master"):
            marker.unlink()
        # Gone at once for whoever connects next (a killed listener may take a moment).
        for sock in (self.home / ".ssh" / "dss").glob("*.sock"):
            sock.unlink()
        self.stop_listeners()

    def stop_listeners(self) -> None:
        pids = self.dir / "pids"
        if pids.exists():
            for pid in map(int, pids.read_text().split()):
                _stop(pid)
            pids.unlink()


@pytest.fixture
def fake_ssh(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSsh]:
    """A fake `ssh` first on PATH, HOME a short folder (unix sockets are short)."""
    from infra.providers import transport

    root = Path(tempfile.mkdtemp(prefix="fs", dir="/tmp"))
    bin_dir, home = root / "b", root / "h"
    bin_dir.mkdir()
    home.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(FAKE.replace("PYTHON", sys.executable, 1))
    ssh.chmod(0o755)
    (bin_dir / "listen.py").write_text(LISTEN)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(home))
    transport.forget()
    fake = FakeSsh(bin_dir, home)
    try:
        yield fake
    finally:
        fake.stop_listeners()
        transport.forget()
        shutil.rmtree(root, ignore_errors=True)
