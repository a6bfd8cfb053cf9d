"""`lab up`: bridge, registry, N hosts (netns + mount/UTS namespace, dockerd, sshd), swarm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lab import config as c
from lab import engine_install as ei
from lab import engines as en
from lab import gpus as lg
from lab import hostfiles as hf
from lab import hostkeys, imagecache, users
from lab import sysops as s
from lab.swarm import form_swarm
from lab.sysops import LabError


def _log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def lab_exists(root: Path) -> bool:
    """Anything of a lab on this machine: namespaces, bridge, cgroups or a state file."""
    return bool(
        s.netns_list(c.NETNS_PREFIX)
        or Path(f"/sys/class/net/{c.BRIDGE}").exists()
        or s.lab_cgroups(c.CGROUP_PREFIX)
        or c.LabPaths(root).state.exists()
    )


def _ssh_keys(lab: c.LabPaths, hosts: int) -> None:
    lab.ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(lab.ssh_dir, 0o700)
    procs: list[subprocess.Popen[bytes]] = []
    if not lab.ssh_key.exists():
        procs.append(_keygen(lab.ssh_key, "dsslab"))
    for i in range(1, hosts + 1):
        hp = lab.host(i)
        if not hp.host_key.exists():
            procs.append(_keygen(hp.host_key, c.host_name(i)))
    for p in procs:
        if p.wait() != 0:
            raise LabError(f"ssh-keygen failed: {p.args!r}")
    pub = Path(str(lab.ssh_key) + ".pub").read_text()
    lab.authorized_keys.write_text(pub)
    os.chmod(lab.authorized_keys, 0o600)
    # known_hosts is written once the hosts' sshd answer (lab/hostkeys.py: scanned and
    # checked, as an operator does for prod).
    lab.ssh_config.write_text(hf.render_ssh_client_config(lab, hosts))
    lab.ssh_bin.mkdir(exist_ok=True)
    wrapper = lab.ssh_bin / "ssh"
    wrapper.write_text(hf.render_ssh_wrapper(lab))
    os.chmod(wrapper, 0o755)


def _keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _bridge(mtu: int) -> None:
    s.run(["ip", "link", "add", c.BRIDGE, "type", "bridge"])
    s.run(["ip", "link", "set", c.BRIDGE, "mtu", str(mtu)])
    s.run(["ip", "addr", "add", f"{c.BRIDGE_ADDR}/{c.PREFIX_LEN}", "dev", c.BRIDGE])
    s.run(["ip", "link", "set", c.BRIDGE, "up"])
    for rule in hf.iptables_rules():
        s.run(["iptables", "-w", "-I", *rule[:1], "1", *rule[1:]])


def _registry(lab: c.LabPaths) -> subprocess.Popen[bytes]:
    storage = c.registry_storage()
    storage.mkdir(parents=True, exist_ok=True)
    lab.registry_dir.mkdir(parents=True, exist_ok=True)
    lab.registry_config.write_text(hf.render_registry_config(storage))
    s.cgroup_create(c.REGISTRY_CGROUP)
    with open(lab.registry_log, "ab") as log:
        p = subprocess.Popen(
            ["/usr/bin/docker-registry", "serve", str(lab.registry_config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _join_cgroup(c.REGISTRY_CGROUP),
        )
    lab.registry_pid.write_text(f"{p.pid}\n")
    return p


def _join_cgroup(name: str) -> None:
    for h in s.hierarchies():
        procs = h / name / "cgroup.procs"
        if procs.exists():
            procs.write_text(str(os.getpid()))


def _host_net(i: int, mtu: int) -> None:
    ns, veth = c.netns_name(i), c.veth_name(i)
    s.run(["ip", "netns", "add", ns])
    s.run(
        [
            "ip",
            "link",
            "add",
            veth,
            "mtu",
            str(mtu),
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "mtu",
            str(mtu),
            "netns",
            ns,
        ]
    )
    s.run(["ip", "link", "set", veth, "master", c.BRIDGE, "up"])
    batch = (
        "\n".join(
            [
                "link set lo up",
                f"addr add {c.host_addr(i)}/{c.PREFIX_LEN} dev eth0",
                "link set eth0 up",
                f"route add default via {c.BRIDGE_ADDR}",
            ]
        )
        + "\n"
    )
    s.run(["ip", "-n", ns, "-batch", "-"], input_text=batch)


def _host_files(
    lab: c.LabPaths,
    i: int,
    hosts: int,
    gpus: lg.LabGpus,
    cgroups: list[hf.CgroupMount],
    links: dict[str, str],
    engine: en.Engine,
) -> None:
    hp = lab.host(i)
    for d in (hp.dir, hp.exec_root, hp.etc_docker):
        d.mkdir(parents=True, exist_ok=True)
    # The images this host's engine pulled in an earlier lab (lab/imagecache.py).
    imagecache.restore(lab.root, hp.dir, hp.data_root(engine.name))
    hp.data_root(engine.name).mkdir(parents=True, exist_ok=True)
    count = gpus.count(i)
    hp.daemon_json.write_text(hf.render_daemon_json(hp, count, engine))
    hp.sshd_config.write_text(hf.render_sshd_config(hp, lab))
    hp.etc_hosts.write_text(hf.render_etc_hosts(hosts))
    hp.resolv_conf.write_text(hf.machine_resolv_conf())
    bins = en.bin_dir(engine)
    hp.init_script.write_text(hf.render_host_script(hp, cgroups, links, bins))
    hp.bin_dir.mkdir(exist_ok=True)
    hp.gpu_list.write_text("".join(f"{u}\n" for u in c.gpu_uuids(i, count)))
    hp.driver_version.write_text(hf.FAKE_DRIVER_VERSION + "\n")
    smi = hp.bin_dir / "nvidia-smi"
    smi.write_text(hf.render_fake_nvidia_smi(hp, gpus.model(i)))
    smi.chmod(0o755)
    # No toolkit files: the fake nvidia-ctk reports no toolkit until a test writes one
    # (removed in case a root survived a `lab down` that could not finish).
    hp.toolkit_version.unlink(missing_ok=True)
    hp.toolkit_config.unlink(missing_ok=True)
    ctk = hp.bin_dir / "nvidia-ctk"
    ctk.write_text(hf.render_fake_nvidia_ctk(hp))
    ctk.chmod(0o755)
    # No RDMA device and no module loaded until a test writes them (hf.render_devinfo).
    shutil.rmtree(hp.rdma_devinfo, ignore_errors=True)
    hp.kernel_modules.unlink(missing_ok=True)
    # Healthy GPUs and a quiet kernel log until a test writes faults (hf.xid_line).
    hp.gpu_health.unlink(missing_ok=True)
    hp.kernel_log.unlink(missing_ok=True)
    hp.dcgm_diag.unlink(missing_ok=True)
    for tool, text in (
        ("dcgmi", hf.render_fake_dcgmi(hp, count)),
        ("ibv_devinfo", hf.render_fake_ibv_devinfo(hp)),
        ("lsmod", hf.render_fake_lsmod(hp)),
        ("dmesg", hf.render_fake_dmesg(hp)),
    ):
        fake = hp.bin_dir / tool
        fake.write_text(text)
        fake.chmod(0o755)
    # Where a GPU server's daemon config is (the host facts read it there); this
    # daemon is started with --config-file on the lab's copy, which this names.
    link = hp.etc_docker / "daemon.json"
    link.unlink(missing_ok=True)
    link.symlink_to(hp.daemon_json)
    s.cgroup_create(c.cgroup_name(i))


def _start_host(lab: c.LabPaths, i: int) -> subprocess.Popen[bytes]:
    hp = lab.host(i)
    argv = [
        "nsenter",
        f"--net=/run/netns/{c.netns_name(i)}",
        "--",
        "unshare",
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        str(hp.init_script),
    ]
    with open(hp.dockerd_log, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _cgroup_links() -> dict[str, str]:
    links: dict[str, str] = {}
    if s.CGROUP_ROOT.is_dir():
        for p in s.CGROUP_ROOT.iterdir():
            if p.is_symlink():
                links[str(p)] = os.readlink(p)
    return links


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _wait_hosts(lab: c.LabPaths, procs: dict[int, subprocess.Popen[bytes]], timeout: float) -> None:
    pending = set(procs)
    deadline = time.monotonic() + timeout
    while pending:
        for i in sorted(pending):
            hp = lab.host(i)
            if procs[i].poll() is not None:
                raise LabError(
                    f"{c.host_name(i)}: dockerd exited ({procs[i].returncode}); "
                    f"last lines of {hp.dockerd_log}:\n{_tail(hp.dockerd_log)}"
                )
            if hp.socket.exists() and s.ping(hp.socket) and s.tcp_open(c.host_addr(i), 22):
                pending.discard(i)
        if pending and time.monotonic() > deadline:
            names = ", ".join(c.host_name(i) for i in sorted(pending))
            first = lab.host(min(pending)).dockerd_log
            raise LabError(
                f"no answer within {timeout:.0f} s from {names}; "
                f"last lines of {first}:\n{_tail(first)}"
            )
        time.sleep(0.2)


def _wait_registry(p: subprocess.Popen[bytes], log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not s.tcp_open(c.BRIDGE_ADDR, c.REGISTRY_PORT):
        if p.poll() is not None or time.monotonic() > deadline:
            raise LabError(f"registry did not listen on {c.REGISTRY_ADDR}:\n{_tail(log)}")
        time.sleep(0.1)


def _engine(name: str) -> en.Engine:
    """The engine to run, installed (the error says how to install it)."""
    try:
        engine = en.get(name)
    except ValueError as e:
        raise LabError(f"--engine: {e}") from None
    if not ei.is_installed(engine):
        where = en.engine_dir(engine) if engine.installable else "the system (apt docker.io)"
        raise LabError(
            f"engine {name} is not installed in {where}; run `python -m lab engine install {name}`"
        )
    return engine


def up(
    root: Path,
    hosts: int,
    gpus: int | Sequence[int],
    mtu: int,
    swarm: bool,
    managers: int,
    timeout: float = 90,
    engine: str = en.DEFAULT_ENGINE,
    gpu_models: str | Sequence[str] = lg.DEFAULT_GPU_MODEL,
) -> dict[str, Any]:
    """Start lab-h1..h<hosts>; `gpus` and `gpu_models` one value for every host or one
    per host (lab/gpus.py)."""
    if os.geteuid() != 0:
        raise LabError("lab up needs root (namespaces, bridge, iptables)")
    if not 1 <= hosts <= c.MAX_HOSTS:
        raise LabError(f"--hosts must be within 1..{c.MAX_HOSTS}")
    try:
        per_host = lg.lab_gpus(hosts, gpus, gpu_models)
    except ValueError as e:
        raise LabError(str(e)) from None
    if not 1280 <= mtu <= 65535:
        raise LabError("--mtu must be within 1280..65535")
    if lab_exists(root):
        raise LabError("a lab (or its leftovers) exists; run `python -m lab down` first")
    eng = _engine(engine)
    t0 = time.monotonic()
    lab = c.LabPaths(root)
    root.mkdir(parents=True, exist_ok=True)
    lab.shared.mkdir(exist_ok=True)
    os.chmod(lab.shared, 0o1777)
    state = {
        "hosts": hosts,
        **per_host.state(),
        "mtu": mtu,
        "swarm": swarm,
        "managers": managers,
        "engine": eng.name,
        "engine_version": eng.version,
    }
    lab.state.write_text(json.dumps(state) + "\n")
    with open("/proc/self/mountinfo") as f:
        cgroups = hf.parse_cgroup_mounts(f.read())
    links = _cgroup_links()
    for i in range(1, hosts + 1):
        _host_files(lab, i, hosts, per_host, cgroups, links, eng)
    _ssh_keys(lab, hosts)
    users.ensure(lab)
    _bridge(mtu)
    reg = _registry(lab)
    with ThreadPoolExecutor(max_workers=8) as ex:
        list(ex.map(lambda i: _host_net(i, mtu), range(1, hosts + 1)))
    procs = {i: _start_host(lab, i) for i in range(1, hosts + 1)}
    _wait_registry(reg, lab.registry_log)
    _wait_hosts(lab, procs, timeout)
    hostkeys.write_known_hosts(lab, hosts)
    _log(f"{hosts} hosts (engine {eng.name}) up in {time.monotonic() - t0:.1f} s")
    if swarm:
        form_swarm(lab, hosts, managers)
        _log(f"swarm of {hosts} ({managers} manager(s)) ready in {time.monotonic() - t0:.1f} s")
    return state
