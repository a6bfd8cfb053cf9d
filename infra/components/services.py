"""TrainingServices: `ds-master` (1 task) and `ds-worker` (one task per other host);
in a job stack `<job>-master` and `<job>-worker`. A single stack's TrainingServices
also makes the warm-up and standby tasks that a cluster stack's ClusterServices
(infra/components/idleservices.py) holds for its jobs.

Each task reserves its node's GPUs as Swarm generic resources (`NVIDIA-GPU`), so
the scheduler itself refuses to over-commit a host; placement pins the master and
the workers to nodes by their `dss.role` label, at most one task per node.
Endpoint mode is `dnsrr` (`tasks.<service>` resolves to the task addresses; no
VIP/IPVS needed). `converge_config` makes create/update wait for running tasks,
so the launch that depends on these services starts against live containers.
The task specs themselves are built by infra/render/taskspecs.py (its names stay
importable from here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from infra.components.clusterref import ClusterRef
from infra.components.hostfacts import HostFacts
from infra.components.idleservices import idle_services, standby_service
from infra.components.image import TrainingImage
from infra.components.network import OverlayNetwork
from infra.components.secrets import ClusterSecrets
from infra.components.swarm import SwarmCluster, ssh_prop
from infra.config import Host, Monitoring, Network, Training
from infra.layout import (
    JOB_LABEL,
    SPEC_LABEL,
    job_standby_name,
    training_service_names,
)
from infra.providers.fit import FIT_SUFFIX, GpuFit
from infra.providers.hostnet import SwarmHostNetwork
from infra.render import specs
from infra.render.labels import task_constraints
from infra.render.taskspecs import container_spec as container_spec
from infra.render.taskspecs import gpu_reservation as gpu_reservation
from infra.render.taskspecs import idle_spec as idle_spec
from infra.render.taskspecs import spec_digest as spec_digest
from infra.render.taskspecs import standby_spec as standby_spec
from infra.render.taskspecs import task_spec_label as task_spec_label
from infra.render.taskspecs import warmup_replicas as warmup_replicas
from infra.render.taskspecs import warmup_spec as warmup_spec

TRAINING_SERVICES_TYPE = "deepspeed-swarm:services:TrainingServices"


@dataclass(frozen=True)
class TrainingServicesArgs:
    """The training job, what its tasks' environment and placement come from, and the
    image, overlay, secrets and swarm they run on, after every host's preflight."""

    training: Training
    monitoring: Monitoring
    network: Network
    """`data_plane`: the overlay or the hosts' own network; the NIC and RDMA settings
    that reach the tasks' environment."""
    hosts: Sequence[Host]
    """Every host (their RDMA devices reach the tasks' environment)."""
    active_hosts: Sequence[Host]
    """One warm-up task each, where their engines need it (warmup_replicas)."""
    workers: Sequence[Host]
    """One `ds-worker` task each."""
    unused: Sequence[Host]
    """Training hosts the run leaves out (`training.nodes`): its workers never go there."""
    spares: Sequence[Host]
    """One standby task each (in a job stack, the job's own: _job_standby)."""
    secret_names: Sequence[str]
    image: TrainingImage | ClusterRef
    overlay: OverlayNetwork | ClusterRef
    secrets: ClusterSecrets | ClusterRef
    swarm: SwarmCluster | ClusterRef
    facts: HostFacts | None
    """None in a job stack: its cluster stack runs the warm-up and standby tasks
    (ClusterServices), which every job's tasks share."""
    job: str | None = None
    """A job stack's name, its services' prefix (None: `ds-master`, `ds-worker`)."""
    master: Host | None = None
    """A job that names its hosts (`training.hosts`): its master's host, pinned by name."""


