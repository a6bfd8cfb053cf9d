"""Data-plane benchmark: TCP throughput, gloo all-reduce bus bandwidth and training
samples/s between containers on different lab hosts, over a Swarm overlay with MTU 9000,
one with MTU 1500, and host networking (each lab host's own network namespace: the
host-to-host baseline); and the same as Swarm service tasks, as the training tasks run
(one service per rank, pinned to its node), on the overlay and on the host data plane
(`network.data_plane: host`). Prints markdown tables and the command.

    sudo .venv/bin/python -m bench.dataplane_bench [--hosts 8] [--sizes 1K 16K 256K 4M 64M]
        [--tcp-seconds 5] [--rounds 3] [--workloads tcp allreduce train]
        [--train-steps 15] [--quick]

Starts its own lab (`python -m lab up --hosts N --swarm`) and always takes it down. Every
workload runs inside the training image (images/build, pushed to the lab registry), with
`--entrypoint python3`: TCP is a Python socket stream (1 MiB sendall, host 1 -> host 2,
the receiver's byte count over the sender's wall time); all-reduce is torch.distributed
with gloo, one rank per lab host, busbw = 2(n-1)/n * size / time as nccl-tests define it
(time: mean over the timed iterations, the slowest rank's); training is the image's own
train.py (DeepSpeed ZeRO-2 over gloo, the stack's default model and ds_config), one rank
per lab host with env:// rendezvous on rank 0, rank 0's samples/s per step, median of the
steps after the first WARM_STEPS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness import ROOT
from harness.lab import CommandFailed, docker, docker_argv, docker_run, lab_cli, socket
from lab import config as c

IMAGE = f"{c.REGISTRY_ADDR}/deepspeed-swarm/train:lab-bench"
PREFIX = "dssb"
PORT = 29500
# (label, docker network, MTU option, how): the overlays are made by the bench, "host" is
# built in; "container" is `docker run` on the host, "task" a Swarm service's task there.
NETWORKS = (
    ("overlay MTU 9000", f"{PREFIX}-ov9000", 9000, "container"),
    ("overlay MTU 1500", f"{PREFIX}-ov1500", 1500, "container"),
    ("host network", "host", None, "container"),
    ("task, overlay 9000", f"{PREFIX}-ov9000", 9000, "task"),
    ("task, host data plane", "host", None, "task"),
)
# The baseline every other row is compared with: host to host.
BASELINE = "host network"
# Training steps before the ones measured: the first steps pay gloo's and DeepSpeed's
# first-use costs.
WARM_STEPS = 3
WORKLOADS = ("tcp", "allreduce", "train")

# Runs inside the training image: `python3 -c WORKER <mode> ...`.
WORKER = r"""
import fcntl, json, os, socket, struct, sys, time

def resolve(name):
    for _ in range(120):  # the overlay's DNS entry of a container on another host may lag
        try:
            return socket.gethostbyname(name)
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"cannot resolve {name}")

def iface_to(addr):
    # The interface whose address routes to addr (overlay containers also have eth1).
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.connect((addr, 9))
    local = u.getsockname()[0]
    for _, name in socket.if_nameindex():
        try:
            req = struct.pack("256s", name.encode()[:15])
            got = socket.inet_ntoa(fcntl.ioctl(u.fileno(), 0x8915, req)[20:24])
        except OSError:
            continue
        if got == local:
            mtu = int(open(f"/sys/class/net/{name}/mtu").read())
            return name, mtu
    raise SystemExit(f"no interface has {local}")

mode = sys.argv[1]
if mode == "tcp-server":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2])))
    s.listen(1)
    while True:
        conn, _ = s.accept()
        buf, total = bytearray(1 << 20), 0
        while n := conn.recv_into(buf):
            total += n
        conn.sendall(str(total).encode())
        conn.close()
