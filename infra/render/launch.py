"""Pure renderers of the training launch: the task roster's order, the hostfile, the
rank map, launcher command lines and the launch and stop scripts. No Pulumi, no
I/O: tested directly and by golden files.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from infra.config import Training
from infra.layout import IMAGE_HOME, LAUNCH_DIR, MASTER_SERVICE, TRAIN_UID
from infra.render.sections import HasTraining, LaunchSource


class RosterEntry(TypedDict):
    """One running training task, as read from the swarm."""

    service: str
    slot: int
    task_id: str
    node: str
    address: str
    container_id: str
    gpu_uuids: list[str]


def hostfile_path(t: Training) -> str:
    """The run's hostfile, on the shared file system."""
    return f"{LAUNCH_DIR}/{t.run_name}/hostfile"


def ds_config_path(t: Training) -> str:
    """Path of the DeepSpeed config inside the task (an inline one is written beside
    the hostfile)."""
    if isinstance(t.ds_config, str):
        return t.ds_config
    return f"{LAUNCH_DIR}/{t.run_name}/ds_config.json"


def ds_config_json(t: Training) -> str | None:
    """Canonical JSON of an inline ds_config (None when it is a path in the image)."""
    if isinstance(t.ds_config, str):
        return None
    return json.dumps(t.ds_config, sort_keys=True, separators=(",", ":"))


def order_roster(entries: Iterable[RosterEntry], master: str = MASTER_SERVICE) -> list[RosterEntry]:
    """Master first, then workers by node name: this order is the node rank."""
    return sorted(entries, key=lambda e: (e["service"] != master, e["node"], e["slot"]))


def duplicate_gpus(roster: Sequence[RosterEntry]) -> dict[str, list[str]]:
    """GPU UUIDs assigned to more than one task, with the tasks holding each."""
    holders: dict[str, list[str]] = {}
    for e in roster:
        for uuid in e["gpu_uuids"]:
            holders.setdefault(uuid, []).append(f"{e['service']}.{e['slot']}@{e['node']}")
    return {u: ts for u, ts in sorted(holders.items()) if len(ts) > 1}


def render_hostfile(roster: Sequence[RosterEntry], slots: int) -> str:
    """DeepSpeed/MPI hostfile: one line per node (its overlay address) with `slots=`,
    in the roster's (node-rank) order."""
    return "".join(f"{e['address']} slots={slots}\n" for e in roster)


def rank_map(roster: Sequence[RosterEntry], slots: int) -> list[dict[str, Any]]:
    """Task -> node -> overlay address -> GPUs -> global ranks, in node-rank order."""
    out = []
    for node_rank, e in enumerate(roster):
        out.append(
            {
                "node_rank": node_rank,
                "task": f"{e['service']}.{e['slot']}",
                "task_id": e["task_id"],
                "node": e["node"],
                "address": e["address"],
                "gpu_uuids": e["gpu_uuids"],
                "ranks": list(range(node_rank * slots, (node_rank + 1) * slots)),
            }
        )
    return out


def launch_argv(
    cfg: HasTraining, master_addr: str, nnodes: int, node_rank: int | None = None
) -> list[str]:
    """The launcher command line run inside a task.

    `node_rank` is None for the single SSH-based launch on the master (pdsh),
    and the node's rank for SSH-less launches (one per node).
    """
    t = cfg.training
    slots = t.ranks_per_node
    script = [t.script, *_train_args(t)]
    if t.launcher == "torchrun":
        rank = 0 if node_rank is None else node_rank
        return [
            "torchrun",
            f"--nnodes={nnodes}",
            f"--nproc_per_node={slots}",
            f"--node_rank={rank}",
            f"--master_addr={master_addr}",
            f"--master_port={t.master_port}",
            *script,
        ]
    argv = [
        "deepspeed",
        f"--hostfile={hostfile_path(t)}",
        f"--master_addr={master_addr}",
        f"--master_port={t.master_port}",
    ]
    if t.launch_mode == "no_ssh":
        argv += ["--no_ssh", f"--node_rank={0 if node_rank is None else node_rank}"]
    else:
        argv.append(f"--launcher={t.launch_mode}")
        # The tasks' sshd listens on sshd_port (non-root), not 22.
        argv.append(f"--ssh_port={t.sshd_port}")
        # The hostfile says where; the launcher must not trim it to the local node.
        argv.append(f"--num_nodes={nnodes}")
    return [*argv, *script]


