"""Pure functions: the files and argv each lab host is started with (daemon.json,
dockerd, sshd, the fake nvidia-smi, SSH client files, the registry config, the host
script) and the lab's iptables rules. Nothing here touches the system.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.layout import GPU_RESOURCE
from lab import users
from lab.config import (
    BRIDGE,
    IPTABLES_COMMENT,
    REGISTRY_ADDR,
    HostPaths,
    LabPaths,
    cgroup_name,
    gpu_uuids,
    host_addr,
    host_name,
)
from lab.engines import DEFAULT_ENGINE, ENGINES, Engine
from lab.gpus import DEFAULT_GPU_MODEL, display_name

DEFAULT = ENGINES[DEFAULT_ENGINE]


def daemon_config(paths: HostPaths, gpus: int, engine: Engine = DEFAULT) -> dict[str, Any]:
    """daemon.json of host i: own roots, socket, fake GPUs, the lab registry, and what
    the engine needs on top (lab/engines.py `daemon_overrides`)."""
    i = paths.index
    cfg: dict[str, Any] = {
        "hosts": [f"unix://{paths.socket}"],
        "data-root": str(paths.data_root(engine.name)),
        "exec-root": str(paths.exec_root),
        "pidfile": str(paths.pidfile),
        "cgroup-parent": f"/{cgroup_name(i)}",
        "exec-opts": ["native.cgroupdriver=cgroupfs"],
        "storage-driver": "overlay2",
        "insecure-registries": [REGISTRY_ADDR],
        "node-generic-resources": [f"{GPU_RESOURCE}={u}" for u in gpu_uuids(i, gpus)],
        "labels": [f"dsslab.host={host_name(i)}", f"dsslab.gpus={gpus}"],
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "2"},
    }
    cfg.update(engine.daemon_overrides)
    return cfg


def render_daemon_json(paths: HostPaths, gpus: int, engine: Engine = DEFAULT) -> str:
    return json.dumps(daemon_config(paths, gpus, engine), indent=2, sort_keys=True) + "\n"


def dockerd_argv(paths: HostPaths, bin_dir: Path | None = None) -> list[str]:
    """dockerd command line (everything else is in daemon.json); bin_dir: the engine's
    binaries, None for the system's dockerd on PATH."""
    dockerd = str(bin_dir / "dockerd") if bin_dir else "dockerd"
    return [dockerd, "--config-file", str(paths.daemon_json)]


SSHD_DEFAULT_MAX_STARTUPS = "10:30:100"
"""OpenSSH's default `MaxStartups` (sshd_config(5)): unauthenticated connections at once."""
SSHD_DEFAULT_MAX_SESSIONS = 10
"""OpenSSH's default `MaxSessions` (sshd_config(5)): sessions on one connection."""


def render_sshd_config(paths: HostPaths, lab: LabPaths) -> str:
    """sshd_config of host i: root and the non-root user (lab/users.py) with the lab
    key only, docker CLI aimed at the host's daemon, OpenSSH's default connection
    limits."""
    lines = [
        "# written by `python -m lab up`",
        "Port 22",
        f"ListenAddress {host_addr(paths.index)}",
        f"HostKey {paths.host_key}",
        f"PidFile {paths.sshd_pid}",
        # root's keys, then each user's own under the lab root (lab/users.py: sshd
        # reads a user's file as that user, who cannot read root's lab ssh folder).
        f"AuthorizedKeysFile {lab.authorized_keys} {users.authorized_keys(lab, '%u')}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitEmptyPasswords no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        # OpenSSH's own defaults, written out: a prod host's sshd refuses start-ups past
        # 10 at once (randomly from 10, all at 100) and more than 10 sessions on one
        # connection, and the lab must find what would hit those limits there.
        f"MaxStartups {SSHD_DEFAULT_MAX_STARTUPS}",
        f"MaxSessions {SSHD_DEFAULT_MAX_SESSIONS}",
        "Subsystem sftp internal-sftp",
        f"SetEnv DOCKER_HOST=unix://{paths.socket} PATH={paths.bin_dir}:{STD_PATH}",
    ]
    return "\n".join(lines) + "\n"


STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAKE_DRIVER_VERSION = "550.54.15"


def render_fake_nvidia_smi(paths: HostPaths, model: str = DEFAULT_GPU_MODEL) -> str:
    """A stand-in `nvidia-smi` answering the queries the project makes (`-L`,
    `--query-gpu=uuid,driver_version`, and the GPU health queries of
    infra/providers/health.py, in `csv,noheader,nounits`) from the host's GPU list and
    its faults file, so host facts (and their drift) can be read from a lab host as
    from a GPU server. `-L` names each GPU by the host's `model` (lab/gpus.py
    display_name: the model itself, `Lab Fake GPU` for the default)."""
    name = display_name(model)  # letters, digits, '.', '_', '-' or spaces: safe in "..."
    return f"""#!/bin/sh
# written by `python -m lab up`: a fake nvidia-smi for lab host {paths.index}
gpus={shlex.quote(str(paths.gpu_list))}
health={shlex.quote(str(paths.gpu_health))}
driver=$(cat {shlex.quote(str(paths.driver_version))})
# A GPU's faults: "<ecc> <retired pending> <remap pending> <remap failed>" (healthy default).
faults() {{ f=$(grep -s "^$1 " "$health" | head -n1 | cut -d' ' -f2-); echo "${{f:-0 No No No}}"; }}
case "$*" in
  *--query-gpu=uuid,driver_version*)
    while read -r uuid; do [ -n "$uuid" ] && echo "$uuid, $driver"; done < "$gpus" ;;
  *--query-gpu=uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending*)
    while read -r uuid; do [ -n "$uuid" ] || continue
      set -- $(faults "$uuid"); echo "$uuid, $1, $2"; done < "$gpus" ;;
  *--query-gpu=uuid,remapped_rows.pending,remapped_rows.failure*)
    while read -r uuid; do [ -n "$uuid" ] || continue
      set -- $(faults "$uuid"); echo "$uuid, $3, $4"; done < "$gpus" ;;
  *-L*)
    n=0; while read -r uuid; do
      [ -n "$uuid" ] && echo "GPU $n: {name} (UUID: $uuid)" && n=$((n + 1)); done < "$gpus" ;;
  *) echo "lab nvidia-smi: only -L and the project's --query-gpu queries are faked" >&2; exit 2 ;;
esac
"""


def render_fake_nvidia_ctk(paths: HostPaths) -> str:
    """A stand-in `nvidia-ctk` answering what host facts ask it (`--version`, and
    `config`: the runtime's config.toml) from the host's toolkit files, in the real
    tool's format (urfave/cli's `<name> version <v>`). Without the version file it is
    not installed: nothing on stdout, exit 127, as when `command -v` finds nothing."""
    version = shlex.quote(str(paths.toolkit_version))
    config = shlex.quote(str(paths.toolkit_config))
    return f"""#!/bin/sh
# written by `python -m lab up`: a fake nvidia-ctk for lab host {paths.index}
[ -f {version} ] || {{ echo "lab nvidia-ctk: no toolkit on this host" >&2; exit 127; }}
case "$1" in
  --version|-v) echo "NVIDIA Container Toolkit CLI version $(cat {version})"; echo "commit: lab" ;;
  config)
    if [ -f {config} ]; then cat {config}
    else printf '[nvidia-container-runtime]\\nmode = "auto"\\n'; fi ;;
  *) echo "lab nvidia-ctk: only --version and config are faked" >&2; exit 2 ;;
esac
"""


