"""Pure functions: the lab's names, addresses and paths (lab/hostfiles.py renders the
files and argv each host is started with).

Nothing here touches the system, so all of it is unit-tested without daemons.
The fixed values follow docs/architecture.md ("The lab").
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.layout import GPU_RESOURCE
from lab.gpus import LabGpus, lab_gpus

DEFAULT_ROOT = "/var/lib/dss-lab"
BRIDGE = "dsslab0"
SUBNET_PREFIX = "10.213.0"
BRIDGE_ADDR = f"{SUBNET_PREFIX}.1"
PREFIX_LEN = 24
DEFAULT_MTU = 9100
REGISTRY_PORT = 5000
REGISTRY_ADDR = f"{BRIDGE_ADDR}:{REGISTRY_PORT}"
NETNS_PREFIX = "dsslab-h"
CGROUP_PREFIX = "dsslab-"
REGISTRY_CGROUP = "dsslab-registry"
IPTABLES_COMMENT = "dsslab"
MAX_HOSTS = 200
# Fixed namespace for the fake GPU UUIDs: same host index + GPU index -> same UUID, always.
GPU_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "gpu.dsslab.deepspeed-swarm")


def lab_root(env: dict[str, str] | None = None) -> Path:
    """The lab root: DSS_LAB_ROOT or /var/lib/dss-lab."""
    e = os.environ if env is None else env
    return Path(e.get("DSS_LAB_ROOT") or DEFAULT_ROOT)


def registry_storage(env: dict[str, str] | None = None) -> Path:
    """Registry storage under DSS_CACHE, so pushed images survive lab down/up."""
    e = os.environ if env is None else env
    home = e.get("HOME") or str(Path.home())
    cache = e.get("DSS_CACHE") or str(Path(home) / ".cache/deepspeed-swarm")
    return Path(cache) / "lab-registry"


def host_name(i: int) -> str:
    return f"lab-h{i}"


def netns_name(i: int) -> str:
    return f"{NETNS_PREFIX}{i}"


def veth_name(i: int) -> str:
    """Root-namespace end of host i's veth (at most 15 characters)."""
    return f"dssl{i}"


def cgroup_name(i: int) -> str:
    return f"{CGROUP_PREFIX}h{i}"


def host_addr(i: int) -> str:
    if not 1 <= i <= MAX_HOSTS:
        raise ValueError(f"host index {i} outside 1..{MAX_HOSTS}")
    return f"{SUBNET_PREFIX}.{10 + i}"


def gpu_uuids(i: int, gpus: int) -> list[str]:
    """Deterministic fake GPU UUIDs of host i, like nvidia-smi's GPU-xxxxxxxx-...."""
    return [f"GPU-{uuid.uuid5(GPU_UUID_NAMESPACE, f'{host_name(i)}/gpu{g}')}" for g in range(gpus)]


@dataclass(frozen=True)
class HostPaths:
    """Where host i keeps its state under the lab root."""

    root: Path
    index: int

    @property
    def dir(self) -> Path:
        return self.root / f"h{self.index}"

    @property
    def socket(self) -> Path:
        return self.dir / "docker.sock"

    def data_root(self, engine: str) -> Path:
        """Per engine, so switching engines never reads another engine's state."""
        return self.dir / f"data-{engine}"

    @property
    def exec_root(self) -> Path:
        return self.dir / "exec"

    @property
    def pidfile(self) -> Path:
        return self.dir / "docker.pid"

    @property
    def daemon_json(self) -> Path:
        return self.dir / "daemon.json"

    @property
    def etc_docker(self) -> Path:
        return self.dir / "etc-docker"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def etc_hosts(self) -> Path:
        """The host's /etc/hosts (bind-mounted in its mount namespace): every lab host."""
        return self.dir / "hosts"

    @property
    def resolv_conf(self) -> Path:
        """The host's /etc/resolv.conf (bind-mounted in its mount namespace): this
        machine's, copied at `lab up`, so a test can give one host a resolver of its own."""
        return self.dir / "resolv.conf"

    @property
    def sshd_pid(self) -> Path:
        return self.dir / "sshd.pid"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def dockerd_log(self) -> Path:
        return self.dir / "dockerd.log"

    @property
    def sshd_log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def init_script(self) -> Path:
        return self.dir / "init.sh"

    @property
    def bin_dir(self) -> Path:
        """First on PATH in the host's SSH sessions: the fake `nvidia-smi` and `nvidia-ctk`."""
        return self.dir / "bin"

    @property
    def gpu_list(self) -> Path:
        """The host's fake GPUs, one UUID a line (edit it to simulate a lost GPU)."""
        return self.dir / "gpus"

    @property
    def driver_version(self) -> Path:
        """The fake NVIDIA driver version the host reports."""
        return self.dir / "driver-version"

    @property
    def toolkit_version(self) -> Path:
        """The NVIDIA container toolkit version the fake `nvidia-ctk --version` reports;
        absent (as `lab up` leaves it): the toolkit is not installed."""
        return self.dir / "toolkit-version"

    @property
    def rdma_devinfo(self) -> Path:
        """What the fake `ibv_devinfo -v -d <dev>` prints: one file per RDMA device, named
        after it; none (as `lab up` leaves it): the host has no RDMA device."""
        return self.dir / "ibv_devinfo"

    @property
    def kernel_modules(self) -> Path:
        """The module lines (as `lsmod` prints them) the fake `lsmod` adds to its
        header, e.g. `nvidia_peermem 16384 0`; absent: no module of interest loaded."""
        return self.dir / "modules"

    @property
    def gpu_health(self) -> Path:
        """Per-GPU faults the fake nvidia-smi reports, one GPU a line: `<uuid> <uncorrected
        ECC count> <retired pages pending> <rows pending remap> <row remap failed>` (the
        flags `Yes`/`No`); a GPU not listed (or no file, as `lab up` leaves it) is healthy."""
        return self.dir / "gpu-health"

    @property
    def dcgm_diag(self) -> Path:
        """What the fake `dcgmi diag -r <level> -j` prints (lab/hostfiles.py
        dcgm_diag_json); absent (as `lab up` leaves it): every GPU passes."""
        return self.dir / "dcgm-diag.json"

    @property
    def kernel_log(self) -> Path:
        """What the fake `dmesg` prints (e.g. an `NVRM: Xid` line); absent: nothing."""
        return self.dir / "kernel-log"

    @property
    def toolkit_config(self) -> Path:
        """What the fake `nvidia-ctk config` prints (the runtime's config.toml); absent:
        the toolkit's defaults, whose `mode` is "auto"."""
        return self.dir / "toolkit-config.toml"


