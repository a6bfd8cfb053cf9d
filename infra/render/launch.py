"""Pure renderers of the training launch: launcher command lines, the transport check
and the launch script. No Pulumi, no I/O: tested directly and by golden files.

The launch script is a file, readable whole: infra/task/launch.sh, its optional parts
(the supervisor, follow_master, the host data plane's forgotten keys, the RDMA
transport check) marked; this module works out its values and parts, and
infra/render/template.py renders it. Its bytes must not move: the script is the input
of the launch's `command.remote.Command`, and any byte of difference is an update that
stops and relaunches every user's training on upgrade. Every variant the config can
produce is a golden file (tests/unit/infra/golden/scripts/).

The roster's order, the hostfile and the rank map are infra/render/roster.py's, the stop
script infra/render/stop.py's, the shell pieces both scripts share infra/render/shell.py's.
Their names stay importable from here, as before the split: the dynamic provider
infra/providers/roster.py imports from this module, and a provider pickled into a stack's
state must load against the module paths it was made with (infra/providers/legacy.py).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from infra.config import Training
from infra.layout import IMAGE_HOME, LAUNCH_DIR, MASTER_SERVICE, TRAIN_UID
from infra.render import template
from infra.render.roster import RosterEntry as RosterEntry
from infra.render.roster import duplicate_gpus as duplicate_gpus
from infra.render.roster import order_roster as order_roster
from infra.render.roster import rank_map as rank_map
from infra.render.roster import render_hostfile as render_hostfile
from infra.render.runfiles import (
    active_path,
    command_ranks_path,
    exitrecord_path,
    follow_path,
    follow_program,
    follow_settings_path,
    forkserver_path,
    forkserver_program,
    launcher_log,
    log_dir,
    ranks_path,
    restart_metrics_file,
    stop_marker,
    supervisor_path,
    takeover_path,
    universal_path,
)
from infra.render.sections import HasTraining, LaunchSource
from infra.render.shell import replace_file as replace_file
from infra.render.shell import task_container as task_container
from infra.render.stop import stop_script as stop_script
from infra.render.supervisor import Follow, supervisor_script


@dataclass(frozen=True)
class Supervision:
    """The launch's supervisor: restarts per launch, the wait between, and the training
    script's command-line pattern (what it kills on this node before a restart)."""

    max_restarts: int
    delay_s: int
    pattern: str
    node_rank: int | None = None
    """The node this launcher runs for (SSH-less launches: one supervisor file each)."""
    metrics: bool = False
    """Keep the restart counts as a Prometheus text file (infra/render/supervisor.py)."""
    follow: Follow | None = None
    """training.recovery.follow_moves: the supervisor follows tasks Swarm moved
    (infra/task/follow.py, written beside it)."""
    env_file: tuple[str, str] | None = None
    """training.command: the launch's environment file (path, text), written beside the
    supervisor (infra/render/command.py)."""
    setup: str = ""
    """training.command: shell the supervisor runs before its loop (the run's
    directories, the environment file handed on). Empty: the supervisor as before."""
    exit_record: bool = False
    """training.command: the supervisor writes an exit record after each attempt
    (infra/task/exitrecord.py, written beside it)."""
    universal: str | None = None
    """A command whose DeepSpeed config loads universal checkpoints, on the launch that
    starts rank 0: the run's checkpoint dir, whose newest checkpoint the supervisor
    makes universal before each attempt (infra/task/universal.py, written beside it)."""


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