def render_fake_ibv_devinfo(paths: HostPaths) -> str:
    """A stand-in rdma-core `ibv_devinfo` answering `-v -d <dev>` (the host facts'
    query) from the host's files, in the real tool's format (its text is what a test
    writes: render_devinfo, from devinfo.c's printf formats). A device
    without a file is not there: the real tool's message and exit status."""
    d = shlex.quote(str(paths.rdma_devinfo))
    return f"""#!/bin/sh
# written by `python -m lab up`: a fake ibv_devinfo for lab host {paths.index}
dev=""
while [ $# -gt 0 ]; do
  case "$1" in -d) dev="$2"; shift ;; -d*) dev="${{1#-d}}" ;; esac
  shift
done
if [ -z "$dev" ]; then
  dev=$(ls {d} 2>/dev/null | head -n1)
  [ -n "$dev" ] || {{ echo "No IB devices found"; exit 0; }}
fi
[ -f {d}/"$dev" ] || {{ echo "IB device '$dev' wasn't found" >&2; exit 255; }}
cat {d}/"$dev"
"""


def render_devinfo(
    dev: str,
    state: str = "PORT_ACTIVE",
    link_layer: str = "Ethernet",
    active_mtu: int = 4096,
    gids: dict[int, str] | None = None,
) -> str:
    """What `ibv_devinfo -v -d <dev>` prints for a one-port NIC, line for line in the
    printf formats of rdma-core's libibverbs/examples/devinfo.c (tabs included; the
    device capability lines cut). `gids`: index -> `RoCE v1` / `RoCE v2` (the default:
    a RoCE v1 and a v2 GID for the link-local and for an IPv4 address, indexes 0-3)."""
    states = {"PORT_DOWN": 1, "PORT_INIT": 2, "PORT_ARMED": 3, "PORT_ACTIVE": 4}
    mtus = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
    if gids is None:
        gids = {0: "RoCE v1", 1: "RoCE v2", 2: "RoCE v1", 3: "RoCE v2"}
    lines = [
        f"hca_id:\t{dev}",
        "\ttransport:\t\t\tInfiniBand (0)",
        "\tfw_ver:\t\t\t\t22.39.1002",
        "\tphys_port_cnt:\t\t\t1",
        "\t\tport:\t1",
        f"\t\t\tstate:\t\t\t{state} ({states.get(state, 0)})",
        "\t\t\tmax_mtu:\t\t4096 (5)",
        f"\t\t\tactive_mtu:\t\t{active_mtu} ({mtus.get(active_mtu, 0)})",
        "\t\t\tsm_lid:\t\t\t0",
        f"\t\t\tlink_layer:\t\t{link_layer}",
        "\t\t\tphys_state:\t\tLINK_UP (5)",
    ]
    for i, kind in sorted(gids.items()):
        # v2 GIDs through inet_ntop (compressed), v1 as full hex; the type only on Ethernet.
        gid = (
            "::ffff:10.213.0.1" if kind == "RoCE v2" else "fe80:0000:0000:0000:0e42:a1ff:fef1:2a3e"
        )
        suffix = f", {kind}" if link_layer == "Ethernet" else ""
        lines.append(f"\t\t\tGID[{i:3d}]:\t\t{gid}{suffix}")
    return "\n".join(lines) + "\n"


def render_fake_dmesg(paths: HostPaths) -> str:
    """A stand-in `dmesg`: the host's kernel log file (a test writes the driver's Xid
    lines there), not the machine's, which is not the lab host's business."""
    log = shlex.quote(str(paths.kernel_log))
    return f"""#!/bin/sh
# written by `python -m lab up`: a fake dmesg for lab host {paths.index}
[ -f {log} ] && cat {log}
exit 0
"""


def xid_line(seconds: float, code: int, pci: str = "0000:3b:00", what: str = "") -> str:
    """A kernel log line as the NVIDIA driver prints an Xid (open-gpu-kernel-modules
    kernel_rc.c `krcReportXid`), with dmesg's seconds since boot."""
    what = what or {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error"}.get(
        code, ""
    )
    return f"[{seconds:12.6f}] NVRM: Xid (PCI:{pci}): {code}, pid=4242, name=python, {what}\n"


