"""SwarmHostNetwork: the id Swarm gives its predefined `host` network (dynamic provider).

Why a resource: a service on the host data plane attaches to Swarm's `host`
network. Docker resolves the name to the swarm-scoped network's id when the
service is created (not the engine-local `host` network's id, which differs on
every node) and reads back only that id; the docker provider then diffs the name
the program gave against it and replaces the service on every refresh. So the
program states the id, read here from the leader (`GET /networks/host?scope=swarm`,
seen on 20.10 and 28). Its `read` re-reads it, so a swarm created anew (a new id)
shows in a refresh instead of as a surprise replacement.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import docker_client, ssh_of

HOST_NETWORK = "host"


def swarm_network_id(
    endpoint: dict[str, Any], name: str = HOST_NETWORK, ssh: dict[str, Any] | None = None
) -> str:
    """The swarm-scoped id of a predefined network, asked of the leader (its SSH
    settings `ssh`, hostops.ssh_of)."""
    try:
        net = docker_client(endpoint, ssh).api.inspect_network(name, scope="swarm")
    except Exception as e:
        raise Exception(f"swarm network {name!r}: not readable from the leader: {e}") from None
    return str(net["Id"])


def _network_id(props: dict[str, Any]) -> str:
    leader = props["leader_endpoint"]
    return swarm_network_id(leader, ssh=ssh_of(props, leader))


class SwarmHostNetworkProvider(BoundaryProvider):
    """Reads the id of the swarm's `host` network; creates and deletes nothing."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        network_id = _network_id(props)
        return CreateResult(id_=network_id, outs={**props, "network_id": network_id})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs={**news, "network_id": _network_id(news)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs={**props, "network_id": _network_id(props)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, ("leader_endpoint",))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Swarm's own network: nothing to remove."""


class SwarmHostNetwork(Resource):
    """The swarm-scoped id of Swarm's predefined `host` network (dynamic resource)."""

    network_id: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(SwarmHostNetworkProvider(), name, {**props, "network_id": None}, opts)
