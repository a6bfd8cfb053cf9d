"""Rules about the training job: GPUs per node, launcher, environment, checkpoints, /dev/shm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from infra.config.rules.placement import judged_by_placement
from infra.config.units import duration_seconds, size_bytes

if TYPE_CHECKING:
    # Types only: at run time the rules import no model, so StackConfig (which runs
    # them) can import the rules without a circle.
    from infra.config.models.cluster import Host, Network
    from infra.config.models.stack import StackConfig

# Set per rank by deepspeed's launcher, torchrun or torch.distributed: a stack-wide
# value would give every rank the same rank.
LAUNCHER_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "CROSS_RANK",
    "CROSS_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
)
# What infra/render/labels.py training_env derives from other keys: the key to set instead.
STACK_ENV = {
    "DSS_RUN": "training.run_name",
    "DSS_SSH_PORT": "training.sshd_port",
    "DSS_SSH_PRIVATE_KEY_FILE": "secrets (the stack's SSH key pair)",
    "DSS_SSH_PUBLIC_KEY_FILE": "secrets (the stack's SSH key pair)",
    "DSS_REQUIRE_SSH_KEY": "secrets (the stack's SSH key pair)",
    "DSS_DATA_DIR": "training.data_dir",
    "DS_ACCELERATOR": "training.cpu_only",
    "DSS_METRICS_PORT": "monitoring.rank_metrics_port",
    "DSS_NODE": "monitoring (the Swarm node's hostname)",
    "NCCL_SOCKET_IFNAME": "network.data_plane (the overlay's eth0, or hosts[].nic on host)",
    "GLOO_SOCKET_IFNAME": "network.data_plane (the overlay's eth0, or hosts[].nic on host)",
    "NCCL_IB_HCA": "hosts[].rdma_interface",
    "NCCL_IB_DISABLE": "hosts[].rdma_interface (set on no host)",
    "NCCL_NET": "hosts[].rdma_interface (IB: never a silent fallback to sockets)",
    "NVIDIA_MOFED": "hosts[].rdma_interface (the runtime injects the RDMA devices)",
    "NCCL_IB_GID_INDEX": "network.rdma_gid_index",
}
# Of those, the ones an older stack file may still repeat with the value the stack
# derives anyway (Pulumi.prod.yaml sets NCCL_SOCKET_IFNAME: eth0): only another
# value is refused.
NETWORK_ENV = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NVIDIA_MOFED",
    "NCCL_IB_GID_INDEX",
)
# With RDMA, NCCL says which transport it chose at INFO level (`NET/IB : Using ...`),
# which the launch checks; a stack may still set its own NCCL_DEBUG.
RDMA_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
# The task's interface on the overlay, its only network (infra/render/labels.py training_env).
OVERLAY_IFNAME = "eth0"
# Below this a final checkpoint of a real model rarely finishes before SIGKILL.
MIN_CHECKPOINT_GRACE_S = 30
# /dev/shm, the tmpfs infra/render/taskspecs.py sizes from training.shm_size. Never below
# Docker's own 64 MiB default, which NCCL's shared-memory transport (a segment of
# about 9 MiB per peer and channel) and the DataLoader's workers (every batch
# passes through it) already outgrow: smaller ends in "failed to extend /dev/shm"
# or a Bus error mid-step.
MIN_SHM_BYTES = 64 << 20
# DeepSpeed's CPU all-reduce (csrc/cpu/comm/shm.cpp, prebuilt in the image) maps
# one workspace per local rank in /dev/shm when every rank is on one node:
# 2 x NAIVE_ALLREDUCE_THRESHOLD (1 MiB) + 2 x MAX_BUF_SIZE (32 MiB) and a header.
SHM_COMM_BYTES_PER_RANK = 67 << 20


def gpu_capacity(cfg: StackConfig) -> list[str]:
    # A job is judged on the hosts it trains on (rules/placement.py judges those it
    # names, and an ask the cluster can never hold); any other stack on every host.
    if judged_by_placement(cfg):
        return []
    want = cfg.training.gpus_per_node
    if cfg.kind == "cluster":
        # A cluster stack runs no training task: its gpus_per_node is its jobs' default,
        # which a job's placement puts on the hosts that have that many (hosts with
        # different GPU counts in one cluster, issue 47); refused only where none has.
        pool = cfg.eligible_hosts or cfg.hosts
        most = max(h.gpus.count for h in pool)
        if want <= most:
            return []
        where = ", ".join(h.name for h in pool if h.gpus.count == most)
        return [
            f"training.gpus_per_node: {want} (the default of the cluster's jobs) is more "
            f"than any training host declares (the most: {most}, on {where}); allowed: "
            f"0..{most}"
        ]
    judged = cfg.training_hosts if cfg.kind == "job" else cfg.hosts
    return [
        f"training.gpus_per_node: {want} is more than host {h.name!r} declares "
        f"(hosts[{i}].gpus.count={h.gpus.count}); allowed: 0..{h.gpus.count}"
        for i, h in enumerate(cfg.hosts)
        if want > h.gpus.count and h in judged
    ]


def gpu_model(cfg: StackConfig) -> list[str]:
    want = cfg.training.gpu_model
    if want is None or judged_by_placement(cfg):
        return []
    return [
        f"training.gpu_model: {want!r} but training host {h.name!r} has "
        f"hosts[{i}].gpus.model={h.gpus.model!r}; allowed: the model of every training "
        "host (" + ", ".join(sorted({str(x.gpus.model) for x in cfg.training_hosts})) + ")"
        for i, h in enumerate(cfg.hosts)
        if h in cfg.training_hosts and h.gpus.model != want
    ]


def nodes(cfg: StackConfig) -> list[str]:
    want, have = cfg.training.nodes, len(cfg.eligible_hosts)
    # A job's ask is judged against the cluster's candidates (rules/placement.py).
    if want is None or want <= have or cfg.kind == "job":
        return []
    return [
        f"training.nodes: {want} but the stack has {have} active training host(s) "
        f"({', '.join(h.name for h in cfg.eligible_hosts)}); allowed: 1-{have}"
    ]


def spare_gpu_model(cfg: StackConfig) -> list[str]:
    want = cfg.training.gpu_model
    return [
        f"hosts[{i}]: spare {h.name!r} has gpus.model={h.gpus.model!r}, not "
        f"training.gpu_model {want!r}: no task can move onto it"
        for i, h in enumerate(cfg.hosts)
        if want is not None and h.spare and h.gpus.model != want
    ]


def workers_for_launcher(cfg: StackConfig) -> list[str]:
    # Named hosts count as named: one that is no host is refused by its own rule.
    if len(cfg.training.hosts or cfg.training_hosts) > 1 or cfg.training.launch_mode == "no_ssh":
        return []
    if cfg.training.launcher == "torchrun":
        return []
    return [
        f"training.launch_mode: {cfg.training.launch_mode!r} is a multi-node launcher "
        "but the stack has zero workers (one host); allowed: add worker hosts, or "
        "launch_mode 'no_ssh'"
    ]


def follow_moves(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if not t.recovery.follow_moves or (t.launcher == "deepspeed" and t.launch_mode == "pdsh"):
        return []
    return [
        f"training.recovery.follow_moves: true with launcher {t.launcher!r} and launch_mode "
        f"{t.launch_mode!r}; allowed: follow_moves only with launcher 'deepspeed' and "
        "launch_mode 'pdsh' (the one launcher on the master follows the tasks; per-node "
        "launchers die with their host's task), or follow_moves false"
    ]


def fork_server(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if not t.fork_server or t.launcher == "deepspeed":
        return []
    return [
        f"training.fork_server: true with launcher {t.launcher!r}; allowed: fork_server "
        "only with launcher 'deepspeed' (its runner and launchers start each process as "
        "`python -m` or `python <script>`, which the fork server serves), or false"
    ]


def follow_master(cfg: StackConfig) -> list[str]:
    r = cfg.training.recovery
    if not r.follow_master:
        return []
    out = []
    if cfg.kind != "single":
        out.append(
            f"training.recovery.follow_master: true in a {cfg.kind!r} stack; allowed: only "
            "in a single stack (a job's master shares the cluster's master host), or false"
        )
    if not r.follow_moves:
        out.append(
            "training.recovery.follow_master: true with follow_moves false; allowed: "
            "follow_master with follow_moves true (the master's supervisor follows the "
            "workers as before), or follow_master false"
        )
    want, model = cfg.training.gpus_per_node, cfg.training.gpu_model
    fits = [
        h
        for h in cfg.spares
        if h.availability == "active" and h.gpus.count >= want and model in (None, h.gpus.model)
    ]
    if not fits:
        out.append(
            "training.recovery.follow_master: true but no active spare host can take the "
            f"master ({want} GPUs" + (f" of model {model!r}" if model else "") + "); allowed: "
            "follow_master with such a host (hosts[].spare: true), or false"
        )
    return out


def env_owned(cfg: StackConfig) -> list[str]:
    out = []
    for name in cfg.training.env:
        if name in LAUNCHER_ENV:
            out.append(
                f"training.env: {name} is set per rank by the launcher; allowed: any "
                f"variable except {', '.join(LAUNCHER_ENV)}"
            )
        elif name in STACK_ENV and name not in NETWORK_ENV:
            out.append(
                f"training.env: {name} is derived from {STACK_ENV[name]}; allowed: set "
                "that key instead"
            )
    return out


def task_ifname(network: Network, hosts: Sequence[Host]) -> str:
    """The interface NCCL and gloo bind to: the overlay's, or on the host data plane the
    hosts' own `nic` (one name on every active host: rules/network.py data_plane_nic)."""
    if network.data_plane == "overlay":
        return OVERLAY_IFNAME
    nics = sorted({h.nic for h in hosts if h.availability == "active"})
    return nics[0] if nics else OVERLAY_IFNAME