def dcgm_diag_json(gpus: int, failed: dict[int, str] | None = None, major: int = 4) -> str:
    """What `dcgmi diag -r 1 -j` prints for `gpus` GPUs, `failed` GPU index -> the
    warning, in DCGM 4.x's layout (`DCGM Diagnostic`, the level-1 `software` test, one
    result per entity) or 3.x's (`DCGM GPU Diagnostic`, the Deployment tests, one result
    each, a failed one naming its `gpu_id`, its text under `warnings`), as
    NVIDIA/DCGM dcgmi/Diag.cpp builds them (key names in NvvsJsonStrings.h)."""
    failed = failed or {}
    if major >= 4:
        results = [
            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": g, "status": "Pass"}
            | ({"status": "Fail", "warnings": [{"warning": failed[g], "error_id": 29}]}
               if g in failed else {})
            for g in range(gpus)
        ]  # fmt: skip
        summary = "Fail" if failed else "Pass"
        test = {"name": "software", "results": results, "test_summary": {"status": summary}}
        doc: dict[str, object] = {
            "metadata": {"version": "4.2.3", "Driver Version Detected": FAKE_DRIVER_VERSION},
            "DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [test]}]},
        }
    else:
        tests: list[dict[str, object]] = [
            {"name": "Denylist", "results": [{"status": "Pass"}]},
            {"name": "Persistence Mode", "results": [{"status": "Pass"}]},
        ]
        tests += [
            {"name": "Page Retirement/Row Remap", "results": [
                {"status": "Fail", "gpu_id": g, "warnings": [{"warnings": text, "error_id": 29}]}
            ]}
            for g, text in sorted(failed.items())
        ]  # fmt: skip
        doc = {
            "version": "3.3.9",
            "DCGM GPU Diagnostic": {
                "test_categories": [{"category": "Deployment", "tests": tests}]
            },
        }
    return json.dumps(doc, indent=4) + "\n"


def render_fake_dcgmi(paths: HostPaths, gpus: int) -> str:
    """A stand-in `dcgmi` that answers `diag -r <level> -j`: the host's diagnostic file
    (a test writes a failed one with dcgm_diag_json), else every GPU passing; exit 226
    (DCGM_ST_NVVS_ERROR) when a test failed, as dcgmi does."""
    diag = shlex.quote(str(paths.dcgm_diag))
    healthy = dcgm_diag_json(gpus)
    return f"""#!/bin/sh
# written by `python -m lab up`: a fake dcgmi for lab host {paths.index}
case "$1 $2" in
  "diag -r") ;;
  *) echo "lab dcgmi: only diag -r <level> -j is faked" >&2; exit 2 ;;
esac
if [ -f {diag} ]; then
  cat {diag}
  grep -q '"Fail"' {diag} && exit 226
  exit 0
fi
cat <<'JSON'
{healthy}JSON
"""


def render_fake_lsmod(paths: HostPaths) -> str:
    """A stand-in `lsmod`: its header and the host's module lines (the machine's own
    modules are not the lab host's business)."""
    mods = shlex.quote(str(paths.kernel_modules))
    return f"""#!/bin/sh
# written by `python -m lab up`: a fake lsmod for lab host {paths.index}
echo "Module                  Size  Used by"
[ -f {mods} ] && cat {mods}
exit 0
"""


def render_ssh_client_config(lab: LabPaths, hosts: int) -> str:
    """An ssh_config for `ssh -F`: every lab address with the lab key and known hosts."""
    addrs = " ".join(host_addr(i) for i in range(1, hosts + 1))
    names = " ".join(host_name(i) for i in range(1, hosts + 1))
    out = [f"Host {addrs} {names}"]
    out += [
        "  User root",
        f"  IdentityFile {lab.ssh_key}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {lab.known_hosts}",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 10",
    ]
    for i in range(1, hosts + 1):
        out += [f"Host {host_name(i)}", f"  HostName {host_addr(i)}"]
    return "\n".join(out) + "\n"


def render_ssh_wrapper(lab: LabPaths) -> str:
    return f'#!/bin/sh\nexec /usr/bin/ssh -F {shlex.quote(str(lab.ssh_config))} "$@"\n'


