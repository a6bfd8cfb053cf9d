"""ClusterRef: what a job stack uses of its cluster stack, read through a stack reference.

A job stack owns its GPU-reserving services, its code and its launch; the hosts,
the swarm, the overlay, the secrets and the image are its cluster stack's
(infra/config/jobs.py). This component stands where a single stack has
`SwarmCluster`, `TrainingImage`, `OverlayNetwork` and `ClusterSecrets`: the image
reference, the network id and the secrets' ids come from the cluster's outputs
(`imageRef`, `networkId`, `secretRefs`), the docker provider and the hosts'
endpoints from the cluster's stack file. So a job's preview never shows a cluster
resource, and a cluster change reaches a job only as a changed output, which the
job's own preview shows as a restart of its services.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_docker as docker

from infra.components.swarm import endpoint, provider_args, ssh_hosts
from infra.config import ConfigError, Host
from infra.layout import CLUSTER_REF_TYPE, SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE
from infra.sshspec import SshSpec


def ref_name(stack: str) -> str:
    """The name of job stack `stack`'s cluster reference (__main__.py): the jobs command
    reads a job's state by it (jobs/record.py, jobs/repoint.py)."""
    return f"{stack}-cluster"


def reference_name(ref: str) -> str:
    """The name of ClusterRef `ref`'s stack reference: in a job's state, its input `name`
    says which cluster stack the job runs on (jobs/record.py `state_cluster`)."""
    return f"{ref}-stack"


def provider_name(ref: str, manager: str) -> str:
    """The name of the docker provider ClusterRef `ref` goes through to `manager`: in a
    job's state, it says which manager the job's services were made through
    (jobs/record.py `state_manager`)."""
    return f"{ref}-docker-{manager}"


@dataclass(frozen=True)
class ClusterRefArgs:
    """The cluster stack's name, its hosts and leader (from its stack file), and the
    names of the secrets it holds."""

    cluster: str
    hosts: Sequence[Host]
    leader: Host
    secret_names: Sequence[str]
    digest: str
    """What the job read of the cluster's stack file (`StackConfig.cluster_digest`):
    it must be what the cluster stack has deployed (its `clusterDigest`)."""
    ssh: Mapping[str, SshSpec] = field(default_factory=dict)
    """Per host name, the SSH settings of the ssh:// hosts (swarm.py `ssh_specs`)."""


@dataclass(frozen=True)
class SecretRef:
    """A cluster's Swarm secret, by the id and name its stack exports."""

    id: pulumi.Output[str]
    name: pulumi.Output[str]


def stack_path(cluster: str) -> str:
    """The fully qualified name of this project's stack `cluster` (what a stack
    reference takes; on a file backend the organization is `organization`)."""
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{cluster}"


class ClusterRef(pulumi.ComponentResource):
    """The cluster stack a job runs on: its outputs, its leader's engine, its hosts."""

    stack: pulumi.StackReference
    manager_provider: docker.Provider
    """The cluster leader's engine: where the job's services are created."""
    endpoints: dict[str, dict[str, Any]]
    """Per host name, its Docker endpoint as plain data (for dynamic providers)."""
    leader_endpoint: dict[str, Any]
    ssh_hosts: dict[str, Any]
    """Per ssh:// endpoint URL, its host's SSH settings (swarm.py `ssh_hosts`)."""
    ref: pulumi.Output[str]
    """The cluster's training image, by digest (its `imageRef`)."""
    network_id: pulumi.Output[str]
    """The cluster's overlay (its `networkId`)."""
    secrets: dict[str, SecretRef]
    """Per file name, the cluster's secret (its `secretRefs`): the SSH key pair the
    launch's pdsh uses, and the secrets named in the cluster's stack file."""
    swarm_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: ClusterRefArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(CLUSTER_REF_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.stack = pulumi.StackReference(
            reference_name(name), stack_path(args.cluster), opts=child
        )
        leader = args.leader
        self.manager_provider = docker.Provider(
            provider_name(name, leader.name),
            **provider_args(leader, args.ssh.get(leader.name)),
            opts=child,
        )
        self.ssh_hosts = ssh_hosts(args.hosts, args.ssh)
        self.endpoints = {h.name: endpoint(h) for h in args.hosts}
        self.leader_endpoint = self.endpoints[leader.name]
        # require_output: a cluster stack not deployed (or of another kind) fails the
        # job's preview with the output's name, before any service is created.
        # The job places and launches its tasks by the cluster's file (its hosts, their
        # endpoints, the network): while that file holds a change the cluster has not
        # deployed, the job is refused. The check sits on the image reference, which
        # every resource of the job takes, so none of them is registered.
        deployed = self.stack.get_output("clusterDigest")
        self.ref = pulumi.Output.all(self.stack.require_output("imageRef"), deployed).apply(
            lambda v: _checked(args.cluster, args.digest, v[1], str(v[0]))
        )
        self.network_id = self.stack.require_output("networkId").apply(str)
        self.swarm_id = self.stack.require_output("swarmId").apply(str)
        refs = self.stack.require_output("secretRefs")
        # The cluster's secrets as ClusterSecrets makes them: the launch's SSH key pair,
        # then the stack's named secrets.
        files = [SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE, *sorted(args.secret_names)]
        self.secrets = {
            n: SecretRef(id=_field(refs, n, "id"), name=_field(refs, n, "name")) for n in files
        }
        self.register_outputs({"image_ref": self.ref, "network_id": self.network_id})

    @property
    def members(self) -> list[pulumi.Resource]:
        """What the job's swarm-scoped objects wait for: the cluster's outputs."""
        return [self.stack]


def _field(refs: pulumi.Output[Any], secret: str, key: str) -> pulumi.Output[str]:
    """One field of one secret in the cluster's `secretRefs` output."""

    def pick(r: dict[str, dict[str, Any]]) -> str:
        return str(r[secret][key])

    return refs.apply(pick)


def _checked(cluster: str, read: str, deployed: object, value: str) -> str:
    """`value`, once the cluster's file as read (`read`) is what the cluster deployed."""
    if deployed == read:
        return value
    if deployed is None:
        why = "it was deployed before stacks exported clusterDigest"
    else:
        why = (
            f"its stack file Pulumi.{cluster}.yaml (hosts, network, preflight or secrets) "
            f"differs from what is deployed (clusterDigest {deployed}, the file {read})"
        )
    raise ConfigError(
        [
            f"cluster: {cluster!r}: {why}; allowed: a cluster as deployed. Run "
            f"`pulumi up --stack {cluster}` first, then the job"
        ]
    )
