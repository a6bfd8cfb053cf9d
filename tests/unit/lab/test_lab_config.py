"""Pure rendering of the lab's names, daemon settings, sshd_config and GPU UUIDs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from infra.providers.gpuruntime import TOOLKIT_SCRIPT
from lab import config as c
from lab import hostfiles as hf
from lab.engines import DEFAULT_ENGINE

pytestmark = pytest.mark.unit

ROOT = Path("/lab-root")
MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
36 31 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 / /proc rw - proc proc rw
"""


def test_host_addresses_follow_the_contract() -> None:
    """Host i is 10.213.0.<10+i>, netns dsslab-h<i>, hostname lab-h<i>."""
    assert c.host_addr(1) == "10.213.0.11"
    assert c.host_addr(8) == "10.213.0.18"
    assert c.netns_name(3) == "dsslab-h3"
    assert c.host_name(3) == "lab-h3"


def test_host_index_out_of_range_is_rejected() -> None:
    """Index 0 and indexes past the /24 are refused."""
    for bad in (0, c.MAX_HOSTS + 1):
        with pytest.raises(ValueError):
            c.host_addr(bad)


def test_veth_names_fit_ifnamsiz() -> None:
    """Root-side veth names stay within 15 characters for every allowed host."""
    assert all(len(c.veth_name(i)) <= 15 for i in range(1, c.MAX_HOSTS + 1))


def test_gpu_uuids_are_deterministic_and_distinct() -> None:
    """Same host and index give the same UUID; all UUIDs of a lab differ."""
    assert c.gpu_uuids(2, 4) == c.gpu_uuids(2, 4)
    every = [u for i in range(1, 9) for u in c.gpu_uuids(i, 8)]
    assert len(set(every)) == 64
    pat = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")
    assert all(pat.match(u) for u in every), every[0]


def test_gpu_uuids_prefix_is_stable() -> None:
    """Adding GPUs to a host keeps the UUIDs of the ones it had."""
    assert c.gpu_uuids(1, 8)[:2] == c.gpu_uuids(1, 2)


def test_daemon_json_has_own_roots_socket_gpus_and_registry() -> None:
    """daemon.json of h2 names its own paths, its GPUs and the insecure lab registry."""
    hp = c.LabPaths(ROOT).host(2)
    d = json.loads(hf.render_daemon_json(hp, 3))
    assert d["hosts"] == ["unix:///lab-root/h2/docker.sock"]
    assert d["data-root"] == f"/lab-root/h2/data-{DEFAULT_ENGINE}", "one data-root per engine"
    assert d["exec-root"] == "/lab-root/h2/exec"
    assert d["pidfile"] == "/lab-root/h2/docker.pid"
    assert d["insecure-registries"] == ["10.213.0.1:5000"]
    assert d["node-generic-resources"] == [f"NVIDIA-GPU={u}" for u in c.gpu_uuids(2, 3)]
    assert d["cgroup-parent"] == "/dsslab-h2"
    assert not any(h.startswith("tcp://") for h in d["hosts"]), "tcp:// delays dockerd ~15 s"


def test_dockerd_argv_points_at_the_config_file() -> None:
    """dockerd gets only --config-file; everything else is in daemon.json."""
    hp = c.LabPaths(ROOT).host(1)
    assert hf.dockerd_argv(hp) == ["dockerd", "--config-file", "/lab-root/h1/daemon.json"]


