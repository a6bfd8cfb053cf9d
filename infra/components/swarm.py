"""SwarmCluster: the Docker Swarm across all hosts, plus one docker provider per host.

`SwarmInit` on the leader, then one `SwarmNode` per host (the leader first, then
the other managers, then workers), after every host's preflight facts
(infra/providers/swarm.py does the joining). Also owns one explicit
`docker.Provider` per host and names the leader's as the provider for
swarm-scoped objects: nothing relies on an ambient DOCKER_HOST.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_docker as docker

from infra.components.hostfacts import HostFacts
from infra.config import Host
from infra.providers.swarm import SwarmInit, SwarmNode
from infra.render.labels import node_labels
from infra.render.ssh import docker_ssh_opts
from infra.sshspec import SshSpec


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
    ssh: Mapping[str, SshSpec] = field(default_factory=dict)
    """Per host name, the SSH settings of the hosts whose engine is an ssh:// URL
    (`ssh_specs`); the others reach their engine as they always did."""


def ssh_specs(hosts: Sequence[Host], spec_of: Callable[[Host], SshSpec]) -> dict[str, SshSpec]:
    """Per host name, `spec_of(host)` (StackConfig.ssh_for) of the ssh:// hosts."""
    return {h.name: spec_of(h) for h in hosts if h.docker_host.startswith("ssh://")}


def ssh_hosts(hosts: Sequence[Host], specs: Mapping[str, SshSpec]) -> dict[str, Any]:
    """The dynamic providers' `ssh_hosts` input: per ssh:// endpoint URL, its host's
    SSH settings (`SshSpec.props`), for `hostops.docker_client`. A prop of its own,
    never inside an endpoint (SwarmNode and SwarmInit replace on `endpoint`)."""
    return {h.docker_host: specs[h.name].props() for h in hosts if h.name in specs}


def ssh_prop(urls: Mapping[str, Any]) -> dict[str, Any]:
    """`{"ssh_hosts": urls}` to add to a dynamic resource's inputs, only when there
    are any: a stack without ssh:// hosts keeps the inputs it had."""
    return {"ssh_hosts": dict(urls)} if urls else {}


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
    ssh_hosts: dict[str, Any]
    """Per ssh:// endpoint URL, its host's SSH settings (`ssh_hosts`)."""
    ssh_specs: dict[str, SshSpec]
    """Per ssh:// endpoint URL, its host's SSH settings as a spec (the builder's)."""
    swarm_id: pulumi.Output[str]
    nodes: dict[str, SwarmNode]

    def __init__(
        self, name: str, args: SwarmClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # Joined only after every host passed its preflight.
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[args.facts]))
        super().__init__("deepspeed-swarm:swarm:SwarmCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.ssh.get
        self.providers = {
            h.name: docker.Provider(
                f"{name}-docker-{h.name}", **provider_args(h, spec(h.name)), opts=child
            )
            for h in args.hosts
        }
        self.ssh_hosts = ssh_hosts(args.hosts, args.ssh)
        self.ssh_specs = {h.docker_host: args.ssh[h.name] for h in args.hosts if h.name in args.ssh}
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
                **ssh_prop(self.ssh_hosts),
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
                    **ssh_prop(self.ssh_hosts),
                },
                pulumi.ResourceOptions(parent=self, depends_on=[init]),
            )
        self.register_outputs({"swarm_id": self.swarm_id})

    @property
    def members(self) -> list[SwarmNode]:
        """Every host's membership: what swarm-scoped objects wait for."""
        return list(self.nodes.values())


def provider_args(h: Host, ssh: SshSpec | None = None) -> dict[str, Any]:
    """A `docker.Provider`'s arguments for host `h`'s engine (a job stack's provider
    to its cluster's leader is made the same way: infra/components/clusterref.py).
    An ssh:// engine with its SSH settings `ssh` gets their `ssh_opts`: the same host
    key checks, key and jump host as every other path, joining the host's shared
    master (infra/render/ssh.py). `host` stays the URL: the endpoint is unchanged."""
    args: dict[str, Any] = {"host": h.docker_host}
    if h.docker_host.startswith("ssh://"):
        args["ssh_opts"] = (
            docker_ssh_opts(ssh) if ssh else ["-o", "BatchMode=yes", "-p", str(h.ssh_port)]
        )
    if h.docker_tls:
        # Read at program start (not in an apply); the key is a secret in state.
        with open(h.docker_tls.ca) as ca, open(h.docker_tls.cert) as cert:
            args["ca_material"], args["cert_material"] = ca.read(), cert.read()
        with open(h.docker_tls.key) as key:
            args["key_material"] = pulumi.Output.secret(key.read())
    return args