def _train_args(t: Training) -> list[str]:
    return [
        "--run",
        t.run_name,
        "--steps",
        str(t.steps),
        "--ckpt-every",
        str(t.checkpoint_every),
        "--ds-config",
        ds_config_path(t),
        # train.py checks its world size against the hostfile, by name.
        "--hostfile",
        hostfile_path(t),
        *t.args,
    ]


def launch_script(
    *,
    service: str,
    argv: Sequence[str],
    run_name: str,
    hostfile: str,
    ds_config: str | None,
    wait_seconds: int = 300,
    workdir: str = IMAGE_HOME,
) -> str:
    """Shell run over SSH on a task's host: find the task's container, wait until it
    is healthy, hand it the hostfile (and inline ds_config), start the launcher
    detached as the training user. Idempotent: an already-running launch is kept.
    """
    files = [(f"{LAUNCH_DIR}/{run_name}/hostfile", hostfile)]
    if ds_config is not None:
        files.append((f"{LAUNCH_DIR}/{run_name}/ds_config.json", ds_config))
    writes = "\n".join(
        f'printf %s {shlex.quote(body)} | docker exec -i -u {TRAIN_UID} "$ctr" '
        f"sh -c {shlex.quote(f'mkdir -p $(dirname {path}) && cat > {path}')}"
        for path, body in files
    )
    cmd = shlex.join(argv)
    log = f"/data/logs/{run_name}/launcher.log"
    inner = f"mkdir -p /data/logs/{run_name} && cd {workdir} && exec {cmd} >>{log} 2>&1"
    return f"""set -eu
svc={shlex.quote(service)}
health_fmt='{{{{if .State.Health}}}}{{{{.State.Health.Status}}}}{{{{else}}}}none{{{{end}}}}'
ctr=""
for i in $(seq 1 {wait_seconds}); do
  ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=$svc" | head -n1)
  if [ -n "$ctr" ]; then
    health=$(docker inspect -f "$health_fmt" "$ctr")
    [ "$health" = healthy ] || [ "$health" = none ] && break
  fi
  sleep 1
done
if [ -z "$ctr" ]; then
  echo "no running task of $svc on $(hostname) after {wait_seconds}s" >&2
  exit 1
fi
{writes}
if docker exec "$ctr" pgrep -f {shlex.quote(argv[0])} >/dev/null 2>&1; then  # idempotent
  echo "launch: $svc on $(hostname) already running; kept"
  exit 0
fi
docker exec -d -u {TRAIN_UID} "$ctr" sh -c {shlex.quote(inner)}
echo "launch: started on $(hostname) in $ctr"
"""


def stop_script(*, service: str, grace_seconds: int, pattern: str) -> str:
    """Shell run over SSH on delete: SIGTERM the training processes (command lines
    matching `pattern`, the training script: the launcher and every rank name it;
    they finish the step and checkpoint), wait up to the grace period, then
    SIGKILL what is left: a rank blocked in a collective whose peer is gone (a
    lost host) cannot checkpoint, and would hold the rendezvous port against the
    relaunch. Ranks on other nodes lose their connection to rank 0 and exit.
    The pattern must not match the task's own entrypoint or sshd: a task whose
    sshd dies exits, and Swarm restarts it somewhere with a new address."""
    pat = shlex.quote(pattern)
    return f"""set -u
ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name={service}" | head -n1)
[ -n "$ctr" ] || {{ echo "stop: no task of {service} here; nothing to stop"; exit 0; }}
docker exec "$ctr" pkill -TERM -f {pat} || true
for i in $(seq 1 {grace_seconds}); do
  if ! docker exec "$ctr" pgrep -f {pat} >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  sleep 1
done
echo "stop: still running after {grace_seconds}s (blocked: a peer is gone?); SIGKILL" >&2
docker exec "$ctr" pkill -KILL -f {pat} || true
"""


def metrics_path(cfg: LaunchSource) -> str:
    """Rank 0's JSON-lines metrics on the shared file system, as seen from the hosts."""
    return f"{cfg.training.data_dir}/logs/{cfg.training.run_name}/metrics.jsonl"


def logs_command(cfg: LaunchSource) -> str:
    """What a user runs to follow the training logs."""
    return (
        f"ssh -p {cfg.master.ssh_port} {cfg.master.ssh_user}@{cfg.master.address} "
        f"docker service logs -f {MASTER_SERVICE}  # or: tail -f {metrics_path(cfg)}"
    )