def network_env(network: Network, hosts: Sequence[Host]) -> dict[str, str]:
    """The NCCL and gloo variables the training tasks get from the network and hosts
    (NETWORK_ENV): one place, read by the env rule and by infra/render/labels.py."""
    nic = task_ifname(network, hosts)
    env = {
        # On the host data plane an exact name (NCCL reads a bare name as a prefix:
        # `eth1` would also take `eth10`); gloo takes the name itself.
        "NCCL_SOCKET_IFNAME": nic if network.data_plane == "overlay" else f"={nic}",
        "GLOO_SOCKET_IFNAME": nic,
    }
    rdma = sorted({h.rdma_interface for h in hosts if h.rdma_interface})
    if not rdma:
        # No RDMA devices configured: tell NCCL not to probe for them.
        env["NCCL_IB_DISABLE"] = "1"
        return env
    env["NCCL_IB_HCA"] = ",".join(rdma)
    # Only IB: without it NCCL falls back to sockets without a word, at a tenth of
    # the bandwidth; with it a rank that cannot use the RDMA device fails its init.
    env["NCCL_NET"] = "IB"
    # The NVIDIA runtime adds /dev/infiniband (uverbs, rdma_cm) with their cgroup
    # rules: Swarm itself cannot give a service devices (moby/swarmkit#1244).
    env["NVIDIA_MOFED"] = "enabled"
    if network.rdma_gid_index is not None:
        env["NCCL_IB_GID_INDEX"] = str(network.rdma_gid_index)
    return env


