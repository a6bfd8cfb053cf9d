"""ClusterServices: a cluster stack's idle tasks, which its jobs' GPU-reserving tasks
come after: the overlay warm-up on the hosts whose engines need it (`ds-net-warmup`)
and one idle task on each spare (`ds-standby`). A single stack's TrainingServices
(infra/components/services.py) makes the same two beside its master and workers, and
a job stack with spares its own standby, through `idle_services` and
`standby_service` here. The task specs are infra/render/taskspecs.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from infra.components.hostfacts import HostFacts
from infra.components.image import TrainingImage
from infra.components.network import OverlayNetwork
from infra.components.swarm import SwarmCluster
from infra.config import Host
from infra.layout import STANDBY_SERVICE, WARMUP_SERVICE
from infra.render import specs
from infra.render.taskspecs import standby_spec, warmup_replicas, warmup_spec

CLUSTER_SERVICES_TYPE = "deepspeed-swarm:services:ClusterServices"
"""Unchanged since the component lived in services.py: a deployed cluster's
resources keep their URNs."""


@dataclass(frozen=True)
class ClusterServicesArgs:
    """A cluster stack's idle tasks: the overlay warm-up on its active hosts (where
    their engines need it), the standby on its spares."""

    active_hosts: Sequence[Host]
    spares: Sequence[Host]
    image: TrainingImage
    overlay: OverlayNetwork
    swarm: SwarmCluster
    facts: HostFacts


def idle_services(
    name: str,
    active_hosts: Sequence[Host],
    spares: Sequence[Host],
    image_ref: pulumi.Output[str],
    network_id: pulumi.Output[str],
    facts: HostFacts,
    opts: pulumi.ResourceOptions,
) -> tuple[docker.Service, docker.Service | None]:
    """The warm-up service (its tasks on `active_hosts` where their engines need it)
    and the spares' standby (None without spares), before any GPU-reserving task."""
    # One task per node as a replicated service (one replica per host, at most
    # one per node) rather than `global` mode: the docker provider refuses
    # `converge_config` with global mode ("mode.0.global conflicts with
    # converge_config"), and without it the GPU services could be created
    # before any warm-up task ran. Its task count comes from the hosts' engines as
    # their facts read them (known in a preview of a deployed stack); the service
    # itself always exists, so an engine upgrade scales it rather than removing
    # what the GPU services depend on.
    active = [facts.facts[h.name].observed for h in active_hosts]
    warmup_tasks = pulumi.Output.all(*active).apply(
        lambda observed: warmup_replicas(len(active), observed)
    )
    warmup = docker.Service(
        f"{name}-net-warmup",
        name=WARMUP_SERVICE,
        mode=specs.replicated(warmup_tasks),
        task_spec=warmup_spec(image_ref, network_id),
        endpoint_spec=specs.dnsrr(),
        converge_config=specs.converge("5m"),
        opts=opts,
    )
    standby = standby_service(name, STANDBY_SERVICE, spares, image_ref, opts) if spares else None
    return warmup, standby


def standby_service(
    name: str,
    service_name: str,
    spares: Sequence[Host],
    image_ref: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    labels: list[docker.ServiceLabelArgs] | None = None,
) -> docker.Service:
    """`service_name`: one idle task on each spare (standby_spec), the cluster's or a
    single stack's `ds-standby`, or a job's own (TrainingServices._job_standby)."""
    return docker.Service(
        f"{name}-standby",
        name=service_name,
        mode=specs.replicated(len(spares)),
        task_spec=standby_spec(image_ref),
        endpoint_spec=specs.dnsrr(),
        converge_config=specs.converge("5m"),
        labels=labels,
        opts=opts,
    )


class ClusterServices(pulumi.ComponentResource):
    """A cluster stack's idle tasks, which its jobs' GPU-reserving tasks come after:
    the overlay warm-up and the spares' standby (what a single stack's
    TrainingServices creates beside its master and workers)."""

    warmup: docker.Service
    standby: docker.Service | None

    def __init__(
        self, name: str, args: ClusterServicesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(CLUSTER_SERVICES_TYPE, name, None, opts)
        self.warmup, self.standby = idle_services(
            name,
            args.active_hosts,
            args.spares,
            args.image.ref,
            args.overlay.network_id,
            args.facts,
            pulumi.ResourceOptions(
                parent=self,
                provider=args.swarm.manager_provider,
                depends_on=[args.image, args.overlay, args.facts],
            ),
        )
        self.register_outputs({})
