"""Node labels, placement constraints and the training tasks' environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from infra.config import RDMA_DEBUG_ENV, Host, network_env
from infra.layout import (
    DATA_MOUNT,
    GPU_MODEL_LABEL,
    MASTER_OK_LABEL,
    SECRETS_DIR,
    SSH_PRIVATE_KEY_FILE,
    SSH_PUBLIC_KEY_FILE,
)
from infra.render.sections import HasMaster, TaskEnvSource

SPARE_CONSTRAINT = "node.labels.dss.spare==true"
"""Where `ds-standby` runs: the spare hosts (`hosts[].spare`)."""


def node_labels(cfg: HasMaster, host: Host, master_moves: bool = False) -> dict[str, str]:
    """Swarm node labels for one host: placement keys first, then the user's extras.
    `master_moves` (training.recovery.follow_master): the master's host and the spares
    get `dss.master_ok` (only then: a stack without it keeps its labels)."""
    labels = {
        "dss.role": "master" if host.name == cfg.master.name else "worker",
        "dss.gpus": str(host.gpus.count),
    }
    if host.spare:
        # Eligible for `ds-worker` like any worker; the standby task keeps it last
        # in the scheduler's order (infra/render/taskspecs.py, `standby_spec`).
        labels["dss.spare"] = "true"
    if master_moves and (host.spare or host.name == cfg.master.name):
        labels[MASTER_OK_LABEL] = "true"
    if host.gpus.model:
        labels[GPU_MODEL_LABEL] = host.gpus.model
    if host.rdma_interface:
        labels["dss.rdma"] = host.rdma_interface
    return {**labels, **host.labels}


def _model_constraint(gpu_model: str | None) -> list[str]:
    """With `gpu_model`: only nodes labelled with it (a task moves only to a spare that
    has it)."""
    return [f"node.labels.{GPU_MODEL_LABEL}=={gpu_model}"] if gpu_model else []


def placement_constraints(
    role: str, gpu_model: str | None = None, master_moves: bool = False
) -> list[str]:
    """Constraints that pin a service to nodes of one dss.role (and, with `gpu_model`,
    to nodes labelled with that GPU model: a task moves only to a spare that has it).
    `master_moves`: the master goes where `dss.master_ok` is (its host or a spare)."""
    model = _model_constraint(gpu_model)
    if master_moves and role == "master":
        return [f"node.labels.{MASTER_OK_LABEL}==true", *model]
    return [f"node.labels.dss.role=={role}", *model]


def task_constraints(
    role: str,
    gpu_model: str | None,
    unused: Sequence[str],
    pinned_master: str | None = None,
    master_moves: bool = False,
) -> list[str]:
    """Where a training service's tasks may run. By the role label (placement_constraints),
    the workers off the training hosts the run leaves out (`unused`). `pinned_master`, a
    job that names its hosts: the master on that host, the workers off every training
    host outside the job and off the master's (Swarm ANDs constraints and has no "one
    of"), so they land on the job's other hosts or, moved, on a spare; no role label,
    as the cluster's master host may carry any job's worker."""
    if pinned_master is None:
        keep_off = [f"node.hostname!={h}" for h in unused] if role == "worker" else []
        return placement_constraints(role, gpu_model, master_moves) + keep_off
    model = _model_constraint(gpu_model)
    if role == "master":
        return [f"node.hostname=={pinned_master}", *model]
    return [*(f"node.hostname!={h}" for h in [*unused, pinned_master]), *model]


def training_env(cfg: TaskEnvSource) -> dict[str, str]:
    """Environment of every training task (the launcher inherits it via `docker exec`)."""
    t = cfg.training
    env = {
        # Read by the image's entrypoint (images/entrypoint.sh) and train.py.
        "DSS_RUN": t.run_name,
        "DSS_SSH_PORT": str(t.sshd_port),
        "DSS_SSH_PRIVATE_KEY_FILE": f"{SECRETS_DIR}/{SSH_PRIVATE_KEY_FILE}",
        "DSS_SSH_PUBLIC_KEY_FILE": f"{SECRETS_DIR}/{SSH_PUBLIC_KEY_FILE}",
        "DSS_REQUIRE_SSH_KEY": "1",
        "DSS_DATA_DIR": DATA_MOUNT,
    }
    if t.cpu_only:
        env["DS_ACCELERATOR"] = "cpu"
    if cfg.monitoring.enabled:
        # Every rank serves metrics on this + its local rank (images/dss_train/metrics.py),
        # labelled with the Swarm node it runs on (a template Swarm fills in per task).
        env["DSS_METRICS_PORT"] = str(cfg.monitoring.rank_metrics_port)
        env["DSS_NODE"] = "{{.Node.Hostname}}"
    # The interfaces NCCL and gloo bind to (the overlay's, or the hosts' own NIC on the
    # host data plane) and the RDMA devices: infra/config/rules/training.py network_env.
    net = network_env(cfg.network, cfg.hosts)
    # With RDMA, NCCL's INFO lines name the transport it chose (the launch checks
    # them); defaults a stack may override, unlike the network variables.
    debug = RDMA_DEBUG_ENV if "NCCL_NET" in net else {}
    return {**env, **debug, **t.env, **net}


def transport_summary(cfg: TaskEnvSource) -> str:
    """What the training ranks talk over, in a reviewer's words (the PR comment's line)."""
    env = network_env(cfg.network, cfg.hosts)
    nic = env["GLOO_SOCKET_IFNAME"]
    if cfg.network.data_plane == "overlay":
        return f"TCP sockets over the VXLAN overlay (the tasks' {nic}); no RDMA"
    if "NCCL_NET" not in env:
        return f"TCP sockets on the hosts' own network ({nic}); no RDMA"
    gid = env.get("NCCL_IB_GID_INDEX", "picked by NCCL")
    return (
        f"RDMA only (NCCL_NET=IB over {env['NCCL_IB_HCA']}, GID index {gid}) on the hosts' "
        f"own network; bootstrap and gloo on {nic}; a fallback to sockets fails the launch"
    )


def env_list(env: Mapping[str, str]) -> dict[str, str]:
    """Environment as the docker provider wants it (a sorted map for stable diffs)."""
    return dict(sorted(env.items()))
