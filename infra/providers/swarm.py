"""The swarm's dynamic providers: init on the first manager, join the rest, label
every node.

The docker provider has no swarm or node resources, so two dynamic resources do
it through the Docker API, each with a `read`, so `pulumi refresh` notices a node
that left, changed role, was drained or lost a label:

- `SwarmInit` (the leader): `docker swarm init`, or adopts a swarm the leader is
  already managing.
- `SwarmNode` (every host, leader included): joins with the right token (or
  adopts membership of the same swarm), then sets role, availability and labels
  through the leader. Delete leaves the swarm and removes the node.

Join tokens never enter the state: each join asks the leader's API for the token
at that moment and hands it straight to the joining engine.

infra/components/swarm.py declares them, one per host.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pulumi
from docker.errors import APIError, DockerException, NotFound
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource
from requests.exceptions import ConnectionError as RequestsConnectionError

from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import HostError, docker_client, node_hostname, ssh_of

SWARM_PORT = 2377


def _swarm_state(client: Any) -> dict[str, Any]:
    return dict(client.info().get("Swarm") or {})


class SwarmInitProvider(BoundaryProvider):
    """Initialises (or adopts) the swarm on the leader."""

    def _describe(self, client: Any) -> dict[str, Any]:
        return {"swarm_id": client.swarm.attrs["ID"]}

    def create(self, props: dict[str, Any]) -> CreateResult:
        client = docker_client(props["endpoint"], ssh_of(props, props["endpoint"]))
        state = _swarm_state(client)
        if state.get("LocalNodeState") != "active":
            client.swarm.init(
                advertise_addr=props["advertise_addr"],
                listen_addr=f"0.0.0.0:{SWARM_PORT}",
                default_addr_pool=props.get("addr_pool") or None,
            )
        elif not state.get("ControlAvailable"):
            raise Exception(
                f"swarm init: {props['host']} is already a worker of swarm "
                f"{state.get('Cluster', {}).get('ID', '?')}; make it a manager or leave first"
            )
        client.swarm.reload()
        return CreateResult(id_=client.swarm.attrs["ID"], outs={**props, **self._describe(client)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        client = docker_client(props["endpoint"], ssh_of(props, props["endpoint"]))
        state = _swarm_state(client)
        if state.get("LocalNodeState") != "active" or not state.get("ControlAvailable"):
            return ReadResult(id_=None, outs={})  # gone: refresh drops it, preview re-creates
        client.swarm.reload()
        if client.swarm.attrs["ID"] != id_:
            return ReadResult(id_=None, outs={})  # a different swarm now
        return ReadResult(id_=id_, outs={**props, **self._describe(client)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("endpoint", "advertise_addr", "addr_pool", "host")
        return diff_keys(olds, news, keys, replace_on=keys, delete_before_replace=True)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        client = docker_client(props["endpoint"], ssh_of(props, props["endpoint"]))
        if _swarm_state(client).get("LocalNodeState") == "active":
            client.swarm.leave(force=True)


class SwarmInit(Resource):
    """The swarm itself, rooted at the leader (dynamic resource)."""

    swarm_id: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(SwarmInitProvider(), name, {**props, "swarm_id": None}, opts)


_LIVE_TASK_STATES = ("assigned", "accepted", "preparing", "ready", "starting", "running")

# swarmkit's store.ErrSequenceConflict, as the daemon words it.
SEQUENCE_CONFLICT = "update out of sequence"


def update_node_spec(
    leader: Any,
    node_id: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    attempts: int = 20,
) -> Any:
    """Apply `change` to a node's spec through the leader, and return the node.

    Swarm updates are optimistic: an update carries the version its spec was read at,
    and a write made meanwhile refuses it as "update out of sequence". Swarm itself
    writes nodes unasked: the allocator adds a network attachment when a task lands on
    the node (as it does just after the node is made active again), the role manager
    and the CA after a promotion. The protocol is to read the node again and apply the
    change to what is there now; anything else is an error at once."""
    for _ in range(attempts):
        node = leader.nodes.get(node_id)
        try:
            node.update(change(dict(node.attrs["Spec"])))
            return node
        except APIError as e:
            if SEQUENCE_CONFLICT not in str(e):
                raise
        time.sleep(0.5)
    raise HostError(
        f"swarm node {node_id}: every update of {attempts} came out of sequence "
        "(Swarm kept writing the node meanwhile)"
    )


class SwarmNodeProvider(BoundaryProvider):
    """Joins one host and keeps its role, availability and labels as declared."""

    def _node(self, leader: Any, hostname: str) -> Any:
        nodes = [n for n in leader.nodes.list() if node_hostname(n.attrs) == hostname]
        # A host that re-joined leaves a `down` ghost behind; the live one counts.
        nodes.sort(key=lambda n: n.attrs["Status"]["State"] != "ready")
        return nodes[0] if nodes else None

    def _demote(self, leader: Any, node_id: str, timeout: float = 60) -> None:
        """Make a manager a worker (through the leader) and wait until Raft agrees."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                node = leader.nodes.get(node_id)
            except NotFound:
                return
            if node.attrs["Spec"].get("Role") != "manager" and not node.attrs.get("ManagerStatus"):
                return
            if node.attrs["Spec"].get("Role") == "manager":
                spec = dict(node.attrs["Spec"], Role="worker")
                # A concurrent update bumps the version: the next pass reads it again.
                with contextlib.suppress(DockerException):
                    node.update(spec)
            time.sleep(1)
        raise HostError(f"swarm node {node_id}: still a manager {timeout:.0f} s after demotion")

    def _node_by_id(self, leader: Any, node_id: str) -> Any:
        try:
            node = leader.nodes.get(node_id)
        except NotFound:
            return None
        return node if node.attrs["Status"]["State"] == "ready" else None

    def _join(self, props: dict[str, Any], leader: Any) -> None:
        client = docker_client(props["endpoint"], ssh_of(props, props["endpoint"]))
        state = _swarm_state(client)
        if state.get("LocalNodeState") == "active":
            cluster = (state.get("Cluster") or {}).get("ID")
            if cluster is None:
                # A worker does not see its cluster id: it is ours if the leader knows it.
                if any(n.id == state.get("NodeID") for n in leader.nodes.list()):
                    return  # already a member of this swarm: adopt
            elif cluster == props["swarm_id"]:
                return  # already a manager of this swarm: adopt
            raise Exception(
                f"swarm join: {props['host']} is in another swarm; "
                "run `docker swarm leave` on it first"
            )
        tokens = leader.swarm.attrs["JoinTokens"]
        token = tokens["Manager"] if props["role"] == "manager" else tokens["Worker"]
        client.swarm.join(
            remote_addrs=[f"{props['leader_addr']}:{SWARM_PORT}"],
            join_token=token,
            advertise_addr=props["advertise_addr"],
            listen_addr=f"0.0.0.0:{SWARM_PORT}",
        )

    def _converge(self, props: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._converge_node(props)
        except (HostError, DockerException, RequestsConnectionError) as e:
            # Name the host and what is left undone: the engine prints only the URN.
            raise HostError(
                f"swarm node {props['host']}: {e}; not done: its membership, role "
                f"{props['role']}, availability {props['availability']} and labels "
                f"{sorted(props['labels'])}; `pulumi up` again once the host answers"
            ) from None

    def _converge_node(self, props: dict[str, Any]) -> dict[str, Any]:
        leader = docker_client(props["leader_endpoint"], ssh_of(props, props["leader_endpoint"]))
        self._join(props, leader)
        node = None
        for _ in range(60):
            node = self._node(leader, props["host"])
            if node is not None and node.attrs["Status"]["State"] == "ready":
                break
            time.sleep(1)
        if node is None:
            raise Exception(f"swarm: node {props['host']} did not appear on the leader")
        declared = {
            "Labels": dict(props["labels"]),
            "Role": props["role"],
            "Availability": props["availability"],
        }
        update_node_spec(leader, node.id, lambda spec: spec | declared)
        if props["availability"] == "drain":
            self._wait_drained(leader, node.id)
        return {**props, "node_id": node.id}

    def _wait_drained(self, leader: Any, node_id: str, timeout: float = 180) -> None:
        """Wait until Swarm has moved every task off a drained node, so that what runs
        next (the roster, a leave) sees the tasks where they will stay."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                tasks = leader.api.tasks(filters={"node": node_id})
            except NotFound:
                return
            # Until their containers have stopped (the stop grace period), not only
            # until Swarm wants them stopped.
            if not [t for t in tasks if t["Status"]["State"] in _LIVE_TASK_STATES]:
                return
            time.sleep(2)

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = self._converge(props)
        return CreateResult(id_=outs["node_id"], outs=outs)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> Any:
        from pulumi.dynamic import UpdateResult

        return UpdateResult(outs=self._converge(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        leader = docker_client(props["leader_endpoint"], ssh_of(props, props["leader_endpoint"]))
        # By id first: a hostname changed by hand is drift on the host's facts, not a lost
        # node (and swarm learns a hostname back only lazily). By hostname second: a host
        # that left and re-joined is the same declared node under a new id.
        node = self._node_by_id(leader, id_) or self._node(leader, props["host"])
        if node is None or node.attrs["Status"]["State"] != "ready":
            return ReadResult(id_=None, outs={})
        spec = node.attrs["Spec"]
        seen = {
            "labels": dict(spec.get("Labels") or {}),
            "role": spec.get("Role"),
            "availability": spec.get("Availability"),
        }
        inputs = {k: v for k, v in props.items() if k != "node_id"} | seen
        return ReadResult(id_=node.id, outs={**props, **seen, "node_id": node.id}, inputs=inputs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("labels", "role", "availability", "swarm_id", "endpoint", "advertise_addr")
        replace_on = ("swarm_id", "endpoint", "advertise_addr")
        return diff_keys(olds, news, keys, replace_on=replace_on, delete_before_replace=True)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        client = docker_client(props["endpoint"], ssh_of(props, props["endpoint"]))
        if props.get("is_leader"):
            return  # the leader leaves with SwarmInit, after every other node
        leader = docker_client(props["leader_endpoint"], ssh_of(props, props["leader_endpoint"]))
        # A manager that leaves by force takes its Raft vote with it, and the engine
        # deletes nodes in parallel: two of three managers gone at once leave the
        # swarm without a quorum (the leader then cannot remove them, nor itself
        # leave cleanly). Demoted first through the leader, they leave as workers.
        # Drained first: a host removed from the stack hands its tasks over before it
        # leaves (the engine deletes removed resources last, after the roster read).
        with contextlib.suppress(NotFound, DockerException):
            node = leader.nodes.get(id_)
            if node.attrs["Spec"].get("Availability") != "drain":
                node.update(dict(node.attrs["Spec"], Availability="drain"))
            self._wait_drained(leader, id_)
        self._demote(leader, id_)
        if _swarm_state(client).get("LocalNodeState") == "active":
            client.swarm.leave(force=True)
        for _ in range(30):
            try:
                leader.api.remove_node(id_, force=True)
                return
            except Exception:
                time.sleep(1)


class SwarmNode(Resource):
    """One host's swarm membership, role, availability and labels (dynamic resource)."""

    node_id: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(SwarmNodeProvider(), name, {**props, "node_id": None}, opts)
