"""Thin wrappers over the system: subprocess, the Docker API on a unix socket, cgroups."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


class LabError(RuntimeError):
    pass


def run(
    argv: list[str], *, check: bool = True, input_text: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output; on failure raise with the command and its stderr."""
    p = subprocess.run(
        argv, capture_output=True, text=True, input=input_text, timeout=timeout, check=False
    )
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def docker_api(
    sock: Path, method: str, path: str, body: Any = None, timeout: float = 5
) -> tuple[int, Any]:
    """One Docker Engine API call over a unix socket; returns (status, decoded JSON or text)."""
    conn = _UnixHTTPConnection(str(sock), timeout)
    try:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read().decode()
        try:
            return resp.status, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return resp.status, raw
    finally:
        conn.close()


def ping(sock: Path, timeout: float = 2) -> bool:
    try:
        status, _ = docker_api(sock, "GET", "/_ping", timeout=timeout)
        return status == 200
    except OSError:
        return False


def bridge_exists() -> bool:
    from lab.config import BRIDGE

    return Path(f"/sys/class/net/{BRIDGE}").exists()


def tcp_open(addr: str, port: int, timeout: float = 1) -> bool:
    """Whether addr:port accepts a connection. Lab addresses are only tried while the lab
    bridge exists: otherwise the route would leave the machine."""
    from lab.config import SUBNET_PREFIX

    if addr.startswith(SUBNET_PREFIX + ".") and not bridge_exists():
        return False
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def hierarchies() -> list[Path]:
    """Every cgroup hierarchy mounted under /sys/fs/cgroup (real dirs, not symlinks)."""
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(
        p for p in CGROUP_ROOT.iterdir() if not p.is_symlink() and (p / "cgroup.procs").exists()
    )


def cgroup_create(name: str) -> None:
    for h in hierarchies():
        d = h / name
        d.mkdir(exist_ok=True)
        if h.name == "cpuset":
            # A new cpuset cgroup starts empty; inherit the parent's cpus and mems.
            for f in ("cpuset.cpus", "cpuset.mems"):
                src = h / f
                if src.exists() and not (d / f).read_text().strip():
                    (d / f).write_text(src.read_text())


def cgroup_pids(name: str) -> set[int]:
    """Every pid in cgroup `name` or below it, over all hierarchies."""
    pids: set[int] = set()
    for h in hierarchies():
        top = h / name
        if not top.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    text = Path(dirpath, "cgroup.procs").read_text()
                except OSError:
                    continue
                pids.update(int(x) for x in text.split())
    return pids


def cgroup_remove(name: str) -> list[str]:
    """rmdir cgroup `name` and its children in every hierarchy; returns what is left."""
    left: list[str] = []
    for h in hierarchies():
        top = h / name
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                left.append(dirpath)
    return left


def lab_cgroups(prefix: str) -> set[str]:
    names: set[str] = set()
    for h in hierarchies():
        names.update(p.name for p in h.iterdir() if p.is_dir() and p.name.startswith(prefix))
    return names


def kill_pids(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_cgroup(name: str, timeout: float = 15) -> set[int]:
    """SIGKILL everything in a cgroup tree until it is empty; returns the pids still there."""
    freezer = CGROUP_ROOT / "freezer" / name / "freezer.state"
    deadline = time.monotonic() + timeout
    while True:
        pids = cgroup_pids(name)
        if not pids or time.monotonic() > deadline:
            return pids
        # Freeze first so nothing forks between reading the list and the kill.
        frozen = False
        if freezer.exists():
            try:
                freezer.write_text("FROZEN")
                frozen = True
            except OSError:
                pass
        kill_pids(pids)
        if frozen:
            with contextlib.suppress(OSError):
                freezer.write_text("THAWED")
        time.sleep(0.1)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netns_list(prefix: str) -> list[str]:
    d = Path("/run/netns")
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if p.name.startswith(prefix))


def netns_pids(name: str) -> set[int]:
    p = run(["ip", "netns", "pids", name], check=False)
    return {int(x) for x in p.stdout.split()} if p.returncode == 0 else set()


def mounts_under(prefix: str) -> list[str]:
    """Mount points (root mount namespace) at or under prefix, deepest first."""
    out: list[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == prefix or mp.startswith(prefix.rstrip("/") + "/"):
                out.append(mp)
    return sorted(out, key=len, reverse=True)


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