def launch_argv(
    cfg: HasTraining,
    master_addr: str,
    nnodes: int,
    node_rank: int | None = None,
    *,
    script: str | None = None,
) -> list[str]:
    """The launcher command line run inside a task.

    `node_rank` is None for the single SSH-based launch on the master (pdsh),
    and the node's rank for SSH-less launches (one per node). `script` is the
    training script's path in the task (synced code's), else `training.script`.
    """
    t = cfg.training
    slots = t.ranks_per_node
    # The script's own arguments only: its run, steps, checkpoint interval, DeepSpeed
    # config and hostfile reach it as DSS_* variables (infra/render/command.py
    # run_variables), as they reach any training.command.
    script_argv = [script or t.script, *t.args]
    if t.launcher == "torchrun":
        rank = 0 if node_rank is None else node_rank
        return [
            "torchrun",
            f"--nnodes={nnodes}",
            f"--nproc_per_node={slots}",
            f"--node_rank={rank}",
            f"--master_addr={master_addr}",
            f"--master_port={t.master_port}",
            *script_argv,
        ]
    # fork_server: the runner through the task's fork server (infra/task/forkserver.py),
    # which is then the `sys.executable` of the launchers and ranks it starts.
    runner = (
        [forkserver_path(t.run_name), "-u", "-m", "deepspeed.launcher.runner"]
        if t.fork_server
        else ["deepspeed"]
    )
    argv = [
        *runner,
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
    return [*argv, *script_argv]


# NCCL's words for its transport (NVIDIA/nccl src/init.cc "Using network %s",
# src/transport/net_socket.cc "NET/Socket : Using", net_ib "NET/IB : Using"; the
# channel lines' "via NET/<name>/<dev>"), and for an IB that could not start under
# NCCL_NET=IB ("Error : network IB not found." up to 2.26, "Failed to initialize any
# NET plugin" from 2.27, the IB plugin's "NET/IB : No device found.").
NCCL_SOCKETS = r"NCCL INFO (Using network Socket|NET/Socket : Using)|via NET/Socket"
NCCL_NO_IB = (
    r"NCCL WARN .*(network IB not found|Failed to initialize any NET plugin)"
    r"|NET/IB : No device found"
)
NCCL_IB = r"NCCL INFO Using network IB"
# How long an RDMA stack's launch waits for NCCL to say which transport it took: its
# first collective comes after the model is built and loaded.
TRANSPORT_WAIT_S = 600


def launch_script(
    *,
    service: str,
    argv: Sequence[str],
    run_name: str,
    hostfile: str,
    ds_config: str | None,
    wait_seconds: int = 300,
    workdir: str = IMAGE_HOME,
    check_transport: str = "",
    transport_wait_s: int = TRANSPORT_WAIT_S,
    forget_host_keys: bool = False,
    supervision: Supervision | None = None,
    fork_server: bool = False,
) -> str:
    """Shell run over SSH on a task's host: find the task's container, wait until it
    is healthy, hand it the hostfile (and inline ds_config), start the launcher
    detached as the training user. Idempotent: an already-running launch is kept.

    `check_transport` (with RDMA declared: the training script's command-line pattern,
    what a failed check stops): then wait up to `transport_wait_s` for NCCL's transport
    verdict (launch.sh's check_transport part), so a run that would fall back to
    sockets fails `pulumi up`.

    `forget_host_keys` (the host data plane): before a new launch, the master task forgets
    the SSH host keys it learnt. Each task makes its host key when it starts, and on the
    host data plane a task that restarted answers at the same address and port as the
    one before it, which `StrictHostKeyChecking accept-new` refuses; a launch always runs
    in tasks the roster just read, so their keys are learnt anew (on the overlay a new
    task has a new address, and nothing is forgotten).

    `supervision`: the launcher runs under the run's supervisor
    (infra/render/supervisor.py), written beside the hostfile, which restarts it after
    a crash within the budget; a new launch clears a stop marker a previous stop left.

    `fork_server` (training.fork_server): the fork server's client, which `argv` runs
    in place of python, is written beside the hostfile (executable).
    """
    files = [(f"{LAUNCH_DIR}/{run_name}/hostfile", hostfile)]
    if fork_server:
        files.append((forkserver_path(run_name), forkserver_program()))
    if ds_config is not None:
        files.append((f"{LAUNCH_DIR}/{run_name}/ds_config.json", ds_config))
    cmd = shlex.join(argv)
    log = launcher_log(run_name)
    inner = f"mkdir -p {log_dir(run_name)} && cd {workdir} && exec {cmd} >>{log} 2>&1"
    values = {
        "SERVICE": shlex.quote(service),
        "WAIT_SECONDS": str(wait_seconds),
        "LAUNCHER": shlex.quote(argv[0]),
        "TRAIN_UID": str(TRAIN_UID),
        "STOP": stop_marker(run_name),
    }
    if supervision is not None:
        sup = supervisor_path(run_name, supervision.node_rank)
        files += _supervised_files(supervision, cmd, run_name, workdir)
        inner = f"exec sh {sup}"
        values |= {"SUPERVISOR": shlex.quote(sup), "ACTIVE": active_path(run_name)}
    if check_transport:
        values |= {
            "LOG": log,
            "TRANSPORT_WAIT_S": str(transport_wait_s),
            "NCCL_BAD": shlex.quote(NCCL_SOCKETS + "|" + NCCL_NO_IB),
            "NCCL_IB": shlex.quote(NCCL_IB),
            "CHECK_PATTERN": shlex.quote(check_transport),
        }
    follow = supervision.follow if supervision is not None else None
    shared = supervision is not None and supervision.exit_record
    values |= {"WRITES": _writes(files, run_name, shared) + "\n", "INNER": shlex.quote(inner)}
    flags = {
        "supervised": supervision is not None,
        "master_moves": follow is not None and follow.master_moves,
        "forget_host_keys": forget_host_keys,
        "check_transport": bool(check_transport),
    }
    return template.render("launch.sh", values, flags)


def _supervised_files(
    supervision: Supervision, cmd: str, run_name: str, workdir: str
) -> list[tuple[str, str]]:
    """The files a supervised launch writes beside the hostfile (path, text): with
    follow_moves the follow program and its settings (follow_master: the takeover
    program and ranks.py too; training.command: the exit record program, ranks.py and
    commandranks.py), then the supervisor of launcher command `cmd`."""
    files = [supervision.env_file] if supervision.env_file is not None else []
    node = "master" if supervision.node_rank is None else str(supervision.node_rank)
    if supervision.exit_record:  # training.command: its exit records, its stop's ranks
        files.append((exitrecord_path(run_name), follow_program("exitrecord.py")))
        files.append((ranks_path(run_name), follow_program("ranks.py")))
        files.append((command_ranks_path(run_name), follow_program("commandranks.py")))
    if supervision.universal is not None:
        files.append((universal_path(run_name), follow_program("universal.py")))
    if supervision.follow is not None:
        # Before the supervisor: a new one runs them at its first attempt.
        files.append((follow_path(run_name), follow_program()))
        if supervision.follow.master_moves:
            files.append((takeover_path(run_name), follow_program("takeover.py")))
            if not supervision.exit_record:  # written above
                files.append((ranks_path(run_name), follow_program("ranks.py")))
        files.append((follow_settings_path(run_name), supervision.follow.settings(run_name)))
    body = supervisor_script(
        cmd=cmd,
        run_name=run_name,
        workdir=workdir,
        max_restarts=supervision.max_restarts,
        delay_s=supervision.delay_s,
        pattern=supervision.pattern,
        metrics_file=(
            restart_metrics_file(run_name, supervision.node_rank) if supervision.metrics else None
        ),
        supervisor="master" if supervision.node_rank is None else str(supervision.node_rank),
        follow=supervision.follow,
        setup=supervision.setup,
        exit_record=node if supervision.exit_record else None,
        universal=supervision.universal,
    )
    return [*files, (supervisor_path(run_name, supervision.node_rank), body)]


def _writes(files: Sequence[tuple[str, str]], run_name: str, shared: bool = False) -> str:
    """Shell: each file (path, text) handed to the task, the fork server's client
    executable. Each is replaced, not rewritten in place: a running supervisor reads its
    own. `shared` (training.command): per-node launches write the same files at once,
    each through a temporary file of its own (`replace_file`)."""
    return "\n".join(
        f'printf %s {shlex.quote(body)} | docker exec -i -u {TRAIN_UID} "$ctr" '
        f"sh -c {shlex.quote(replace_file(path, path == forkserver_path(run_name), shared))}"
        for path, body in files
    )


def metrics_path(cfg: LaunchSource) -> str:
    """Rank 0's JSON-lines metrics on the shared file system, as seen from the hosts."""
    return f"{cfg.training.data_dir}/logs/{cfg.training.run_name}/metrics.jsonl"


def logs_command(cfg: LaunchSource, service: str = MASTER_SERVICE) -> str:
    """What a user runs to follow the training logs (of master service `service`)."""
    return (
        f"ssh -p {cfg.master.ssh_port} {cfg.master.ssh_user}@{cfg.master.address} "
        f"docker service logs -f {service}  # or: tail -f {metrics_path(cfg)}"
    )
