"""A lab host's sshd and the program's shared SSH connections, for tests that break the
transport the way prod breaks it: a host key that changed, an sshd that stopped, port 22
closed to all but a bastion.

Every such test first ends the host's master (`end_master`): a live master carries the
next connection without a handshake and would hide a changed key or a stopped sshd.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.configs import unprefixed
from harness.lab import LAB_ROOT
from lab import config as c


def _paths(i: int) -> c.HostPaths:
    return c.LabPaths(LAB_ROOT).host(i)


def stop(i: int) -> None:
    """SIGTERM lab host i's sshd (its connections already open stay)."""
    os.kill(int(_paths(i).sshd_pid.read_text().split()[0]), signal.SIGTERM)


def start(i: int) -> None:
    """Start lab host i's sshd again in the host's namespaces (those of its dockerd)."""
    paths = _paths(i)
    dockerd = paths.pidfile.read_text().split()[0]
    subprocess.run(
        ["nsenter", "-t", dockerd, "-m", "-u", "-n", "/usr/sbin/sshd", "-f",
         str(paths.sshd_config), "-E", str(paths.sshd_log)],
        check=True, timeout=30,
    )  # fmt: skip


@contextlib.contextmanager
def stopped(i: int) -> Iterator[None]:
    """Lab host i's sshd stopped for the block, started again after it."""
    stop(i)
    try:
        yield
    finally:
        start(i)


@contextlib.contextmanager
def new_host_key(i: int) -> Iterator[str]:
    """Lab host i's sshd serving a new host key for the block (a reinstalled host, or a
    machine in its place), its own key back after it; yields the new public key."""
    key = _paths(i).host_key
    saved = key.with_name(f"{key.name}.saved")
    shutil.copy2(key, saved)
    shutil.copy2(f"{key}.pub", f"{saved}.pub")
    try:
        key.unlink()
        Path(f"{key}.pub").unlink()
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "replaced", "-f", str(key)],
            check=True,
        )
        stop(i)
        start(i)
        yield Path(f"{key}.pub").read_text()
    finally:
        os.replace(saved, key)
        os.replace(f"{saved}.pub", f"{key}.pub")
        stop(i)
        start(i)


@contextlib.contextmanager
def port_22_closed(i: int) -> Iterator[None]:
    """Port 22 of lab host i refused to this machine (the root namespace) for the block:
    only another lab host (a bastion) reaches it. The rule carries the lab's comment, so
    `lab down` removes it if the block never ends."""
    rule = ["OUTPUT", "-d", c.host_addr(i), "-p", "tcp", "--dport", "22",
            "-m", "comment", "--comment", "dsslab", "-j", "REJECT"]  # fmt: skip
    subprocess.run(["iptables", "-w", "-I", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-w", "-D", *rule], check=True)


def end_master(config: dict[str, Any], i: int) -> None:
    """End the shared connection the program keeps to lab host i (`ssh -O exit` on its
    control path, as the stack `config` resolves the host's SSH settings); none is fine."""
    end_masters(config, [i])


def end_masters(config: dict[str, Any], hosts: Iterable[int]) -> None:
    """`end_master` of each lab host in `hosts`, the config parsed once."""
    from infra.config import parse_stack_config
    from infra.providers import transport
    from infra.render.ssh import control_argv

    cfg = parse_stack_config(unprefixed(config))
    by_name = {h.name: h for h in cfg.hosts}
    for i in hosts:
        host = by_name[c.host_name(i)]
        spec = cfg.ssh_for(host)
        ctl = transport.control_path(spec, host.docker_host)
        argv = control_argv(spec, ctl, "exit")
        subprocess.run(argv, capture_output=True, timeout=30, check=False)


def logins(i: int) -> list[str]:
    """The `Accepted publickey for <user> from <address>` lines of lab host i's sshd."""
    log = _paths(i).sshd_log
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if "Accepted publickey" in line]


def login_counts(hosts: int) -> list[int]:
    """How many logins lab hosts 1..hosts have accepted so far, host 1 first."""
    return [len(logins(i)) for i in range(1, hosts + 1)]
