"""TrainingLaunch: read the real tasks, render the hostfile, start the launcher.

- `TaskRoster` (infra/providers/roster.py) waits until every task of the training
  services runs and records task -> node -> overlay address -> GPU UUIDs.
- The launch itself is a `command.remote.Command` on the master's host (one per
  node for SSH-less launches): it hands the hostfile to the master task and
  starts `deepspeed`/`torchrun` detached. Its triggers are the image, the
  ds_config, the hostfile and the task ids, so any of them changing re-launches
  (the run resumes from its last checkpoint). It is replaced delete-before-replace,
  and its delete SIGTERMs the training script's processes only (never the task's
  sshd), which checkpoint and exit, so two runs never overlap. The launcher runs
  under the run's supervisor (infra/render/supervisor.py), which restarts it after a
  crash from the newest complete checkpoint, within `training.recovery.max_restarts`.
- `TrainingRun` (infra/providers/run.py) reads the run from its tasks: running,
  finished, failed or stalled. A failed or stalled run is drift, and `pulumi up`
  relaunches it; its state is the `run` stack output.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_command as command

from infra.components.clusterref import ClusterRef
from infra.components.code import TrainingCode, TrainingCodeArgs
from infra.components.gate import BandwidthGate, BandwidthGateArgs
from infra.components.image import TrainingImage
from infra.components.services import TrainingServices
from infra.components.swarm import SwarmCluster
from infra.config import Host, Network, Preflight, Training, code_dir, duration_seconds
from infra.layout import LAUNCH_TYPE, RUN_RECORD_SUFFIX
from infra.providers.roster import TaskRoster
from infra.providers.run import TrainingRun
from infra.render.launch import (
    RosterEntry,
    Supervision,
    ds_config_json,
    hostfile_path,
    launch_argv,
    launch_script,
    logs_command,
    metrics_path,
    rank_map,
    render_hostfile,
    stop_script,
)
from infra.render.runfiles import supervisor_path
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
    restart_metrics: bool = False
    """The supervisors keep their restart counts as Prometheus text files on the data
    dir, for the node exporters (monitoring.enabled). Default false: the launch script
    is what it was without monitoring."""


def connection(
    preflight: Preflight, host: Host | pulumi.Output[Host]
) -> command.remote.ConnectionArgs:
    """SSH connection for remote commands: the configured key file (lab), else the agent.
    `host` may be known only once the roster is read (follow_master's launch)."""
    address: pulumi.Input[str]
    port: pulumi.Input[int]
    user: pulumi.Input[str]
    if isinstance(host, Host):
        address, port, user = host.address, host.ssh_port, host.ssh_user
    else:
        address = host.apply(lambda h: h.address)
        port = host.apply(lambda h: h.ssh_port)
        user = host.apply(lambda h: h.ssh_user)
    key_file = preflight.ssh_private_key_file
    if key_file:
        return command.remote.ConnectionArgs(
            host=address,
            port=port,
            user=user,
            private_key=pulumi.Output.secret(Path(key_file).read_text()),
        )
    return command.remote.ConnectionArgs(
        host=address,
        port=port,
        user=user,
        agent_socket_path=os.environ.get("SSH_AUTH_SOCK", ""),
    )


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
        max_takeovers=t.recovery.max_restarts if moves else 0,
        stop_grace_s=duration_seconds(t.stop_grace_period) if moves else 0,
    )


def _warn(message: str | None, resource: pulumi.Resource) -> None:
    if message:
        pulumi.log.warn(message, resource=resource)


