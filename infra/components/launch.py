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

What the launch is given and decides before registering anything (its args, the
targets, each target's script, the SSH connection) is infra/components/launchplan.py;
those names stay importable from here.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pulumi
import pulumi_command as command

from infra.command import tokens
from infra.components.code import TrainingCode, TrainingCodeArgs
from infra.components.gate import BandwidthGate, BandwidthGateArgs
from infra.components.launchplan import LaunchTarget, launch_targets, target_script, universal_dir
from infra.components.launchplan import TrainingLaunchArgs as TrainingLaunchArgs
from infra.components.launchplan import follow_of as follow_of
from infra.components.launchplan import master_host as master_host
from infra.components.launchplan import master_on_spare as master_on_spare
from infra.components.remote import connection as connection
from infra.components.swarm import ssh_prop
from infra.config import Host, Training, code_dir, duration_seconds
from infra.layout import LAUNCH_TYPE, RUN_RECORD_SUFFIX
from infra.providers.roster import TaskRoster
from infra.providers.run import TrainingRun
from infra.render.command import rank_pattern, script_path
from infra.render.launch import ds_config_json, logs_command, metrics_path
from infra.render.roster import RosterEntry, rank_map, render_hostfile
from infra.render.runfiles import supervisor_path
from infra.render.stop import CommandRanks, stop_script


def _command_trigger(t: Training) -> str:
    """training.command and secret_env as one canonical text (the launch's trigger)."""
    return json.dumps(
        {"command": tokens(t.command or []), "secret_env": t.secret_env}, sort_keys=True
    )


def _command_record(t: Training, targets: list[LaunchTarget]) -> dict[str, Any]:
    """The run record's inputs for a command: the nodes whose exit records it reads
    (`master` under pdsh, else the node ranks) and its stall (only where set)."""
    stall = "stall_after" in t.recovery.model_fields_set
    return {
        "exit_records": ["master" if r is None else str(r) for _, _, r in targets],
        "stall_after_s": duration_seconds(t.recovery.stall_after) if stall else 0,
    }


def _command_ranks(t: Training, code_path: str | None, ssh_launch: bool) -> CommandRanks | None:
    """training.command: how its stop finds the ranks (a module's too); under pdsh on
    every hostfile host, so a script that saves with a collective on SIGTERM has its
    peers saving with it. None without a command: the stop as before, byte for byte."""
    parsed = t.parsed_command
    if parsed is None:
        return None
    return CommandRanks(
        target=script_path(parsed, code_path),
        module=parsed.module,
        ssh_port=t.sshd_port if ssh_launch else None,
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
        self.roster = self._roster(name, args)
        entries = self.roster.entries.apply(lambda es: cast(list[RosterEntry], es))
        # The same entries as plain dicts, for the dynamic resources that take them.
        task_entries = entries.apply(lambda es: cast(list[dict[str, Any]], es))
        self.hostfile = entries.apply(lambda es: render_hostfile(es, slots))
        # Each rank's GPU model only for a job that names its hosts (docs/design/
        # sharing.md, 3.1): any other stack's rank map, an output, stays as it was.
        models = {h.name: h.gpus.model for h in args.hosts} if t.hosts else None
        self.rank_map = entries.apply(lambda es: rank_map(es, slots, models))
        self.master_address = entries.apply(lambda es: es[0]["address"] if es else "")
        self.logs_command = logs_command(args, args.services.master_name)
        self.training_log = metrics_path(args)
        # The code, when synced: on the data dir before anything runs it, its digest
        # in the script's path and the launch's triggers.
        self.code = self._code(name, args, task_entries)
        code_path = self.code.path if self.code else None
        parsed = t.parsed_command
        # What the stop, the supervisor and the probe look for: the script's path in
        # the tasks (a command's: infra/render/command.py rank_pattern).
        if parsed is not None:
            task_script = rank_pattern(parsed, code_path)
        else:
            task_script = f"{self.code.path}/{t.script}" if self.code else t.script
        self.gate = self._gate(name, args, task_script, task_entries)
        targets = launch_targets(args)
        self.commands = self._commands(name, args, entries, task_script, targets, code_path)
        self.run = self._run_record(name, args, entries, task_script, targets)
        self.register_outputs(
            {
                "hostfile": self.hostfile,
                "rank_map": self.rank_map,
                "master": self.master_address,
                "run_state": self.run.state,
            }
        )

    def _roster(self, name: str, args: TrainingLaunchArgs) -> TaskRoster:
        """The tasks of the training services as Swarm runs them, once every one runs."""
        roster_props: dict[str, Any] = {
            "leader_endpoint": args.swarm.leader_endpoint,
            "host_endpoints": args.swarm.endpoints,
            **ssh_prop(args.swarm.ssh_hosts),
            "services": args.services.service_names,
            "network_id": args.services.training_network_id,
            "expected_tasks": len(args.training_hosts),
            # A new image, or any task-spec update, restarts every task: wait
            # for and re-read the new ones.
            "image_ref": args.image.ref,
            "task_spec_digest": args.services.task_spec_digest,
            "timeout_s": 600,
        }
        if args.network.data_plane == "host":
            # A task on the host network has no address of its own: its host's
            # (hosts[].address), where its sshd and the rendezvous listen.
            roster_props["node_addresses"] = {h.name: h.address for h in args.hosts}
        if args.training.recovery.follow_moves:
            # The run follows moved tasks itself: the roster keeps the placement the
            # run was launched on (infra/providers/roster.py), so a move relaunches
            # nothing and the next preview is a no-op. Only where set: a stack without
            # it keeps its roster's inputs.
            roster_props["follow_moves"] = True
        return TaskRoster(
            f"{name}-roster",
            roster_props,
            pulumi.ResourceOptions(parent=self, depends_on=args.services.gpu_services),
        )

    def _code(
        self, name: str, args: TrainingLaunchArgs, tasks: pulumi.Output[list[dict[str, Any]]]
    ) -> TrainingCode | None:
        """The training code synced from `training.code.dir` (None: the image's code)."""
        t = args.training
        if t.code.dir is None:
            return None
        return TrainingCode(
            f"{name}-code",
            TrainingCodeArgs(
                code=t.code,
                root=code_dir(t.code.dir),
                run_name=t.run_name,
                host_endpoints=args.swarm.endpoints,
                tasks=tasks,
                ssh_hosts=args.swarm.ssh_hosts,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[self.roster]),
        )

    def _gate(
        self,
        name: str,
        args: TrainingLaunchArgs,
        task_script: str,
        tasks: pulumi.Output[list[dict[str, Any]]],
    ) -> BandwidthGate | None:
        """The gate: an all-reduce across the new tasks before anything is launched in
        them (None: `preflight.gate.enabled` off)."""
        if not args.preflight.gate.enabled:
            return None
        return BandwidthGate(
            f"{name}-gate",
            BandwidthGateArgs(
                gate=args.preflight.gate,
                hosts=args.hosts,
                script=task_script,
                host_endpoints=args.swarm.endpoints,
                tasks=tasks,
                ssh_hosts=args.swarm.ssh_hosts,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[self.roster]),
        )

    def _commands(
        self,
        name: str,
        args: TrainingLaunchArgs,
        entries: pulumi.Output[list[RosterEntry]],
        task_script: str,
        targets: list[LaunchTarget],
        code_path: str | None = None,
    ) -> list[command.remote.Command]:
        """One launch command per target (`<name>-run`, `<name>-run-<rank>`), after the
        roster, the gate and the code: it starts the run, and its delete stops it."""
        t = args.training
        follow = follow_of(args, task_script)
        takeover = follow is not None and follow.master_moves
        ssh_launch = t.launcher == "deepspeed" and t.launch_mode != "no_ssh"
        before_launch: list[pulumi.Resource] = [
            self.roster,
            *([self.gate] if self.gate else []),
            *([self.code] if self.code else []),
        ]
        # The tasks the run lives in: new tasks (an update, a task moved by Swarm)
        # mean the old launch died with its containers, so launch again.
        task_ids = entries.apply(lambda es: ",".join(e["task_id"] for e in es))
        if takeover:
            # Side effect only: a warning in the preview and the PR comment.
            entries.apply(lambda es: _warn(master_on_spare(args.hosts, es), self))
        stop_ranks = _command_ranks(t, code_path, ssh_launch)
        commands = []
        for host, service, node_rank in targets:

            def script_for(a: list[Any], svc: str = service, rank: int | None = node_rank) -> str:
                return target_script(args, task_script, follow, a[0], a[1], svc, rank, code_path)

            # follow_master: the pdsh launch goes to the host the master task runs on as
            # the roster read it (an update may place it on a spare); the roster keeps the
            # launch's placement after a takeover, so this changes only with new tasks,
            # which relaunch anyway.
            def placed(es: list[RosterEntry], h: Host = host) -> Host:
                return master_host(args.hosts, h, es)

            script = pulumi.Output.all(self.hostfile, self.master_address).apply(script_for)
            where = entries.apply(placed) if ssh_launch and takeover else host
            suffix = "" if node_rank is None else f"-{node_rank}"
            commands.append(
                command.remote.Command(
                    f"{name}-run{suffix}",
                    connection=connection(args.preflight, where, args.ssh_links),
                    create=script,
                    delete=stop_script(
                        service=service,
                        grace_seconds=duration_seconds(t.stop_grace_period),
                        pattern=task_script,
                        run_name=t.run_name,
                        follow=follow is not None,
                        takeover=takeover,
                        data_dir=t.data_dir,
                        command=stop_ranks,
                        universal=universal_dir(args, node_rank) is not None,
                    ),
                    triggers=self._triggers(args, task_ids),
                    opts=pulumi.ResourceOptions(
                        parent=self,
                        depends_on=before_launch,
                        # Stop the old run (checkpoint) before starting the new one.
                        delete_before_replace=True,
                    ),
                )
            )
        return commands

    def _triggers(self, args: TrainingLaunchArgs, task_ids: pulumi.Output[str]) -> list[Any]:
        """What, changed, relaunches the run: the image, the ds_config, the hostfile and
        the tasks. The code's digest only where code is synced: a stack without it keeps
        the triggers it was launched with (no relaunch)."""
        t = args.training
        return [
            args.image.ref,
            ds_config_json(t) or t.ds_config,
            self.hostfile,
            task_ids,
            *([self.code.digest] if self.code else []),
            # Turning the fork server on or off relaunches the run (a changed `create`
            # alone would keep the running one). Only where set, as above.
            *(["fork_server"] if t.fork_server else []),
            # training.command: a changed command or secret variables relaunch the run
            # (the script's arguments are what it started with). Only where set.
            *([_command_trigger(t)] if t.command is not None else []),
        ]

    def _run_record(
        self,
        name: str,
        args: TrainingLaunchArgs,
        entries: pulumi.Output[list[RosterEntry]],
        task_script: str,
        targets: list[LaunchTarget],
    ) -> TrainingRun:
        """The run itself: read from the tasks the roster holds (where the run lives),
        relaunched through the supervisors the launch targets run."""
        t = args.training
        recovery = t.recovery
        follow = follow_of(args, task_script)
        return TrainingRun(
            f"{name}{RUN_RECORD_SUFFIX}",
            {
                "run_name": t.run_name,
                "script": task_script,
                "target_steps": t.steps,
                "stall_after_s": duration_seconds(recovery.stall_after),
                "max_restarts": recovery.max_restarts,
                "host_endpoints": args.swarm.endpoints,
                **ssh_prop(args.swarm.ssh_hosts),
                "tasks": entries.apply(
                    lambda es: [{"node": e["node"], "service": e["service"]} for e in es]
                ),
                "launches": [
                    {"node": h.name, "service": svc, "supervisor": supervisor_path(t.run_name, r)}
                    for h, svc, r in targets
                ],
                "launched": [c.id for c in self.commands],
                # training.command only: the run's end is read from each launch target's
                # exit record; its stall only where stall_after is set (0: never).
                **(_command_record(t, targets) if t.command is not None else {}),
                # Only where set: the master task may be found on another host.
                **({"follow_master": True} if follow is not None and follow.master_moves else {}),
            },
            pulumi.ResourceOptions(parent=self, depends_on=self.commands),
        )
