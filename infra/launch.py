"""TrainingLaunch: read the real tasks, render the hostfile, start the launcher.

- `TaskRoster` (dynamic resource) waits until every task of the training services
  runs, then records task -> node -> overlay address -> GPU UUIDs from the swarm
  API, and refuses when two tasks hold the same GPU. Its `read` re-reads the
  tasks, so a refresh after a task moved shows a new hostfile; it also re-reads
  them whenever the services' task-spec digest changes (an update restarts tasks).
- The launch itself is a `command.remote.Command` on the master's host (one per
  node for SSH-less launches): it hands the hostfile to the master task and
  starts `deepspeed`/`torchrun` detached. Its triggers are the image, the
  ds_config, the hostfile and the task ids, so any of them changing re-launches
  (the run resumes from its last checkpoint). It is replaced delete-before-replace,
  and its delete SIGTERMs the training script's processes only (never the task's
  sshd), which checkpoint and exit, so two runs never overlap.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_command as command
from docker.errors import NotFound
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource

from infra import render
from infra.config import Host, StackConfig, duration_seconds
from infra.dynamic import BoundaryProvider, diff_keys
from infra.hostops import docker_client, node_hostname


def _assigned_gpus(
    clients: dict[str, Any], props: dict[str, Any], node: str, container_id: str
) -> list[str]:
    """The GPUs Swarm assigned a task, from its container's environment.

    Swarm hands generic resources to the container as `DOCKER_RESOURCE_<KIND>`
    (the NVIDIA container runtime maps it to NVIDIA_VISIBLE_DEVICES); the task
    API's `AssignedGenericResources` is empty on Docker 20.10, so read the env.
    `clients` caches one Docker client per node for the whole roster read.
    """
    endpoint = props["host_endpoints"].get(node)
    if not endpoint or not container_id:
        return []
    if node not in clients:
        clients[node] = docker_client(endpoint)
    env = clients[node].api.inspect_container(container_id)["Config"]["Env"] or []
    key = f"DOCKER_RESOURCE_{render.GPU_RESOURCE}="
    value = next((e[len(key) :] for e in env if e.startswith(key)), "")
    return sorted(u for u in value.split(",") if u)


def _running_tasks(api: Any, props: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(service, task) for every task of the training services that Swarm wants
    running and that runs."""
    out = []
    for svc in props["services"]:
        try:
            tasks = api.tasks(filters={"service": svc, "desired-state": "running"})
        except NotFound:
            continue  # the service is gone (removed by hand): it has no tasks
        out += [(svc, t) for t in tasks if t["Status"]["State"] == "running"]
    return out


def _roster(props: dict[str, Any]) -> list[render.RosterEntry]:
    client = docker_client(props["leader_endpoint"])
    api = client.api
    nodes = {n["ID"]: node_hostname(n) for n in api.nodes()}
    entries: list[render.RosterEntry] = []
    clients: dict[str, Any] = {}
    for svc, t in _running_tasks(api, props):
        address = ""
        for att in t.get("NetworksAttachments") or []:
            if att["Network"]["ID"] == props["network_id"] and att.get("Addresses"):
                address = att["Addresses"][0].split("/")[0]
        node = nodes.get(t["NodeID"], t["NodeID"])
        container = t["Status"].get("ContainerStatus", {}).get("ContainerID", "")
        entries.append(
            {
                "service": svc,
                "slot": int(t.get("Slot") or 0),
                "task_id": t["ID"],
                "node": node,
                "address": address,
                "container_id": container,
                "gpu_uuids": _assigned_gpus(clients, props, node, container),
            }
        )
    return render.order_roster(entries, master=props["services"][0])


def tasks_moved(props: dict[str, Any]) -> bool:
    """Whether the running training tasks are no longer the ones the state holds:
    Swarm moved one (its host was lost, or drained) and the launched run died
    with it. Asked at every diff, so a plain `pulumi preview`/`up` sees it without
    a refresh (which would also read the lost host, and fail there). An
    unreachable leader is not a change here; refresh reports it."""
    try:
        api = docker_client(props["leader_endpoint"]).api
        live = {t["ID"] for _svc, t in _running_tasks(api, props)}
    except Exception:
        return False
    return live != {e["task_id"] for e in props.get("entries") or []}


def wait_for_roster(props: dict[str, Any]) -> list[render.RosterEntry]:
    """Poll until the expected number of tasks run with an overlay address."""
    deadline = time.monotonic() + int(props["timeout_s"])
    roster: list[render.RosterEntry] = []
    while time.monotonic() < deadline:
        roster = _roster(props)
        if len(roster) == props["expected_tasks"] and all(e["address"] for e in roster):
            break
        time.sleep(2)
    else:
        raise Exception(
            f"roster: {len(roster)} of {props['expected_tasks']} training tasks running "
            f"after {props['timeout_s']}s: {[(e['service'], e['node']) for e in roster]}; "
            "see `docker service ps ds-master ds-worker --no-trunc`"
        )
    dupes = render.duplicate_gpus(roster)
    if dupes:
        raise Exception(f"roster: GPUs assigned to more than one task: {dupes}")
    return roster


