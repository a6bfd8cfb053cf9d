"""A too-small underlay is caught; `lab down` leaves nothing behind, twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.lab import lab_cli
from harness.waits import wait_for
from lab import config as c
from lab import hostfiles as hf
from lab import sysops as s
from tests.lab.conftest import Lab, df_ping, overlay_9000, pinned_service

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]


def test_too_small_underlay_fails_df_ping(small_mtu_lab: Lab) -> None:
    """Over a 1500-byte underlay, an mtu-9000 overlay drops 8922-byte DF pings across hosts."""
    lab, net, svc = small_mtu_lab, "ov-small", "small-target"
    overlay_9000(lab, net)
    pinned_service(lab, svc, net, 2)
    wait_for(
        f"service {svc} on lab-h2",
        lambda: (
            "Running" in lab.docker(1, "service", "ps", svc, "--format", "{{.CurrentState}}").stdout
        ),
        60,
        interval=0.5,
    )
    small = df_ping(lab, net, f"tasks.{svc}", 1000, 1, 5)
    assert small.returncode == 0, f"lab-h1 -> {svc}: 1000-byte ping failed: {small.stdout}"
    big = df_ping(lab, net, f"tasks.{svc}", 8922, 2, 3)
    assert big.returncode != 0, f"lab-h1 -> {svc}: 8922-byte DF ping passed a 1500 underlay"


def _lab_leftovers(root: Path) -> list[str]:
    left: list[str] = []
    left += [f"netns {n}" for n in s.netns_list(c.NETNS_PREFIX)]
    left += [
        f"link {d.name}" for d in Path("/sys/class/net").iterdir() if d.name.startswith("dssl")
    ]
    left += [f"cgroup {g}" for g in s.lab_cgroups(c.CGROUP_PREFIX)]
    rules = s.run(["iptables", "-w", "-S"]).stdout
    left += [f"iptables {' '.join(r)}" for r in hf.lab_rules_from_save(rules)]
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            mounts = (pid_dir / "mountinfo").read_text()
        except OSError:
            continue
        if str(root) in cmd or "docker-registry" in cmd:
            left.append(f"process {pid_dir.name}: {cmd.strip()}")
        if f" {root}" in mounts:
            left.append(f"mount under {root} seen by pid {pid_dir.name}")
    if root.exists():
        left.append(f"dir {root}")
    return left


def test_down_removes_everything_even_without_state(small_mtu_lab: Lab) -> None:
    """After a crash-like loss of the state file, `lab down` still removes every trace."""
    lab = small_mtu_lab
    assert lab.docker(2, "run", "-d", lab.image, "sleep", "3600").returncode == 0
    lab.paths.state.unlink()
    p = lab_cli("down", check=False, timeout=120)
    assert p.returncode == 0, f"lab down failed: {p.stdout}{p.stderr}"
    left = _lab_leftovers(lab.root)
    assert not left, f"lab down left: {left}"


def test_down_twice_is_fine(small_mtu_lab: Lab) -> None:
    """A second `lab down` on a removed lab succeeds and changes nothing."""
    for n in (1, 2):
        p = lab_cli("down", check=False, timeout=120)
        assert p.returncode == 0, f"lab down #{n} failed: {p.stdout}{p.stderr}"
    assert not _lab_leftovers(small_mtu_lab.root), "lab down twice left something"