def known_hosts_line(i: int, pubkey: str) -> str:
    """known_hosts entry of host i (pubkey: the `.pub` file's text)."""
    kind, blob = pubkey.split()[:2]
    return f"{host_addr(i)},{host_name(i)} {kind} {blob}\n"


def render_registry_config(storage: Path) -> str:
    """docker-registry (distribution v2) config: plain HTTP on the bridge address."""
    return (
        "version: 0.1\n"
        "log:\n"
        "  level: warn\n"
        "  accesslog:\n"
        "    disabled: true\n"
        "storage:\n"
        "  filesystem:\n"
        f"    rootdirectory: {storage}\n"
        "  delete:\n"
        "    enabled: true\n"
        "http:\n"
        f"  addr: {REGISTRY_ADDR}\n"
        "  headers:\n"
        "    X-Content-Type-Options: [nosniff]\n"
    )


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup hierarchy as mounted in the root mount namespace."""

    path: str  # e.g. /sys/fs/cgroup/memory
    fstype: str  # cgroup or cgroup2
    options: str  # e.g. "memory" or "none,name=systemd"


_CGROUP_V1_FLAGS = {"xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods"}
_GENERIC_OPTS = {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "nsdelegate"}


def parse_cgroup_mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup hierarchies under /sys/fs/cgroup, from /proc/self/mountinfo text."""
    found: list[CgroupMount] = []
    seen: set[str] = set()
    for line in mountinfo.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, pfields = pre.split(), post.split()
        if len(fields) < 5 or len(pfields) < 3:
            continue
        mountpoint, fstype = fields[4], pfields[0]
        if fstype not in ("cgroup", "cgroup2") or not mountpoint.startswith("/sys/fs/cgroup/"):
            continue
        if mountpoint in seen:
            continue
        seen.add(mountpoint)
        opts = [o for o in pfields[2].split(",") if o not in _GENERIC_OPTS]
        if fstype == "cgroup":
            opts = [o for o in opts if not o.startswith("release_agent")]
            names = [o for o in opts if o.startswith("name=")]
            flags = [o for o in opts if o in _CGROUP_V1_FLAGS]
            ctrls = [o for o in opts if o not in flags and o not in names]
            options = ",".join((ctrls or ["none"]) + flags + names)
        else:
            options = ""
        found.append(CgroupMount(mountpoint, fstype, options))
    return found