def test_sshd_config_is_key_only_root_on_host_address() -> None:
    """sshd listens on the host address, allows root (and the lab's non-root user) by key
    only, no passwords or PAM."""
    lab = c.LabPaths(ROOT)
    text = hf.render_sshd_config(lab.host(4), lab)
    opts = dict(line.split(" ", 1) for line in text.splitlines() if line and line[0] != "#")
    assert opts["ListenAddress"] == "10.213.0.14"
    assert opts["PermitRootLogin"] == "prohibit-password"
    assert opts["PasswordAuthentication"] == "no"
    assert opts["KbdInteractiveAuthentication"] == "no"
    assert opts["UsePAM"] == "no"
    assert (opts["MaxStartups"], opts["MaxSessions"]) == ("10:30:100", "10"), "not sshd's defaults"
    assert opts["AuthorizedKeysFile"] == (
        "/lab-root/ssh/authorized_keys /lab-root/users/%u/.ssh/authorized_keys"
    ), "root's keys, then the non-root user's own (lab/users.py)"
    assert opts["HostKey"] == "/lab-root/h4/ssh_host_ed25519_key"
    assert opts["SetEnv"] == (
        "DOCKER_HOST=unix:///lab-root/h4/docker.sock "
        "PATH=/lab-root/h4/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )


def test_ssh_client_config_covers_every_host() -> None:
    """The client config maps lab-h<i> to its address and pins the lab key and known hosts."""
    text = hf.render_ssh_client_config(c.LabPaths(ROOT), 3)
    assert "10.213.0.11 10.213.0.12 10.213.0.13" in text
    assert "IdentityFile /lab-root/ssh/id_ed25519" in text
    assert "Host lab-h3\n  HostName 10.213.0.13" in text


def test_known_hosts_line_names_address_and_hostname() -> None:
    """known_hosts entry lists address and hostname with the key, without the comment."""
    line = hf.known_hosts_line(2, "ssh-ed25519 AAAAC3Nz lab-h2\n")
    assert line == "10.213.0.12,lab-h2 ssh-ed25519 AAAAC3Nz\n"


def test_registry_config_listens_on_bridge_with_given_storage() -> None:
    """The registry listens on 10.213.0.1:5000 and stores under the given directory."""
    text = hf.render_registry_config(Path("/cache/lab-registry"))
    assert "addr: 10.213.0.1:5000" in text
    assert "rootdirectory: /cache/lab-registry" in text


def test_registry_storage_lives_in_dss_cache() -> None:
    """Registry storage is $DSS_CACHE/lab-registry (survives lab down), else under HOME."""
    assert c.registry_storage({"DSS_CACHE": "/c"}) == Path("/c/lab-registry")
    assert c.registry_storage({"HOME": "/h"}) == Path("/h/.cache/deepspeed-swarm/lab-registry")


def test_lab_root_default_and_override() -> None:
    """DSS_LAB_ROOT overrides /var/lib/dss-lab."""
    assert c.lab_root({}) == Path("/var/lib/dss-lab")
    assert c.lab_root({"DSS_LAB_ROOT": "/x"}) == Path("/x")


def test_parse_cgroup_mounts_keeps_controllers_and_names() -> None:
    """v1 hierarchies keep their controllers, named ones get none,name=..., cgroup2 found."""
    got = {m.path: (m.fstype, m.options) for m in hf.parse_cgroup_mounts(MOUNTINFO)}
    assert got == {
        "/sys/fs/cgroup/cpu": ("cgroup", "cpu"),
        "/sys/fs/cgroup/cpu,cpuacct": ("cgroup", "cpu,cpuacct"),
        "/sys/fs/cgroup/memory": ("cgroup", "memory"),
        "/sys/fs/cgroup/systemd": ("cgroup", "none,xattr,name=systemd"),
        "/sys/fs/cgroup/unified": ("cgroup2", ""),
    }


def test_host_script_remounts_sysfs_cgroups_and_runs_dockerd() -> None:
    """The host script mounts a fresh sysfs, every cgroup hierarchy, own /run, then dockerd."""
    hp = c.LabPaths(ROOT).host(1)
    text = hf.render_host_script(
        hp, hf.parse_cgroup_mounts(MOUNTINFO), {"/sys/fs/cgroup/cpuacct": "cpu,cpuacct"}
    )
    lines = text.splitlines()
    sysfs = lines.index("mount -t sysfs -o nosuid,nodev,noexec sysfs /sys")
    mem = lines.index("mount -t cgroup -o nosuid,nodev,noexec,memory cgroup /sys/fs/cgroup/memory")
    assert sysfs < mem
    assert "mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup/unified" in lines
    assert "ln -sfn cpu,cpuacct /sys/fs/cgroup/cpuacct" in lines
    assert "ln -s /lab-root/h1/docker.sock /run/docker.sock" in lines
    assert "echo lab-h1 > /proc/sys/kernel/hostname" in lines
    assert lines[-1] == "exec dockerd --config-file /lab-root/h1/daemon.json"


def test_host_script_gives_the_host_the_labs_hosts_file() -> None:
    """The host's /etc/hosts is the lab's file for it, before sshd and dockerd start."""
    lines = hf.render_host_script(c.LabPaths(ROOT).host(2), [], {}).splitlines()
    bind = lines.index("mount --bind /lab-root/h2/hosts /etc/hosts")
    assert bind < next(i for i, ln in enumerate(lines) if ln.startswith("/usr/sbin/sshd"))


def test_host_script_gives_the_host_its_own_resolver_file() -> None:
    """The host's resolv.conf is the lab's copy for it, bound over what /etc/resolv.conf
    names (a link into /run is made first), before sshd and dockerd start."""
    lines = hf.render_host_script(c.LabPaths(ROOT).host(2), [], {}).splitlines()
    bind = lines.index('mount --bind /lab-root/h2/resolv.conf "$r"')
    assert lines[bind - 2] == 'r="$(readlink -m /etc/resolv.conf)"'
    assert lines.index("mount -t tmpfs -o nosuid,nodev,mode=755 run /run") < bind
    assert bind < next(i for i, ln in enumerate(lines) if ln.startswith("/usr/sbin/sshd"))


def test_machine_resolv_conf_is_copied_or_empty(tmp_path: Path) -> None:
    """A lab host's resolver file starts as this machine's, or empty where there is none."""
    src = tmp_path / "resolv.conf"
    assert hf.machine_resolv_conf(src) == ""
    src.write_text("nameserver 192.0.2.53\n")
    assert hf.machine_resolv_conf(src) == "nameserver 192.0.2.53\n"


def test_hosts_file_names_every_lab_host() -> None:
    """Loopback, then each lab host's address and name: a reverse lookup of a peer
    answers from the file, never from a nameserver the namespaces cannot reach."""
    lines = hf.render_etc_hosts(3).splitlines()
    assert lines[0].split() == ["127.0.0.1", "localhost"]
    assert [ln.split() for ln in lines[2:]] == [[c.host_addr(i), c.host_name(i)] for i in (1, 2, 3)]


def test_iptables_rules_are_tagged_and_found_again() -> None:
    """Every rule the lab adds carries the lab comment and is recovered from `iptables -S`."""
    rules = hf.iptables_rules()
    saved = "-P FORWARD DROP\n-A FORWARD -j DOCKER-USER\n" + "".join(
        "-A " + " ".join(r) + "\n" for r in rules
    )
    saved += '-A FORWARD -i x -m comment --comment "other" -j ACCEPT\n'
    assert hf.lab_rules_from_save(saved) == rules


def test_status_dict_lists_endpoints_per_host() -> None:
    """status --json names netns, address, unix and ssh endpoints, GPUs and shared paths."""
    st = c.status_dict(ROOT, 2, 1, 9100)
    h2 = st["hosts"][1]
    assert h2["netns"] == "dsslab-h2"
    assert h2["docker_unix"] == "unix:///lab-root/h2/docker.sock"
    assert h2["docker_ssh"] == "ssh://root@10.213.0.12"
    assert h2["gpu_uuids"] == c.gpu_uuids(2, 1)
    assert st["registry"] == "10.213.0.1:5000"
    assert st["shared_dir"] == "/lab-root/shared"
    assert st["ssh_key"] == "/lab-root/ssh/id_ed25519"
    assert st["bridge_mtu"] == 9100


def test_fake_nvidia_smi_reads_host_gpu_list(tmp_path: Path) -> None:
    """The fake nvidia-smi answers the facts query from the host's GPU list."""

    hp = c.HostPaths(tmp_path, 3)
    hp.dir.mkdir()
    hp.gpu_list.write_text("GPU-a\nGPU-b\n")
    hp.driver_version.write_text("550.54.15\n")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(hf.render_fake_nvidia_smi(hp))
    query = ["sh", str(smi), "--query-gpu=uuid,driver_version", "--format=csv,noheader,nounits"]
    out = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    assert out == "GPU-a, 550.54.15\nGPU-b, 550.54.15\n"
    listing = subprocess.run(["sh", str(smi), "-L"], capture_output=True, text=True, check=True)
    assert listing.stdout.splitlines()[1] == "GPU 1: Lab Fake GPU (UUID: GPU-b)"


def run_fake_ctk(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`script` run with lab host 3's fake nvidia-ctk first on PATH."""
    hp = c.HostPaths(tmp_path, 3)
    hp.dir.mkdir(exist_ok=True)
    hp.bin_dir.mkdir(exist_ok=True)
    ctk = hp.bin_dir / "nvidia-ctk"
    ctk.write_text(hf.render_fake_nvidia_ctk(hp))
    ctk.chmod(0o755)
    env = {**os.environ, "PATH": f"{hp.bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)


def test_fake_nvidia_ctk_absent_toolkit_prints_nothing(tmp_path: Path) -> None:
    """Without a toolkit-version file the fake reports no toolkit: the facts see none."""
    assert run_fake_ctk(tmp_path, TOOLKIT_SCRIPT).stdout == ""
    assert run_fake_ctk(tmp_path, "nvidia-ctk --version").returncode == 127


def test_fake_nvidia_ctk_reports_version_and_default_mode(tmp_path: Path) -> None:
    """With only a version file the toolkit runs its default mode, auto."""
    c.HostPaths(tmp_path, 3).dir.mkdir()
    c.HostPaths(tmp_path, 3).toolkit_version.write_text("1.18.2\n")
    out = run_fake_ctk(tmp_path, TOOLKIT_SCRIPT).stdout
    assert out == "toolkit_version=1.18.2\ntoolkit_mode=auto\n"


def test_fake_nvidia_ctk_prints_the_host_config(tmp_path: Path) -> None:
    """`nvidia-ctk config` prints the host's config.toml, whose runtime mode the facts read."""
    hp = c.HostPaths(tmp_path, 3)
    hp.dir.mkdir()
    hp.toolkit_version.write_text("1.18.2\n")
    hp.toolkit_config.write_text('[nvidia-container-runtime]\nmode = "legacy"\n')
    out = run_fake_ctk(tmp_path, TOOLKIT_SCRIPT).stdout
    assert out == "toolkit_version=1.18.2\ntoolkit_mode=legacy\n"