class TrainingLaunch(pulumi.ComponentResource):
    """Starts (and on delete, gracefully stops) the training run."""

    roster: TaskRoster
    hostfile: pulumi.Output[str]
    rank_map: pulumi.Output[list[dict[str, Any]]]
    master_address: pulumi.Output[str]
    logs_command: str
    """What a user runs to follow the training logs."""
    training_log: str
    """Rank 0's metrics file on the shared file system."""
    run: TrainingRun
    """The run's state, read from its tasks."""
    gate: BandwidthGate | None
    """The all-reduce gate the launch waits for (None: `preflight.gate.enabled` off)."""
    code: TrainingCode | None
    """The synced training code (None: `training.code.dir` unset, the image's code)."""

    def __init__(
        self, name: str, args: TrainingLaunchArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(LAUNCH_TYPE, name, None, opts)
        t = args.training
        slots = t.ranks_per_node
        image_ref = args.image.ref
        roster_props: dict[str, Any] = {
            "leader_endpoint": args.swarm.leader_endpoint,
            "host_endpoints": args.swarm.endpoints,
            "services": args.services.service_names,
            "network_id": args.services.training_network_id,
            "expected_tasks": len(args.training_hosts),
            # A new image, or any task-spec update, restarts every task: wait
            # for and re-read the new ones.
            "image_ref": image_ref,
            "task_spec_digest": args.services.task_spec_digest,
            "timeout_s": 600,
        }
        if args.network.data_plane == "host":
            # A task on the host network has no address of its own: its host's
            # (hosts[].address), where its sshd and the rendezvous listen.
            roster_props["node_addresses"] = {h.name: h.address for h in args.hosts}
        if t.recovery.follow_moves:
            # The run follows moved tasks itself: the roster keeps the placement the
            # run was launched on (infra/providers/roster.py), so a move relaunches
            # nothing and the next preview is a no-op. Only where set: a stack without
            # it keeps its roster's inputs.
            roster_props["follow_moves"] = True
        self.roster = TaskRoster(
            f"{name}-roster",
            roster_props,
            pulumi.ResourceOptions(parent=self, depends_on=args.services.gpu_services),
        )
        entries = self.roster.entries.apply(lambda es: cast(list[RosterEntry], es))
        # The same entries as plain dicts, for the dynamic resources that take them.
        task_entries = entries.apply(lambda es: cast(list[dict[str, Any]], es))
        self.hostfile = entries.apply(lambda es: render_hostfile(es, slots))
        self.rank_map = entries.apply(lambda es: rank_map(es, slots))
        self.master_address = entries.apply(lambda es: es[0]["address"] if es else "")
        self.logs_command = logs_command(args, args.services.master_name)
        self.training_log = metrics_path(args)
        # The code, when synced: on the data dir before anything runs it, its digest
        # in the script's path and the launch's triggers.
        self.code = None
        task_script = t.script
        if t.code.dir is not None:
            self.code = TrainingCode(
                f"{name}-code",
                TrainingCodeArgs(
                    code=t.code,
                    root=code_dir(t.code.dir),
                    run_name=t.run_name,
                    host_endpoints=args.swarm.endpoints,
                    tasks=task_entries,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[self.roster]),
            )
            task_script = f"{self.code.path}/{t.script}"
        follow = follow_of(args, task_script)
        # The gate: an all-reduce across the new tasks before anything is launched in them.
        self.gate = None
        if args.preflight.gate.enabled:
            self.gate = BandwidthGate(
                f"{name}-gate",
                BandwidthGateArgs(
                    gate=args.preflight.gate,
                    hosts=args.hosts,
                    script=task_script,
                    host_endpoints=args.swarm.endpoints,
                    tasks=task_entries,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[self.roster]),
            )
        before_launch: list[pulumi.Resource] = [
            self.roster,
            *([self.gate] if self.gate else []),
            *([self.code] if self.code else []),
        ]
        # The tasks the run lives in: new tasks (an update, a task moved by Swarm)
        # mean the old launch died with its containers, so launch again.
        task_ids = entries.apply(lambda es: ",".join(e["task_id"] for e in es))
        ds_json = ds_config_json(t)
        grace = duration_seconds(t.stop_grace_period)
        nnodes = len(args.training_hosts)
        ssh_launch = t.launcher == "deepspeed" and t.launch_mode != "no_ssh"
        # pdsh: one launcher on the master reaches every node over SSH.
        # no_ssh/torchrun: one launcher per node, each told its node rank.
        master_svc, worker_svc = args.services.master_name, args.services.worker_name
        targets = (
            [(args.master, master_svc, None)]
            if ssh_launch
            else [
                (h, master_svc if i == 0 else worker_svc, i)
                for i, h in enumerate(args.training_hosts)
            ]
        )
        self.commands: list[command.remote.Command] = []
        # With RDMA declared, the launch waits for NCCL to name its transport and fails
        # (stopping the run) on sockets: never a silent run at a tenth of the bandwidth.
        check = task_script if any(h.rdma_interface for h in args.hosts) else ""
        recovery = t.recovery
        takeover = follow is not None and follow.master_moves

        # follow_master: the supervisor reads rank 0's address from the hostfile at
        # each attempt (the master may have moved since the launch).
        def master_for(address: str) -> str:
            return MASTER_ADDR_SLOT if takeover else address

        if takeover:
            # Side effect only: a warning in the preview and the PR comment.
            entries.apply(lambda es: _warn(master_on_spare(args.hosts, es), self))

        # follow_master: the pdsh launch goes to the host the master task runs on as
        # the roster read it (an update may place it on a spare); the roster keeps the
        # launch's placement after a takeover, so this changes only with new tasks,
        # which relaunch anyway.
        def where(host: Host) -> Host | pulumi.Output[Host]:
            if not (ssh_launch and takeover):
                return host
            return entries.apply(lambda es: master_host(args.hosts, host, es))

        for host, service, node_rank in targets:

            def script_for(a: list[Any], svc: str = service, rank: int | None = node_rank) -> str:
                return launch_script(
                    service=svc,
                    argv=launch_argv(args, master_for(a[1]), nnodes, rank, script=task_script),
                    run_name=t.run_name,
                    hostfile=a[0],
                    ds_config=ds_json,
                    check_transport=check,
                    forget_host_keys=args.network.data_plane == "host",
                    supervision=Supervision(
                        max_restarts=recovery.max_restarts,
                        delay_s=duration_seconds(recovery.restart_delay),
                        pattern=task_script,
                        node_rank=rank,
                        metrics=args.restart_metrics,
                        follow=follow,
                    ),
                    fork_server=t.fork_server,
                )

            script = pulumi.Output.all(self.hostfile, self.master_address).apply(script_for)
            suffix = "" if node_rank is None else f"-{node_rank}"
            self.commands.append(
                command.remote.Command(
                    f"{name}-run{suffix}",
                    connection=connection(args.preflight, where(host)),
                    create=script,
                    delete=stop_script(
                        service=service,
                        grace_seconds=grace,
                        pattern=task_script,
                        run_name=t.run_name,
                        follow=follow is not None,
                        takeover=takeover,
                        data_dir=t.data_dir,
                    ),
                    # The code's digest only where code is synced: a stack without
                    # it keeps the triggers it was launched with (no relaunch).
                    triggers=[
                        image_ref,
                        ds_json or t.ds_config,
                        self.hostfile,
                        task_ids,
                        *([self.code.digest] if self.code else []),
                        # Turning the fork server on or off relaunches the run (a
                        # changed `create` alone would keep the running one). Only
                        # where set, as above.
                        *(["fork_server"] if t.fork_server else []),
                    ],
                    opts=pulumi.ResourceOptions(
                        parent=self,
                        depends_on=before_launch,
                        # Stop the old run (checkpoint) before starting the new one.
                        delete_before_replace=True,
                    ),
                )
            )
        # The run itself: read from the tasks the roster holds (where the run lives),
        # relaunched through the supervisors the launch targets run.
        self.run = TrainingRun(
            f"{name}{RUN_RECORD_SUFFIX}",
            {
                "run_name": t.run_name,
                "script": task_script,
                "target_steps": t.steps,
                "stall_after_s": duration_seconds(recovery.stall_after),
                "max_restarts": recovery.max_restarts,
                "host_endpoints": args.swarm.endpoints,
                "tasks": entries.apply(
                    lambda es: [{"node": e["node"], "service": e["service"]} for e in es]
                ),
                "launches": [
                    {"node": h.name, "service": svc, "supervisor": supervisor_path(t.run_name, r)}
                    for h, svc, r in targets
                ],
                "launched": [c.id for c in self.commands],
                # Only where set: the master task may be found on another host.
                **({"follow_master": True} if takeover else {}),
            },
            pulumi.ResourceOptions(parent=self, depends_on=self.commands),
        )
        self.register_outputs(
            {
                "hostfile": self.hostfile,
                "rank_map": self.rank_map,
                "master": self.master_address,
                "run_state": self.run.state,
            }
        )