def render_host_script(
    paths: HostPaths,
    cgroups: list[CgroupMount],
    cgroup_links: dict[str, str],
    bin_dir: Path | None = None,
) -> str:
    """The shell that becomes host i, run as: nsenter --net=<netns> unshare -m -u
    --propagation private sh <script>.

    It joins the host's cgroup (so `lab down` finds every process), gives the host a
    fresh sysfs (its own net devices; the overlay driver reads bridge attributes there)
    and re-mounts the cgroup v1 hierarchies that mounting sysfs hides, a private /run
    (so /var/run/docker.sock is the host's own daemon, as docker over ssh:// expects),
    its own /etc/docker (engine key), hostname, starts sshd and becomes dockerd.
    bin_dir (an installed engine's binaries) goes first on dockerd's PATH: dockerd finds
    containerd, runc, docker-init and docker-proxy there, containerd its shim, the shim runc.
    """
    i = paths.index
    q = shlex.quote
    cg = cgroup_name(i)
    lines = [
        "#!/bin/sh",
        f"# lab host {host_name(i)}: written by `python -m lab up`",
        "set -eu",
        "for c in /sys/fs/cgroup/*/; do",
        f'  if [ -f "${{c}}{cg}/cgroup.procs" ]; then echo $$ > "${{c}}{cg}/cgroup.procs"; fi',
        "done",
        "mount --make-rprivate /",
        f"echo {host_name(i)} > /proc/sys/kernel/hostname",
        "mount -t sysfs -o nosuid,nodev,noexec sysfs /sys",
        "mount -t tmpfs -o nosuid,nodev,noexec,mode=755 cgroup /sys/fs/cgroup",
    ]
    for m in cgroups:
        lines.append(f"mkdir -p {q(m.path)}")
        if m.fstype == "cgroup2":
            lines.append(f"mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 {q(m.path)}")
        else:
            lines.append(f"mount -t cgroup -o nosuid,nodev,noexec,{m.options} cgroup {q(m.path)}")
    for link, target in sorted(cgroup_links.items()):
        lines.append(f"ln -sfn {q(target)} {q(link)}")
    lines += [
        "mount -t tmpfs -o nosuid,nodev,mode=755 run /run",
        "mkdir -p /run/sshd /run/lock",
        f"ln -s {q(str(paths.socket))} /run/docker.sock",
        f"mount --bind {q(str(paths.etc_docker))} /etc/docker",
        f"mount --bind {q(str(paths.etc_hosts))} /etc/hosts",
        # The machine's /etc/resolv.conf may be a link into /run, which is the host's
        # own (empty) tmpfs here: bind over what the link names, made first.
        'r="$(readlink -m /etc/resolv.conf)"',
        'mkdir -p "$(dirname "$r")" && touch "$r"',
        f'mount --bind {q(str(paths.resolv_conf))} "$r"',
        "ip link set lo up",
        f"/usr/sbin/sshd -f {q(str(paths.sshd_config))} -E {q(str(paths.sshd_log))}",
    ]
    if bin_dir is not None:
        lines.append(f"export PATH={q(str(bin_dir))}:$PATH")
    lines.append("exec " + " ".join(q(a) for a in dockerd_argv(paths, bin_dir)))
    return "\n".join(lines) + "\n"


def render_etc_hosts(hosts: int) -> str:
    """Each lab host's /etc/hosts: loopback and every lab host's name and address.

    A cluster's hosts know each other by name (DNS or /etc/hosts; the runbook's step 0 in
    docs/dataplane.md checks it), and the lab's must too: a task on the host network
    uses its host's /etc/hosts and resolver, rank 0's c10d store looks up every peer's
    address, and this machine's nameserver, which the lab hosts use, cannot be reached
    from their namespaces, so each lookup there waited 10 s for its timeout (8 hosts:
    70 s, past the gate's limit)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{host_addr(i)}\t{host_name(i)}" for i in range(1, hosts + 1)]
    return "\n".join(lines) + "\n"


def machine_resolv_conf(path: Path = Path("/etc/resolv.conf")) -> str:
    """This machine's resolver configuration, for a lab host's own copy (empty where the
    machine has none: glibc then asks a nameserver on loopback)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def iptables_rules(bridge: str = BRIDGE) -> list[list[str]]:
    """Root-netns rules the lab adds (after `iptables -I`), all tagged with the lab comment.

    dockerd sets the FORWARD policy to DROP; with br_netfilter, bridged frames between lab
    ports pass FORWARD too, so accept bridge-to-bridge traffic; drop routing off the bridge.
    """
    tag = ["-m", "comment", "--comment", IPTABLES_COMMENT]
    return [
        ["FORWARD", "-i", bridge, "-o", bridge, *tag, "-j", "ACCEPT"],
        # Lab hosts reach only each other and the bridge address, never beyond the machine.
        ["FORWARD", "-i", bridge, "!", "-o", bridge, *tag, "-j", "DROP"],
        ["INPUT", "-i", bridge, *tag, "-j", "ACCEPT"],
    ]


def lab_rules_from_save(iptables_s: str) -> list[list[str]]:
    """The `-D`-able specs of lab-tagged rules in `iptables -S` output (found, not remembered)."""
    out: list[list[str]] = []
    for line in iptables_s.splitlines():
        parts = shlex.split(line)
        if len(parts) < 2 or parts[0] != "-A":
            continue
        if "--comment" in parts:
            k = parts.index("--comment")
            if k + 1 < len(parts) and parts[k + 1] == IPTABLES_COMMENT:
                out.append(parts[1:])
    return out