elif mode == "tcp-client":
    addr, port, secs = resolve(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    for _ in range(120):
        try:
            s = socket.create_connection((addr, port), timeout=60)
            break
        except OSError:
            time.sleep(0.5)
    else:
        raise SystemExit(f"cannot connect to {addr}:{port}")
    iface, mtu = iface_to(addr)
    buf = memoryview(bytearray(1 << 20))
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < secs:
        s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    total = int(s.recv(64))
    dt = time.perf_counter() - t0
    print(json.dumps({"bytes": total, "seconds": dt, "iface": iface, "mtu": mtu}))
elif mode == "allreduce":
    from datetime import timedelta
    rank, world, master = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sizes = [int(x) for x in sys.argv[5].split(",")]
    addr = resolve(master)
    for peer in sys.argv[7].split(","):  # all peers in the overlay's DNS before gloo connects
        resolve(peer)
    iface, mtu = iface_to(addr)
    os.environ["GLOO_SOCKET_IFNAME"] = iface
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{sys.argv[6]}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=600))
    out = []
    for size in sizes:
        t = torch.zeros(max(1, size // 4), dtype=torch.float32)
        iters = max(4, min(50, (256 << 20) // size))
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        el = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(el, op=dist.ReduceOp.MAX)
        out.append({"size": size, "iters": iters, "time_s": el.item()})
    if rank == 0:
        print(json.dumps({"iface": iface, "mtu": mtu, "results": out}))
    dist.destroy_process_group()
elif mode == "train":
    # The training image's own script, one rank per lab host, rendezvous on rank 0.
    rank, world, master, port, steps = sys.argv[2:7]
    addr = resolve(master)
    for peer in sys.argv[7].split(","):
        resolve(peer)
    iface, mtu = iface_to(addr)
    print(json.dumps({"iface": iface, "mtu": mtu}), flush=True)
    os.environ.update(RANK=rank, WORLD_SIZE=world, LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                      MASTER_ADDR=addr, MASTER_PORT=port, GLOO_SOCKET_IFNAME=iface,
                      DSS_RUN="bench")
    argv = [sys.executable, "/opt/dss/train.py", "--steps", steps, "--ckpt-every", steps,
            "--data-dir", "/tmp/dss", "--threads", "1"]
    os.execv(sys.executable, argv)
"""


def sh(*cmd: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


def hdocker(i: int, *args: str, check: bool = True, timeout: float = 900) -> str:
    """The stdout of the docker CLI against lab host i's own daemon."""
    if check:
        return docker(i, *args, timeout=timeout)
    return docker_run(i, *args, check=False, timeout=timeout).stdout


def lab(*args: str) -> None:
    """`python -m lab <args>` (its stderr on the terminal)."""
    lab_cli(*args, capture=False, timeout=None)


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text.rstrip("KkMmGg")) * mult


def fmt_size(n: int) -> str:
    for unit, m in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
    return f"{n} B"


def run_args(net: str, name: str, flag: str, hosts: int) -> list[str]:
    """`docker run` of WORKER in the training image (flag: -d or --rm). With host networking
    the lab hosts' names go into /etc/hosts: the machine's resolvers are not reachable from
    the lab, and torch's TCPStore looks up each peer's name (10 s per lookup otherwise)."""
    names = [f"--add-host={c.host_name(i)}:{c.host_addr(i)}" for i in range(1, hosts + 1)]
    run = ["run", flag, "--name", name, "--network", net, "--no-healthcheck"]
    return [*run, *(names if net == "host" else []), "--entrypoint", "python3", IMAGE, "-c", WORKER]


def service_args(net: str, name: str, node: int, hosts: int) -> list[str]:
    """`docker service create` of WORKER as one task pinned to lab host `node`, run once,
    on `net` (the host network, as the host data plane's training tasks; or the overlay)."""
    names = [f"--host={c.host_name(i)}:{c.host_addr(i)}" for i in range(1, hosts + 1)]
    create = ["service", "create", "-d", "--name", name, "--network", net, "--no-healthcheck"]
    create += ["--restart-condition", "none", "--endpoint-mode", "dnsrr"]
    create += ["--constraint", f"node.hostname=={c.host_name(node)}"]
    return [*create, *(names if net == "host" else []), "--entrypoint", "python3", IMAGE]


def start(how: str, net: str, name: str, node: int, hosts: int, *args: str) -> str:
    """Start WORKER `args` on lab host `node`; the id of its container there."""
    if how == "container":
        return hdocker(node, *run_args(net, name, "-d", hosts), *args).strip()
    hdocker(1, *service_args(net, name, node, hosts), "-c", WORKER, *args)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        label = f"label=com.docker.swarm.service.name={name}"
        ids = hdocker(node, "ps", "-aq", "--filter", label, check=False).split()
        if ids:
            return ids[0]
        time.sleep(0.5)
    raise RuntimeError(f"service {name}: no task container on {c.host_name(node)} after 300 s")


def remove(how: str, name: str, node: int, cid: str = "") -> None:
    """Remove what start() made (a service, or a container)."""
    if how == "task":
        hdocker(1, "service", "rm", name, check=False)
    hdocker(node, "rm", "-f", cid or name, check=False)


def remove_containers(hosts: int) -> None:
    services = hdocker(1, "service", "ls", "-q", "--filter", f"name={PREFIX}-", check=False)
    if services.split():
        hdocker(1, "service", "rm", *services.split(), check=False)
    for i in range(1, hosts + 1):
        ids = hdocker(i, "ps", "-aq", "--filter", f"name={PREFIX}-", check=False).split()
        if ids:
            hdocker(i, "rm", "-f", *ids, check=False)


def wait_exit(node: int, cid: str, timeout: float = 1800) -> str:
    """The exit code of a container (started detached) once it stops."""
    return hdocker(node, "wait", cid, timeout=timeout).strip()


def tcp(how: str, net: str, seconds: float, hosts: int) -> dict[str, Any]:
    """One stream of `seconds`, lab-h1 -> lab-h2: Gbit/s and the container's MTU."""
    srv = start(how, net, f"{PREFIX}-srv", 2, hosts, "tcp-server", "5201")
    target = c.host_addr(2) if net == "host" else f"{PREFIX}-srv"
    cli = ""
    try:
        cli = start(how, net, f"{PREFIX}-cli", 1, hosts, "tcp-client", target, "5201", str(seconds))
        code = wait_exit(1, cli)
        out = hdocker(1, "logs", cli)
        if code != "0":
            raise RuntimeError(f"tcp over {net} ({how}): exit {code}: {out[-600:]}")
    finally:
        remove(how, f"{PREFIX}-cli", 1, cli)
        remove(how, f"{PREFIX}-srv", 2, srv)
    got = json.loads(out.strip().splitlines()[-1])
    return {"gbit": got["bytes"] * 8 / got["seconds"] / 1e9, "mtu": got["mtu"]}


def retried(what: str, tries: int, once: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`once()` with its attempts counted: a sweep whose gloo mesh fails to connect (an
    overlay peer not yet known on another host) is retried."""
    for attempt in range(1, tries + 1):
        try:
            res = once()
            res["attempts"] = attempt
            return res
        except (RuntimeError, CommandFailed) as e:
            if attempt == tries:
                raise
            print(f"retrying {what}: {str(e)[:300]}", file=sys.stderr)
    raise AssertionError("unreachable")


def allreduce(
    how: str, net: str, hosts: int, sizes: Sequence[int], tries: int = 3
) -> dict[str, Any]:
    """One rank per lab host; rank 0 on host 1 is the rendezvous."""
    sizes_arg = ",".join(map(str, sizes))

    def once() -> dict[str, Any]:
        out = run_ranks(
            how,
            net,
            hosts,
            lambda r, master: ("allreduce", str(r), str(hosts), master, sizes_arg, str(PORT)),
        )
        res: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return res

    return retried(f"the all-reduce over {net} ({how})", tries, once)


STEP_LINE = re.compile(r"^step (\d+)/\d+ loss \S+ lr \S+ ([\d.]+) samples/s", re.M)


def train(how: str, net: str, hosts: int, steps: int, tries: int = 3) -> dict[str, Any]:
    """The training image's train.py (DeepSpeed, ZeRO-2, gloo), one rank per lab host:
    rank 0's samples/s, median over the steps after the first WARM_STEPS."""

    def once() -> dict[str, Any]:
        out = run_ranks(
            how,
            net,
            hosts,
            lambda r, master: ("train", str(r), str(hosts), master, str(PORT), str(steps)),
        )
        rates = [float(m[2]) for m in STEP_LINE.finditer(out) if int(m[1]) > WARM_STEPS]
        if not rates:
            raise RuntimeError(f"training over {net} ({how}): no step past {WARM_STEPS}:\n{out}")
        first = json.loads(out.strip().splitlines()[0])
        return {"samples_per_s": statistics.median(rates), "steps": len(rates), **first}

    return retried(f"training over {net} ({how})", tries, once)


def run_ranks(
    how: str, net: str, hosts: int, rank_args: Callable[[int, str], Sequence[str]]
) -> str:
    """Start WORKER with `rank_args(rank, master)` on every lab host (rank r on host r+1),
    wait until all exit 0, and return rank 0's output; the first rank to fail ends it."""
    master = c.host_addr(1) if net == "host" else f"{PREFIX}-r0"
    names = [f"{PREFIX}-r{r}" for r in range(hosts)]
    peers = ",".join(c.host_name(r + 1) if net == "host" else n for r, n in enumerate(names))
    waits: list[subprocess.Popen[str]] = []
    cids: list[str] = []
    try:
        for r, name in enumerate(names):
            cids.append(start(how, net, name, r + 1, hosts, *rank_args(r, master), peers))
        waits = [
            subprocess.Popen(
                [*docker_argv(r + 1), "wait", cid],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for r, cid in enumerate(cids)
        ]
        deadline = time.monotonic() + 1800
        codes: dict[int, str] = {}
        while len(codes) < hosts and time.monotonic() < deadline:
            for r, w in enumerate(waits):
                if r not in codes and w.poll() is not None:
                    codes[r] = w.communicate()[0].strip()
            if any(x != "0" for x in codes.values()):
                break  # the first rank to fail ends the sweep
            time.sleep(0.5)
        if len(codes) < hosts or any(x != "0" for x in codes.values()):
            logs = {
                n: docker_run(r + 1, "logs", cid, check=False, timeout=900).stderr[-600:]
                for r, (n, cid) in enumerate(zip(names, cids, strict=True))
            }
            raise RuntimeError(f"ranks over {net} ({how}): exit codes {codes}\n{logs}")
        return hdocker(1, "logs", cids[0])
    finally:
        for w in waits:
            w.kill()
            w.wait()
        for r, n in enumerate(names):
            remove(how, n, r + 1, cids[r] if r < len(cids) else "")


def busbw_gbs(size: int, seconds: float, n: int) -> float:
    return 2 * (n - 1) / n * size / seconds / 1e9


def print_tcp(labels: list[str], tcp_runs: dict[str, list[dict[str, Any]]], secs: float) -> None:
    host = BASELINE
    print(f"TCP, one Python socket stream lab-h1 -> lab-h2, {secs:g} s per round:\n")
    print("| network | container MTU | Gbit/s | rounds | vs host |")
    print("| --- | --- | --- | --- | --- |")
    gbit = {k: statistics.median(t["gbit"] for t in v) for k, v in tcp_runs.items()}
    for label in labels:
        runs = ", ".join(f"{t['gbit']:.2f}" for t in tcp_runs[label])
        mtu = tcp_runs[label][0]["mtu"]
        print(f"| {label} | {mtu} | {gbit[label]:.2f} | {runs} | {gbit[label] / gbit[host]:.0%} |")


def print_allreduce(
    labels: list[str],
    others: list[str],
    ar_runs: dict[str, list[dict[str, Any]]],
    sizes: Sequence[int],
    hosts: int,
) -> None:
    host = BASELINE
    print(
        f"\ngloo all-reduce, {hosts} ranks (one per lab host), float32; busbw in GB/s "
        "(median time per all-reduce in ms):\n"
    )
    print(
        "| size | iters | "
        + " | ".join(labels)
        + " | "
        + " | ".join(f"{label} / host" for label in others)
        + " |"
    )
    print("| --- | --- | " + " | ".join("---" for _ in [*labels, *others]) + " |")
    for k, size in enumerate(sizes):
        bw, cells = {}, []
        for label in labels:
            secs = statistics.median(r["results"][k]["time_s"] for r in ar_runs[label])
            bw[label] = busbw_gbs(size, secs, hosts)
            cells.append(f"{bw[label]:.3g} ({secs * 1e3:.3g})")
        iters = ar_runs[host][0]["results"][k]["iters"]
        ratios = " | ".join(f"{bw[label] / bw[host]:.0%}" for label in others)
        print(f"| {fmt_size(size)} | {iters} | " + " | ".join(cells) + f" | {ratios} |")


def print_train(
    labels: list[str], train_runs: dict[str, list[dict[str, Any]]], hosts: int, steps: int
) -> None:
    host = BASELINE
    print(
        f"\ntraining: images/dss_train (DeepSpeed ZeRO-2, gloo), {hosts} ranks (one per lab "
        f"host), {steps} steps; rank 0's samples/s, median of steps {WARM_STEPS + 1}-{steps}:\n"
    )
    print("| network | interface (MTU) | samples/s | rounds | vs host |")
    print("| --- | --- | --- | --- | --- |")
    rate = {k: statistics.median(t["samples_per_s"] for t in v) for k, v in train_runs.items()}
    for label in labels:
        runs = ", ".join(f"{t['samples_per_s']:.1f}" for t in train_runs[label])
        first = train_runs[label][0]
        nic = f"{first['iface']} ({first['mtu']})"
        print(f"| {label} | {nic} | {rate[label]:.1f} | {runs} | {rate[label] / rate[host]:.0%} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=8, help="lab hosts = all-reduce ranks")
    ap.add_argument("--sizes", nargs="+", default=["1K", "16K", "256K", "4M", "64M"])
    ap.add_argument("--tcp-seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="networks interleaved; medians")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--train-steps", type=int, default=15, help=f"first {WARM_STEPS} not timed")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 hosts, 1M, 1 s, 1 round")
    a = ap.parse_args()
    if a.quick:
        a.hosts, a.sizes, a.tcp_seconds, a.rounds = 2, ["1M"], 1.0, 1
        a.train_steps = WARM_STEPS + 3
    sizes = [parse_size(x) for x in a.sizes]

    lab("down")
    labels = [label for label, _, _, _ in NETWORKS]
    tcp_runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    ar_runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    train_runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    timings: dict[str, float] = dict.fromkeys(labels, 0.0)
    try:
        t0 = time.monotonic()
        lab("up", "--hosts", str(a.hosts), "--gpus", "1", "--swarm")
        env = dict(os.environ, DSS_IMAGE=IMAGE)
        subprocess.run([str(ROOT / "images" / "build")], env=env, check=True, capture_output=True)
        sh("docker", "push", IMAGE)
        # Every lab host has its own image store: pull on all of them at once.
        pulls = [
            subprocess.Popen(
                [*docker_argv(i), "pull", "-q", IMAGE],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(1, a.hosts + 1)
        ]
        for p in pulls:
            if p.wait(timeout=1800):
                raise RuntimeError(f"docker pull {IMAGE}: {p.stderr.read() if p.stderr else ''}")
        for net, mtu in sorted({(net, mtu) for _, net, mtu, _ in NETWORKS if mtu is not None}):
            opt = f"com.docker.network.driver.mtu={mtu}"
            hdocker(1, "network", "create", "-d", "overlay", "--attachable", "--opt", opt, net)
        timings["setup"] = time.monotonic() - t0
        for _ in range(a.rounds):
            for label, net, _, how in NETWORKS:
                t1 = time.monotonic()
                if "tcp" in a.workloads:
                    tcp_runs[label].append(tcp(how, net, a.tcp_seconds, a.hosts))
                if "allreduce" in a.workloads:
                    ar_runs[label].append(allreduce(how, net, a.hosts, sizes))
                if "train" in a.workloads:
                    train_runs[label].append(train(how, net, a.hosts, a.train_steps))
                timings[label] += time.monotonic() - t1
    finally:
        if socket(1).exists():
            remove_containers(a.hosts)
            for net in sorted({net for _, net, mtu, _ in NETWORKS if mtu is not None}):
                hdocker(1, "network", "rm", net, check=False)
        lab("down")

    host = BASELINE
    others = [label for label in labels if label != host]
    runs = [r for v in (*ar_runs.values(), *train_runs.values()) for r in v]
    retried_n = sum(r["attempts"] - 1 for r in runs)
    cmd = shlex.join(["python", "-m", "bench.dataplane_bench", *sys.argv[1:]])
    print(
        f"`{cmd}` ({a.hosts} lab hosts, one container each, {a.rounds} rounds with the networks "
        f"interleaved, medians; {platform.machine()}, {len(os.sched_getaffinity(0))} cores; "
        f"sweeps retried: {retried_n}; "
        f"setup {timings['setup']:.0f} s, "
        + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items() if k != "setup")
        + ")\n"
    )
    if "tcp" in a.workloads:
        print_tcp(labels, tcp_runs, a.tcp_seconds)
    if "allreduce" in a.workloads:
        print_allreduce(labels, others, ar_runs, sizes, a.hosts)
    if "train" in a.workloads:
        print_train(labels, train_runs, a.hosts, a.train_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