class TaskRosterProvider(BoundaryProvider):
    """Reads the running training tasks from the swarm."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        roster = wait_for_roster(props)
        return CreateResult(
            id_=f"roster-{props['network_id'][:12]}", outs={**props, "entries": roster}
        )

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> Any:
        from pulumi.dynamic import UpdateResult

        return UpdateResult(outs={**news, "entries": wait_for_roster(news)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs={**props, "entries": _roster(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = (
            "services",
            "network_id",
            "expected_tasks",
            "image_ref",
            "task_spec_digest",
            "leader_endpoint",
        )
        # Fewer tasks running than expected, or other tasks than the state holds
        # (one moved or was removed): re-read, which relaunches the training.
        roster_ok = len(olds.get("entries") or []) == news.get("expected_tasks")
        if not roster_ok or tasks_moved(olds):
            return DiffResult(changes=True)
        return diff_keys(olds, news, keys)


class TaskRoster(Resource):
    """The running training tasks, in node-rank order (dynamic resource)."""

    # Plain dicts: the SDK deserialises outputs by annotation and knows no TypedDict.
    entries: pulumi.Output[list[dict[str, Any]]]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TaskRosterProvider(), name, {**props, "entries": None}, opts)


def connection(cfg: StackConfig, host: Host) -> command.remote.ConnectionArgs:
    """SSH connection for remote commands: the configured key file (lab), else the agent."""
    key_file = cfg.preflight.ssh_private_key_file
    if key_file:
        return command.remote.ConnectionArgs(
            host=host.address,
            port=host.ssh_port,
            user=host.ssh_user,
            private_key=pulumi.Output.secret(Path(key_file).read_text()),
        )
    return command.remote.ConnectionArgs(
        host=host.address,
        port=host.ssh_port,
        user=host.ssh_user,
        agent_socket_path=os.environ.get("SSH_AUTH_SOCK", ""),
    )


class TrainingLaunch(pulumi.ComponentResource):
    """Starts (and on delete, gracefully stops) the training run."""

    roster: TaskRoster
    hostfile: pulumi.Output[str]
    rank_map: pulumi.Output[list[dict[str, Any]]]
    master_address: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        host_endpoints: dict[str, dict[str, Any]],
        services: list[pulumi.Resource],
        service_names: list[str],
        network_id: pulumi.Input[str],
        image_ref: pulumi.Input[str],
        task_spec_digest: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:launch:TrainingLaunch", name, None, opts)
        t = cfg.training
        slots = t.ranks_per_node
        self.roster = TaskRoster(
            f"{name}-roster",
            {
                "leader_endpoint": host_endpoints[cfg.leader.name],
                "host_endpoints": host_endpoints,
                "services": service_names,
                "network_id": network_id,
                "expected_tasks": len(cfg.training_hosts),
                # A new image, or any task-spec update, restarts every task: wait
                # for and re-read the new ones.
                "image_ref": image_ref,
                "task_spec_digest": task_spec_digest,
                "timeout_s": 600,
            },
            pulumi.ResourceOptions(parent=self, depends_on=services),
        )
        entries = self.roster.entries.apply(lambda es: cast(list[render.RosterEntry], es))
        self.hostfile = entries.apply(lambda es: render.render_hostfile(es, slots))
        self.rank_map = entries.apply(lambda es: render.rank_map(es, slots))
        self.master_address = entries.apply(lambda es: es[0]["address"] if es else "")
        # The tasks the run lives in: new tasks (an update, a task moved by Swarm)
        # mean the old launch died with its containers, so launch again.
        task_ids = entries.apply(lambda es: ",".join(e["task_id"] for e in es))
        ds_json = render.ds_config_json(t)
        grace = duration_seconds(t.stop_grace_period)
        nnodes = len(cfg.training_hosts)
        ssh_launch = t.launcher == "deepspeed" and t.launch_mode != "no_ssh"
        # pdsh: one launcher on the master reaches every node over SSH.
        # no_ssh/torchrun: one launcher per node, each told its node rank.
        targets = (
            [(cfg.master, render.MASTER_SERVICE, None)]
            if ssh_launch
            else [
                (h, render.MASTER_SERVICE if i == 0 else render.WORKER_SERVICE, i)
                for i, h in enumerate(cfg.training_hosts)
            ]
        )
        self.commands: list[command.remote.Command] = []
        for host, service, node_rank in targets:

            def script_for(a: list[Any], svc: str = service, rank: int | None = node_rank) -> str:
                return render.launch_script(
                    service=svc,
                    argv=render.launch_argv(cfg, a[1], nnodes, rank),
                    run_name=t.run_name,
                    hostfile=a[0],
                    ds_config=ds_json,
                )

            script = pulumi.Output.all(self.hostfile, self.master_address).apply(script_for)
            suffix = "" if node_rank is None else f"-{node_rank}"
            self.commands.append(
                command.remote.Command(
                    f"{name}-run{suffix}",
                    connection=connection(cfg, host),
                    create=script,
                    delete=render.stop_script(
                        service=service, grace_seconds=grace, pattern=t.script
                    ),
                    triggers=[image_ref, ds_json or t.ds_config, self.hostfile, task_ids],
                    opts=pulumi.ResourceOptions(
                        parent=self,
                        depends_on=[self.roster],
                        # Stop the old run (checkpoint) before starting the new one.
                        delete_before_replace=True,
                    ),
                )
            )
        self.register_outputs(
            {"hostfile": self.hostfile, "rank_map": self.rank_map, "master": self.master_address}
        )
