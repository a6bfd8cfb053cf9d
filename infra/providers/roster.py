"""TaskRoster: the running training tasks, read from the swarm (dynamic provider).

It waits until every task of the training services runs, then records task ->
node -> address (on the overlay, or its host's on the host data plane) -> GPU
UUIDs from the swarm API, and refuses when two tasks hold the same GPU. Its
`read` re-reads the tasks, so a refresh after a task moved shows a new hostfile;
it also re-reads them whenever the services' task-spec digest changes (an update
restarts tasks), and its diff notices tasks that Swarm moved (see `tasks_moved`).
infra/components/launch.py renders the hostfile from it and starts the launcher.
"""

from __future__ import annotations

import time
from typing import Any

import pulumi
from docker.errors import NotFound
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource

from infra.layout import GPU_RESOURCE
from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import docker_client, node_hostname, ssh_of
from infra.providers.reach import host_named, settle
from infra.render.launch import RosterEntry, duplicate_gpus, order_roster


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
        clients[node] = docker_client(endpoint, ssh_of(props, endpoint))
    env = clients[node].api.inspect_container(container_id)["Config"]["Env"] or []
    key = f"DOCKER_RESOURCE_{GPU_RESOURCE}="
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


def _roster(props: dict[str, Any]) -> list[RosterEntry]:
    client = docker_client(props["leader_endpoint"], ssh_of(props, props["leader_endpoint"]))
    api = client.api
    nodes = {n["ID"]: node_hostname(n) for n in api.nodes()}
    entries: list[RosterEntry] = []
    clients: dict[str, Any] = {}
    # On the host data plane (infra/components/launch.py sets these): the host's address.
    node_addresses: dict[str, str] = props.get("node_addresses") or {}
    for svc, t in _running_tasks(api, props):
        address = ""
        for att in t.get("NetworksAttachments") or []:
            if att["Network"]["ID"] == props["network_id"] and att.get("Addresses"):
                address = att["Addresses"][0].split("/")[0]
        node = nodes.get(t["NodeID"], t["NodeID"])
        if node_addresses:
            address = node_addresses.get(node, "")
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
    return order_roster(entries, master=props["services"][0])


def tasks_moved(props: dict[str, Any], follow: bool = False) -> bool:
    """Whether the running training tasks are no longer the ones the state holds:
    Swarm moved one (its host was lost, or drained) and the launched run died
    with it. A run that follows its tasks (`follow`) resumes on a moved task by itself,
    so for it only a roster none of whose tasks still run has moved (every task
    re-created: hosts rebooted, the services forced). Asked at every diff, so a plain
    `pulumi preview`/`up` sees it without a refresh (which would also read the lost
    host, and fail there). A leader that cannot be reached is no change only when
    another manager reports it lost (infra/providers/reach.py, with a warning); else
    the diff fails naming it. An answer that is an error (the leader's API refused) is
    no change, as before."""
    leader = props["leader_endpoint"]
    try:
        api = docker_client(leader, ssh_of(props, leader)).api
        live = {t["ID"] for _svc, t in _running_tasks(api, props)}
    except Exception as e:
        settle(props, host_named(props, leader["url"]), leader["url"], e)
        return False
    recorded = {e["task_id"] for e in props.get("entries") or []}
    return not live & recorded if follow else live != recorded


def addresses_moved(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """On the host data plane: whether a node that holds a task got another address.
    Hosts without a task coming or going (a drained host removed, a host added) change
    no address in the hostfile, so they re-read nothing (and restart nothing)."""
    old = olds.get("node_addresses") or {}
    new = news.get("node_addresses") or {}
    if bool(old) != bool(new):
        return True  # the data plane itself changed
    return any(old.get(e["node"]) != new.get(e["node"]) for e in olds.get("entries") or [])


def read_entries(props: dict[str, Any]) -> list[RosterEntry]:
    """What a refresh records: the running tasks. A run that follows its tasks
    (`follow_moves`) keeps the placement it was launched on while as many tasks run
    as it expects and one of them is still a task it was launched on: its supervisor
    found the moved task itself, and the launch's hostfile and triggers describe the
    run, not where Swarm put its tasks since (the live hostfile is the run's own,
    beside the supervisor). Fewer tasks than expected, or none of the launched ones
    left (every task re-created, the run gone with them), is recorded as it is, and
    the next `up` re-reads them (the gate measures the new placement)."""
    live = _roster(props)
    kept = props.get("entries") or []
    launched = {e["task_id"] for e in kept}
    if (
        props.get("follow_moves")
        and len(live) == props["expected_tasks"]
        and launched & {e["task_id"] for e in live}
    ):
        return kept
    return live


def wait_for_roster(props: dict[str, Any]) -> list[RosterEntry]:
    """Poll until the expected number of tasks run with an overlay address."""
    deadline = time.monotonic() + int(props["timeout_s"])
    roster: list[RosterEntry] = []
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
    dupes = duplicate_gpus(roster)
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
        return ReadResult(id_=id_, outs={**props, "entries": read_entries(props)})

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
        if len(olds.get("entries") or []) != news.get("expected_tasks"):
            return DiffResult(changes=True)  # a change already: the leader is not asked
        # A run that follows its tasks (training.recovery.follow_moves) resumed on
        # the moved one itself: a move is no change to it, every task re-created is.
        moved = tasks_moved(olds, follow=bool(news.get("follow_moves")))
        if moved or addresses_moved(olds, news):
            return DiffResult(changes=True)
        return diff_keys(olds, news, (*keys, "follow_moves"))


class TaskRoster(Resource):
    """The running training tasks, in node-rank order (dynamic resource)."""

    # Plain dicts: the SDK deserialises outputs by annotation and knows no TypedDict.
    entries: pulumi.Output[list[dict[str, Any]]]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TaskRosterProvider(), name, {**props, "entries": None}, opts)