class TrainingServices(pulumi.ComponentResource):
    """The master and worker services of the training job."""

    warmup: docker.Service | None
    """`ds-net-warmup`: one task per node on the overlay, before any GPU task, on
    engines that need it; no task on current ones (None in a job stack: the
    cluster's)."""
    standby: docker.Service | None
    """`ds-standby`: one idle task per spare host (none without spares); in a job
    stack with spares, the job's own `<job>-standby` (_job_standby says why)."""
    fit: GpuFit | None
    """A job's check that its GPUs are free (None outside a job, or without GPUs)."""
    before_gpu_tasks: list[docker.Service]
    """What the master and worker services depend on: the idle tasks above."""
    master: docker.Service
    master_name: str
    worker_name: str
    workers: docker.Service | None
    service_names: list[str]
    task_spec_digest: pulumi.Output[str]
    """Changes whenever an update restarts the training tasks (see spec_digest)."""
    host_network: SwarmHostNetwork | None
    """Swarm's `host` network, read for its id (only with `network.data_plane: host`)."""
    training_network_id: pulumi.Output[str]
    """The network the training tasks are on: the overlay, or Swarm's `host` network."""

    def __init__(
        self, name: str, args: TrainingServicesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TRAINING_SERVICES_TYPE, name, None, opts)
        image_ref = args.image.ref
        provider = args.swarm.manager_provider
        depends_on: list[pulumi.Resource] = list(
            dict.fromkeys(
                [args.image, args.overlay, args.secrets, *([args.facts] if args.facts else [])]
            )
        )
        self.host_network = self._host_network(name, args)
        self.training_network_id = (
            self.host_network.network_id if self.host_network else args.overlay.network_id
        )
        if self.host_network:
            depends_on.append(self.host_network)
        self.warmup, self.standby = (
            idle_services(
                name,
                args.active_hosts,
                args.spares,
                image_ref,
                args.overlay.network_id,
                args.facts,
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on),
            )
            if args.facts is not None
            else (None, None)
        )
        self.fit = self._fit(name, args)
        if self.fit is not None:
            depends_on.append(self.fit)
        if args.job is not None and args.facts is None and args.spares:
            self.standby = self._job_standby(name, args, image_ref, provider, depends_on)
        # Before the workers: the standby task must be on the spares when Swarm
        # places the workers (standby_spec says why).
        self.before_gpu_tasks = [s for s in (self.warmup, self.standby) if s is not None]
        after = [*depends_on, *self.before_gpu_tasks]
        self.master_name, self.worker_name = training_service_names(args.job)
        self.master = self._service(name, args, self.master_name, "master", 1, after)
        n_workers = len(args.workers)
        self.workers = (
            self._service(name, args, self.worker_name, "worker", n_workers, after)
            if n_workers
            else None
        )
        self.service_names = [self.master_name] + ([self.worker_name] if n_workers else [])
        self.task_spec_digest = spec_digest(
            args,
            image_ref,
            self.training_network_id,
            *[s.id for s in args.secrets.secrets.values()],
        )
        self.register_outputs(
            {"service_names": self.service_names, "task_spec_digest": self.task_spec_digest}
        )

    def _host_network(self, name: str, args: TrainingServicesArgs) -> SwarmHostNetwork | None:
        """On the host data plane the training tasks join Swarm's `host` network (a
        service on it can join no other): by the id Swarm reads back (hostnet.py)."""
        if args.network.data_plane != "host":
            return None
        return SwarmHostNetwork(
            f"{name}-host-net",
            {"leader_endpoint": args.swarm.leader_endpoint, **ssh_prop(args.swarm.ssh_hosts)},
            pulumi.ResourceOptions(parent=self, depends_on=args.swarm.members),
        )

    def _fit(self, name: str, args: TrainingServicesArgs) -> GpuFit | None:
        """A job on a shared cluster: its GPUs checked free before any of its services
        is registered (infra/providers/fit.py says why)."""
        t = args.training
        if args.job is None or args.facts is not None or not t.gpus_per_node:
            return None
        return GpuFit(
            f"{name}{FIT_SUFFIX}",
            {
                "leader_endpoint": args.swarm.leader_endpoint,
                **ssh_prop(args.swarm.ssh_hosts),
                "job": args.job,
                "services": list(training_service_names(args.job)),
                # The master's host (StackConfig.master), then the workers': where the
                # job's GPU tasks go when every host is up (jobs/record.py reads it back).
                "hosts": [(args.master or args.hosts[0]).name, *[h.name for h in args.workers]],
                "gpus": t.gpus_per_node,
            },
            pulumi.ResourceOptions(parent=self, depends_on=args.swarm.members),
        )

    def _task_spec(self, args: TrainingServicesArgs, role: str) -> docker.ServiceTaskSpecArgs:
        """The task spec of `role` (`master` or `worker`). training.recovery.follow_master:
        the master may run on a spare, and its task takes the run over when it starts
        again (infra/task/takeover.py). With `training.nodes`, the workers keep off the
        hosts the run leaves out (a moved task may still go to a spare)."""
        t = args.training
        takeover = t.recovery.follow_master
        pinned = args.master.name if args.master is not None else None
        unused = [h.name for h in args.unused]
        where = task_constraints(role, t.gpu_model, unused, pinned, master_moves=takeover)
        rp = t.restart_policy
        return docker.ServiceTaskSpecArgs(
            container_spec=container_spec(
                args, args.image.ref, args.secrets.secrets, takeover=takeover and role == "master"
            ),
            networks_advanceds=specs.overlay(self.training_network_id),
            placement=specs.placement(where, max_replicas=1),
            resources=gpu_reservation(t.gpus_per_node),
            restart_policy=specs.restart_policy(rp.condition, rp.delay, rp.max_attempts, rp.window),
        )

    def _service(
        self,
        name: str,
        args: TrainingServicesArgs,
        svc_name: str,
        role: str,
        replicas: int,
        depends_on: list[pulumi.Resource],
    ) -> docker.Service:
        """`<name>-<role>`: the master's or the workers' service, labelled with its role
        (a job's: and its job), after everything in `depends_on`."""
        t = args.training
        spec_args = self._task_spec(args, role)
        # The master's tasks read their spec's digest from this label (DSS_SPEC): a
        # task an update made differs from the run's, a moved one does not.
        spec_label = (
            [docker.ServiceLabelArgs(label=SPEC_LABEL, value=task_spec_label(spec_args))]
            if t.recovery.follow_master and role == "master"
            else []
        )
        return docker.Service(
            f"{name}-{role}",
            name=svc_name,
            mode=specs.replicated(replicas),
            task_spec=spec_args,
            endpoint_spec=specs.dnsrr(),
            converge_config=specs.converge("10m"),
            labels=[
                docker.ServiceLabelArgs(label="dss.role", value=role),
                # A job's services say whose they are (only a job's: a single
                # stack's labels stay as they were).
                *([docker.ServiceLabelArgs(label=JOB_LABEL, value=args.job)] if args.job else []),
                *spec_label,
                *[
                    docker.ServiceLabelArgs(label=k, value=v)
                    for k, v in sorted(t.service_labels.items())
                ],
            ],
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.swarm.manager_provider, depends_on=depends_on
            ),
        )

    def _job_standby(
        self,
        name: str,
        args: TrainingServicesArgs,
        image_ref: pulumi.Input[str],
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource],
    ) -> docker.Service:
        """A job's own idle task on each spare, created before its GPU tasks.

        Why: Swarm places a job's worker on the node with the fewest tasks in all
        (standby_spec). The cluster's one standby task keeps the spare last while
        its training hosts carry no job; once another job runs there, a training
        host and the spare tie, and Swarm put the second of two 4-node jobs on the
        spare on lab8 (2026-12-04), though a chosen host had free GPUs. With one
        task per job on the spare, created first, the spare carries at least two
        more tasks than any training host the job can go to, however many jobs
        share them; a moved task still goes there, the only node left to it.
        """
        assert args.job is not None
        return standby_service(
            name,
            job_standby_name(args.job),
            args.spares,
            image_ref,
            pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on),
            labels=[docker.ServiceLabelArgs(label=JOB_LABEL, value=args.job)],
        )

    @property
    def gpu_services(self) -> list[docker.Service]:
        """The services whose tasks train (`ds-master`, and `ds-worker` when there are
        workers): what the launch waits for."""
        return [s for s in (self.master, self.workers) if s is not None]