def env_network(cfg: StackConfig) -> list[str]:
    derived = network_env(cfg.network, cfg.hosts)
    out = []
    for name, value in cfg.training.env.items():
        if name not in NETWORK_ENV or derived.get(name) == value:
            continue
        source = STACK_ENV[name]
        if name in derived:
            out.append(
                f"training.env: {name}={value!r} overrides {derived[name]!r}, derived from "
                f"{source}; allowed: {derived[name]!r} or unset (set that key instead)"
            )
        else:
            out.append(
                f"training.env: {name}={value!r} contradicts {source}, from which the stack "
                f"derives no {name}; allowed: unset (set that key instead)"
            )
    return out


def checkpoint_cadence(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.checkpoint_every <= t.steps:
        return []
    return [
        f"training.checkpoint_every: {t.checkpoint_every} > training.steps {t.steps}: "
        "the only checkpoint is the final one; a failure restarts from step 0"
    ]


def grace_fits_checkpoint(cfg: StackConfig) -> list[str]:
    grace = duration_seconds(cfg.training.stop_grace_period)
    if grace >= MIN_CHECKPOINT_GRACE_S:
        return []
    return [
        f"training.stop_grace_period: {cfg.training.stop_grace_period} leaves little time "
        "for the final checkpoint before SIGKILL; suggested: at least "
        f"{MIN_CHECKPOINT_GRACE_S}s"
    ]


def shm_size(cfg: StackConfig) -> list[str]:
    t = cfg.training
    have = size_bytes(t.shm_size)
    if have < MIN_SHM_BYTES:
        return [
            f"training.shm_size: {t.shm_size!r} is {have >> 20} MiB, less than Docker's own "
            f"/dev/shm; allowed: at least {MIN_SHM_BYTES >> 20}m (NCCL's shared-memory "
            "transport and the DataLoader's workers need more, not less)"
        ]
    on_cpu = t.cpu_only or t.gpus_per_node == 0
    need = SHM_COMM_BYTES_PER_RANK * t.ranks_per_node
    if on_cpu and len(cfg.training_hosts) == 1 and have < need:
        return [
            f"training.shm_size: {t.shm_size!r} is {have >> 20} MiB but DeepSpeed's CPU "
            f"all-reduce maps {SHM_COMM_BYTES_PER_RANK >> 20} MiB per rank in /dev/shm when "
            f"all {t.ranks_per_node} ranks are on one node; allowed: at least {need >> 20}m"
        ]
    return []
