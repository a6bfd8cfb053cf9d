"""`lab down`: remove everything of the lab, found from what exists (not only the state file)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from lab import config as c
from lab import hostfiles as hf
from lab import imagecache, users
from lab import sysops as s


def _log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def down(root: Path) -> list[str]:
    """Tear the lab down; safe to run twice. Returns problems that remain (empty: clean)."""
    t0 = time.monotonic()
    lab = c.LabPaths(root)
    problems: list[str] = []
    netns = s.netns_list(c.NETNS_PREFIX)
    # 1. processes: every host's cgroup tree (dockerd, containerd, shims, containers, sshd),
    #    whatever still runs in a lab netns, and the registry.
    victims: set[int] = set()
    for ns in netns:
        victims |= s.netns_pids(ns)
    if lab.registry_pid.exists():
        try:
            pid = int(lab.registry_pid.read_text().split()[0])
            if s.comm(pid).startswith("docker-registr"):
                victims.add(pid)
        except (ValueError, IndexError):
            pass
    s.kill_pids(victims)
    for cg in sorted(s.lab_cgroups(c.CGROUP_PREFIX)):
        left = s.kill_cgroup(cg)
        if left:
            problems.append(f"cgroup {cg}: pids {sorted(left)} survived SIGKILL")
    for ns in netns:
        left = {p for p in s.netns_pids(ns) if s.pid_alive(p)}
        s.kill_pids(left)
    # 2. network: namespaces, veths, bridge, tagged iptables rules.
    for ns in netns:
        p = s.run(["ip", "netns", "del", ns], check=False)
        if p.returncode != 0:
            problems.append(f"netns {ns}: {p.stderr.strip()}")
    for dev in sorted(Path("/sys/class/net").iterdir()):
        if dev.name.startswith("dssl") and dev.name != c.BRIDGE:
            s.run(["ip", "link", "del", dev.name], check=False)
    if Path(f"/sys/class/net/{c.BRIDGE}").exists():
        s.run(["ip", "link", "del", c.BRIDGE], check=False)
    saved = s.run(["iptables", "-w", "-S"], check=False).stdout
    for rule in hf.lab_rules_from_save(saved):
        p = s.run(["iptables", "-w", "-D", *rule], check=False)
        if p.returncode != 0:
            problems.append(f"iptables rule {' '.join(rule)}: {p.stderr.strip()}")
    # 3. the non-root user the lab made (its home is under the root), cgroups, mounts,
    #    files (the registry storage lives in DSS_CACHE and stays).
    problems += users.remove(lab)
    for cg in sorted(s.lab_cgroups(c.CGROUP_PREFIX)):
        for d in s.cgroup_remove(cg):
            problems.append(f"cgroup dir {d} could not be removed")
    if root.exists():
        for mp in s.mounts_under(str(root)):
            p = s.run(["umount", "-l", mp], check=False)
            if p.returncode != 0:
                problems.append(f"mount {mp}: {p.stderr.strip()}")
        if s.mounts_under(str(root)):
            problems.append(f"mounts remain under {root}; its files were kept")
        else:
            # Every process is gone and nothing is mounted: the hosts' image stores can
            # move aside for the next lab (lab/imagecache.py).
            kept = [
                imagecache.stash(root, data.parent, data)
                for data in sorted(root.glob("h*/data-*"))
                if data.is_dir()
            ]
            if kept:
                _log(f"image stores: {kept.count('kept')} of {len(kept)} kept for the next lab")
            shutil.rmtree(root, ignore_errors=True)
            if root.exists():
                problems.append(f"{root} could not be removed completely")
    _log(
        f"down in {time.monotonic() - t0:.1f} s"
        + (f"; {len(problems)} problem(s)" if problems else "")
    )
    return problems
