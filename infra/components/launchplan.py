"""What a training launch is given and what it decides before registering anything:
the launch's inputs (`TrainingLaunchArgs`), where each launcher runs
(`launch_targets`) with which script (`target_script`), what the run's supervisor
follows (`follow_of`), and the master task's host after a takeover. The SSH
connection its remote commands use is infra/components/remote.py's. TrainingLaunch
(infra/components/launch.py) registers the resources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infra.codedir import excluded
from infra.components.clusterref import ClusterRef
from infra.components.image import TrainingImage
from infra.components.remote import SshLink
from infra.components.services import TrainingServices
from infra.components.swarm import SwarmCluster
from infra.config import (
    DEEPSPEED_ENV_FILE,
    Host,
    Network,
    Preflight,
    Training,
    code_dir,
    duration_seconds,
)
from infra.render.command import (
    Placement,
    RunEnv,
    command_argv,
    env_file,
    env_path,
    env_setup,
    run_dirs,
    run_variables,
)
from infra.render.command import workdir as command_workdir
from infra.render.launch import (
    Supervision,
    ds_config_json,
    ds_config_path,
    hostfile_path,
    launch_argv,
    launch_script,
)
from infra.render.roster import RosterEntry
from infra.render.supervisor import MASTER_ADDR_SLOT, Follow


@dataclass(frozen=True)
class TrainingLaunchArgs:
    """The training job, its master and training hosts, how to reach them over SSH,
    the data plane, and the services, swarm and image the tasks run on."""

    training: Training
    master: Host
    training_hosts: Sequence[Host]
    """The hosts with a training task when all are up: the roster expects one each."""
    hosts: Sequence[Host]
    """Every host: on the host data plane a task's address is its host's (a spare too)."""
    network: Network
    """`data_plane`: where the hostfile's addresses come from."""
    preflight: Preflight
    """`ssh_private_key_file`: the key the launch connects with (else the agent)."""
    services: TrainingServices
    swarm: SwarmCluster | ClusterRef
    image: TrainingImage | ClusterRef
    ssh_links: Mapping[str, SshLink] = field(default_factory=dict)
    """The ssh:// hosts' connections with their pinned host keys (infra/components/
    remote.py `ssh_links`); a host not here keeps the key file or agent connection."""
    restart_metrics: bool = False
    """The supervisors keep their restart counts as Prometheus text files on the data
    dir, for the node exporters (monitoring.enabled). Default false: the launch script
    is what it was without monitoring."""
    universal_checkpoints: bool = False
    """The command's DeepSpeed config partitions the optimizer state and loads universal
    checkpoints (infra/config/resume.py `resumes_universal`, which reads the code dir:
    read once by the caller, not per launch target): rank 0's supervisor makes the
    newest checkpoint universal before each attempt (`universal_dir`)."""


def master_on_spare(hosts: Sequence[Host], entries: Sequence[RosterEntry]) -> str | None:
    """follow_master: the warning when the launch found the master task on a spare (an
    update replaced it, and Swarm, which spreads tasks by count, put the new one
    there): the run trains, but the spare is no longer free for a lost host."""
    spares = {h.name for h in hosts if h.spare}
    if not entries or entries[0]["node"] not in spares:
        return None
    node = entries[0]["node"]
    return (
        f"training.recovery.follow_master: ds-master runs on the spare {node!r} (an update "
        "placed it there), so the spare cannot take a lost host's task; move it home: "
        f"docker node update --availability drain {node}, then active (the master's host "
        "takes the run over; docs/run.md)"
    )


def master_host(hosts: Sequence[Host], configured: Host, entries: Sequence[RosterEntry]) -> Host:
    """The host the roster found the master task on (the first entry's node), else the
    configured master (no entries yet, or a node that is not in the config)."""
    if not entries:
        return configured
    return next((h for h in hosts if h.name == entries[0]["node"]), configured)


def follow_of(args: TrainingLaunchArgs, task_script: str) -> Follow | None:
    """What the supervisor follows (training.recovery.follow_moves), else None: the
    worker tasks where Swarm moved them, and with follow_master the master task too
    (a master task that starts again takes the run over: infra/task/takeover.py)."""
    t = args.training
    if not t.recovery.follow_moves:
        return None
    host_plane = args.network.data_plane == "host"
    moves = t.recovery.follow_master
    parsed = t.parsed_command
    module = parsed.target if moves and parsed is not None and parsed.module else ""
    return Follow(
        hostfile=hostfile_path(t),
        port=t.sshd_port,
        names=() if host_plane else (f"tasks.{args.services.worker_name}",),
        addresses=tuple(h.address for h in args.hosts) if host_plane else (),
        forget_host_keys=host_plane,
        # Only where set: a run that follows only its workers keeps its settings.
        master_names=(f"tasks.{args.services.master_name}",) if moves and not host_plane else (),
        master_moves=moves,
        pattern=task_script if moves else "",
        module=module,
        max_takeovers=t.recovery.max_restarts if moves else 0,
        stop_grace_s=duration_seconds(t.stop_grace_period) if moves else 0,
    )


