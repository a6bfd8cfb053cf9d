"""SwarmCluster: the Docker Swarm across all hosts, plus one docker provider per host.

`SwarmInit` on the leader, then one `SwarmNode` per host (the leader first, then
the other managers, then workers), after every host's preflight facts
(infra/providers/swarm.py does the joining). Also owns one explicit
`docker.Provider` per host and names the leader's as the provider for
swarm-scoped objects: nothing relies on an ambient DOCKER_HOST.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from infra.components.hostfacts import HostFacts
from infra.config import Host
from infra.providers.swarm import SwarmInit, SwarmNode
from infra.render.labels import node_labels


@dataclass(frozen=True)
class SwarmClusterArgs:
    """The hosts, which of them leads the swarm and which runs rank 0, and the
    preflight the swarm waits for."""

    hosts: Sequence[Host]
    leader: Host
    master: Host
    facts: HostFacts
    master_moves: bool = False
    """training.recovery.follow_master: the master's host and the spares are labelled
    where the master task may run."""


def endpoint(host: Host) -> dict[str, Any]:
    """A host's Docker endpoint as plain data (for dynamic-provider inputs)."""
    ep: dict[str, Any] = {"url": host.docker_host}
    if host.docker_tls:
        ep["tls"] = host.docker_tls.model_dump()
    return ep


class SwarmCluster(pulumi.ComponentResource):
    """The Docker Swarm across all hosts, plus one docker provider per host."""

    providers: dict[str, docker.Provider]
    """Per host name, an explicit docker provider for that host's engine."""
    manager_provider: docker.Provider
    """Provider for swarm-scoped objects (networks, secrets, services): the leader's."""
    endpoints: dict[str, dict[str, Any]]
    """Per host name, its Docker endpoint as plain data (for dynamic providers)."""
    leader_endpoint: dict[str, Any]
    swarm_id: pulumi.Output[str]
    nodes: dict[str, SwarmNode]

    def __init__(
        self, name: str, args: SwarmClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # Joined only after every host passed its preflight.
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[args.facts]))
        super().__init__("deepspeed-swarm:swarm:SwarmCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.providers = {
            h.name: docker.Provider(f"{name}-docker-{h.name}", **provider_args(h), opts=child)
            for h in args.hosts
        }
        leader = args.leader
        self.manager_provider = self.providers[leader.name]
        self.endpoints = {h.name: endpoint(h) for h in args.hosts}
        self.leader_endpoint = self.endpoints[leader.name]
        init = SwarmInit(
            f"{name}-init",
            {
                "host": leader.name,
                "endpoint": endpoint(leader),
                "advertise_addr": leader.address,
                "addr_pool": None,
            },
            pulumi.ResourceOptions(parent=self),
        )
        self.swarm_id = init.swarm_id
        self.nodes = {}
        # The leader first, then the other managers, then workers: Raft wants
        # managers in before the workers lean on them.
        ordered = [leader, *[h for h in args.hosts if h is not leader]]
        ordered.sort(key=lambda h: (h is not leader, h.role != "manager"))
        for h in ordered:
            self.nodes[h.name] = SwarmNode(
                f"{name}-node-{h.name}",
                {
                    "host": h.name,
                    "is_leader": h is leader,
                    "endpoint": endpoint(h),
                    "leader_endpoint": endpoint(leader),
                    "leader_addr": leader.address,
                    "advertise_addr": h.address,
                    "swarm_id": init.swarm_id,
                    "role": h.role,
                    "availability": h.availability,
                    "labels": node_labels(args, h, args.master_moves),
                },
                pulumi.ResourceOptions(parent=self, depends_on=[init]),
            )
        self.register_outputs({"swarm_id": self.swarm_id})

    @property
    def members(self) -> list[SwarmNode]:
        """Every host's membership: what swarm-scoped objects wait for."""
        return list(self.nodes.values())


def provider_args(h: Host) -> dict[str, Any]:
    """A `docker.Provider`'s arguments for host `h`'s engine (a job stack's provider
    to its cluster's leader is made the same way: infra/components/clusterref.py)."""
    args: dict[str, Any] = {"host": h.docker_host}
    if h.docker_host.startswith("ssh://"):
        args["ssh_opts"] = ["-o", "BatchMode=yes", "-p", str(h.ssh_port)]
    if h.docker_tls:
        # Read at program start (not in an apply); the key is a secret in state.
        with open(h.docker_tls.ca) as ca, open(h.docker_tls.cert) as cert:
            args["ca_material"], args["cert_material"] = ca.read(), cert.read()
        with open(h.docker_tls.key) as key:
            args["key_material"] = pulumi.Output.secret(key.read())
    return args