@dataclass(frozen=True)
class LabPaths:
    root: Path

    def host(self, i: int) -> HostPaths:
        return HostPaths(self.root, i)

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def ssh_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.ssh_dir / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "config"

    @property
    def ssh_bin(self) -> Path:
        """Folder with an `ssh` wrapper using the lab config: put it first on PATH for
        `DOCKER_HOST=ssh://root@10.213.0.11 docker ...` (the docker CLI calls plain `ssh`)."""
        return self.ssh_dir / "bin"

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def state(self) -> Path:
        return self.root / "lab.json"

    @property
    def registry_dir(self) -> Path:
        return self.root / "registry"

    @property
    def registry_config(self) -> Path:
        return self.registry_dir / "config.yml"

    @property
    def registry_pid(self) -> Path:
        return self.registry_dir / "registry.pid"

    @property
    def registry_log(self) -> Path:
        return self.registry_dir / "registry.log"


def ssh_opts(lab: LabPaths) -> list[str]:
    """ssh options that reach the lab hosts (e.g. for pulumi-docker's provider `ssh_opts`)."""
    return [
        "-i",
        str(lab.ssh_key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={lab.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]


def status_dict(
    root: Path,
    hosts: int,
    gpus: int | LabGpus,
    mtu: int,
    live: dict[int, dict[str, Any]] | None = None,
    registry_up: bool | None = None,
) -> dict[str, Any]:
    """What `lab status --json` prints; gpus: each host's (lab/gpus.py), or one count
    of the default model for every host; live: per-host facts read from the daemons.
    `gpus_per_host` is None where the hosts' counts differ (each host says its own)."""
    lab = LabPaths(root)
    per_host = gpus if isinstance(gpus, LabGpus) else lab_gpus(hosts, max(gpus, 0))
    out_hosts = []
    for i in range(1, hosts + 1):
        hp = lab.host(i)
        h: dict[str, Any] = {
            "index": i,
            "name": host_name(i),
            "netns": netns_name(i),
            "address": host_addr(i),
            "docker_unix": f"unix://{hp.socket}",
            "docker_ssh": f"ssh://root@{host_addr(i)}",
            "ssh_user": "root",
            "gpu_uuids": gpu_uuids(i, per_host.count(i)),
            "gpus": per_host.count(i),
            "gpu_model": per_host.model(i),
        }
        if live is not None:
            h.update(live.get(i, {}))
        out_hosts.append(h)
    return {
        "root": str(root),
        "bridge": BRIDGE,
        "bridge_addr": f"{BRIDGE_ADDR}/{PREFIX_LEN}",
        "bridge_mtu": mtu,
        "registry": REGISTRY_ADDR,
        "registry_up": registry_up,
        "shared_dir": str(lab.shared),
        "ssh_key": str(lab.ssh_key),
        "ssh_known_hosts": str(lab.known_hosts),
        "ssh_config": str(lab.ssh_config),
        "ssh_opts": ssh_opts(lab),
        "ssh_path_dir": str(lab.ssh_bin),
        "gpu_resource": GPU_RESOURCE,
        "gpus_per_host": gpus if isinstance(gpus, int) else gpus.uniform_count,
        "hosts": out_hosts,
    }