def universal_dir(args: TrainingLaunchArgs, node_rank: int | None) -> str | None:
    """A command whose DeepSpeed config loads universal checkpoints
    (`universal_checkpoints`): on the launch that starts rank 0 (pdsh's one, or node
    rank 0's), the run's checkpoint dir, whose newest checkpoint its supervisor makes
    universal before each attempt (its peers wait for rank 0 meanwhile); else None."""
    t = args.training
    if t.parsed_command is None or node_rank or not args.universal_checkpoints:
        return None
    return run_dirs(t.run_name)["DSS_CHECKPOINT_DIR"]


LaunchTarget = tuple[Host, str, int | None]
"""Where a launcher runs: the host, the service whose task it runs in, its node rank
(None: the one SSH-based launch on the master)."""


def launch_targets(args: TrainingLaunchArgs) -> list[LaunchTarget]:
    """pdsh: one launcher on the master reaches every node over SSH. no_ssh/torchrun:
    one launcher per node, each told its node rank."""
    t = args.training
    master_svc, worker_svc = args.services.master_name, args.services.worker_name
    if t.launcher == "deepspeed" and t.launch_mode != "no_ssh":
        return [(args.master, master_svc, None)]
    return [(h, master_svc if i == 0 else worker_svc, i) for i, h in enumerate(args.training_hosts)]


def target_script(
    args: TrainingLaunchArgs,
    task_script: str,
    follow: Follow | None,
    hostfile: str,
    master_address: str,
    service: str,
    node_rank: int | None,
    code_path: str | None = None,
) -> str:
    """The launch script of one target, once the roster gave the hostfile and the
    master task's address. `code_path`: the synced code's directory in the tasks (a
    command's working directory and script), None for the image's code."""
    t = args.training
    # follow_master: the supervisor reads rank 0's address from the hostfile at
    # each attempt (the master may have moved since the launch).
    master = MASTER_ADDR_SLOT if follow is not None and follow.master_moves else master_address
    nnodes = len(args.training_hosts)
    parsed = t.parsed_command
    if parsed is None:
        # training.script (the image's train.py, or the synced code's): a command like
        # any other. Its argv is the script and training.args alone; its settings reach
        # every rank as the run's DSS_* variables, through the same environment file.
        argv = launch_argv(args, master, nnodes, node_rank, script=task_script)
    else:
        # training.command: its own launch (infra/render/command.py), only where set.
        where = Placement(master, nnodes, node_rank, hostfile_path(t))
        argv = command_argv(t, parsed, where, code_path)
    # Every rank starts in the synced code dir, else in the image's code.
    workdir = command_workdir(code_path)
    env_file, setup = _launch_env(args, code_path, hostfile, node_rank)
    return launch_script(
        service=service,
        argv=argv,
        run_name=t.run_name,
        hostfile=hostfile,
        ds_config=ds_config_json(t),
        # With RDMA declared, the launch waits for NCCL to name its transport and fails
        # (stopping the run) on sockets: never a silent run at a tenth of the bandwidth.
        check_transport=task_script if any(h.rdma_interface for h in args.hosts) else "",
        forget_host_keys=args.network.data_plane == "host",
        workdir=workdir,
        supervision=Supervision(
            max_restarts=t.recovery.max_restarts,
            delay_s=duration_seconds(t.recovery.restart_delay),
            pattern=task_script,
            node_rank=node_rank,
            metrics=args.restart_metrics,
            follow=follow,
            env_file=env_file,
            setup=setup,
            exit_record=parsed is not None,
            universal=universal_dir(args, node_rank),
        ),
        fork_server=t.fork_server,
    )


def deepspeed_env_text(t: Training) -> str:
    """The code dir's `.deepspeed_env` as the launch hands it on ('' without one, or
    when training.code.exclude leaves it out of the code)."""
    if t.code.dir is None or excluded(DEEPSPEED_ENV_FILE, t.code.exclude):
        return ""
    path = code_dir(t.code.dir) / DEEPSPEED_ENV_FILE
    return path.read_text() if path.is_file() else ""


def _launch_env(
    args: TrainingLaunchArgs, code_path: str | None, hostfile: str, node_rank: int | None
) -> tuple[tuple[str, str], str]:
    """The launch's environment file (path, text) and the supervisor's setup that hands
    it to the ranks. The code dir's `.deepspeed_env` and the secrets are a command's
    only (the config rules check and allow them there)."""
    t = args.training
    nodes = [line.split()[0] for line in hostfile.splitlines() if line.strip()]
    run_vars = run_variables(t, code_path, nodes, node_rank, ds_config_path(t))
    command = t.command is not None
    extra = RunEnv(deepspeed_env_text(t) if command else "", t.env, t.secret_env)
    path = env_path(t.run_name, node_rank)
    pdsh = node_rank is None
    return (path, env_file(run_vars, extra)), env_setup(t, path, run_vars, pdsh)
