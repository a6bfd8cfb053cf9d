"""TrainingServices: `ds-master` (1 task) and `ds-worker` (one task per other host);
in a job stack `<job>-master` and `<job>-worker`. ClusterServices: a cluster stack's
warm-up and standby tasks, which a single stack's TrainingServices holds itself.

Each task reserves its node's GPUs as Swarm generic resources (`NVIDIA-GPU`), so
the scheduler itself refuses to over-commit a host; placement pins the master and
the workers to nodes by their `dss.role` label, at most one task per node.
Endpoint mode is `dnsrr` (`tasks.<service>` resolves to the task addresses; no
VIP/IPVS needed). `converge_config` makes create/update wait for running tasks,
so the launch that depends on these services starts against live containers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from infra.components.clusterref import ClusterRef
from infra.components.hostfacts import HostFacts
from infra.components.image import TrainingImage
from infra.components.network import OverlayNetwork
from infra.components.secrets import ClusterSecrets
from infra.components.swarm import SwarmCluster
from infra.config import Host, Monitoring, Network, Training, size_bytes
from infra.layout import (
    GPU_RESOURCE,
    IMAGE_HOME,
    JOB_LABEL,
    OVERLAY_ATTACH_FIXED_IN,
    SHM_MOUNT,
    SPEC_LABEL,
    STANDBY_SERVICE,
    TRAIN_UID,
    WARMUP_SERVICE,
    job_standby_name,
    training_service_names,
)
from infra.providers.fit import GpuFit
from infra.providers.hostnet import SwarmHostNetwork
from infra.render import specs
from infra.render.labels import (
    SPARE_CONSTRAINT,
    env_list,
    placement_constraints,
    training_env,
)
from infra.render.sections import TaskEnvSource, TaskSpecSource
from infra.render.supervisor import TAKEOVER_ENV, takeover_loop
from infra.versions import older_than

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


def container_spec(
    cfg: TaskEnvSource,
    image_ref: pulumi.Input[str],
    secrets: Mapping[str, specs.SwarmSecret],
    takeover: bool = False,
) -> docker.ServiceTaskSpecContainerSpecArgs:
    """The container of every training task. `takeover` (the master's, with
    training.recovery.follow_master): the task knows its id and its spec's digest (Swarm
    templates) and runs the takeover loop (infra/render/supervisor.py) beside its sshd."""
    t = cfg.training
    env = training_env(cfg)
    if takeover:
        env |= TAKEOVER_ENV
    mounts = [
        specs.data_mount(t.data_dir),
        # Swarm services have no --shm-size: a sized tmpfs at /dev/shm instead
        # (NCCL and the DataLoader's workers need more than Docker's 64 MiB).
        # Mode 0777, not 01777: Swarm keeps only the permission bits, and asked
        # for the sticky bit every refresh would report the mount as drifted.
        docker.ServiceTaskSpecContainerSpecMountArgs(
            type="tmpfs",
            target=SHM_MOUNT,
            tmpfs_options=docker.ServiceTaskSpecContainerSpecMountTmpfsOptionsArgs(
                size_bytes=size_bytes(t.shm_size), mode=0o777
            ),
        ),
        *[specs.bind_mount(m.source, m.target, m.read_only) for m in t.datasets],
    ]
    return docker.ServiceTaskSpecContainerSpecArgs(
        image=image_ref,
        env=env_list(env),
        mounts=mounts,
        secrets=[specs.secret_mount(file_name, s) for file_name, s in secrets.items()],
        healthcheck=docker.ServiceTaskSpecContainerSpecHealthcheckArgs(
            tests=["CMD", f"{IMAGE_HOME}/healthcheck.sh"],
            interval=specs.docker_duration("10s"),
            timeout=specs.docker_duration("5s"),
            retries=3,
            start_period=specs.docker_duration("20s"),
        ),
        # SIGTERM reaches the launcher and ranks; they finish the step and
        # checkpoint within the grace period before Docker sends SIGKILL.
        stop_signal="SIGTERM",
        stop_grace_period=specs.docker_duration(t.stop_grace_period),
        hostname="{{.Service.Name}}-{{.Task.Slot}}",
        # The image's USER, stated so the policy pack (policy/) can check it.
        user=TRAIN_UID,
        # The entrypoint runs its arguments beside sshd (images/entrypoint.sh).
        args=["sh", "-c", takeover_loop()] if takeover else None,
    )


def gpu_reservation(gpus: int) -> docker.ServiceTaskSpecResourcesArgs | None:
    """Reserve `gpus` NVIDIA-GPU generic resources (none for CPU training)."""
    if not gpus:
        return None
    return docker.ServiceTaskSpecResourcesArgs(
        reservation=docker.ServiceTaskSpecResourcesReservationArgs(
            generic_resources=docker.ServiceTaskSpecResourcesReservationGenericResourcesArgs(
                discrete_resources_specs=[f"{GPU_RESOURCE}={gpus}"]
            )
        )
    )


def idle_spec(
    image_ref: pulumi.Input[str],
    network_id: pulumi.Input[str] | None = None,
    constraints: list[str] | None = None,
) -> docker.ServiceTaskSpecArgs:
    """A task that only sleeps in the training image, reserving nothing: the
    overlay warm-up (on the overlay, one per node) and the spares' standby."""
    return docker.ServiceTaskSpecArgs(
        container_spec=docker.ServiceTaskSpecContainerSpecArgs(
            image=image_ref,
            commands=["sleep", "infinity"],
            user=TRAIN_UID,
            healthcheck=specs.no_healthcheck(),
        ),
        networks_advanceds=specs.overlay(network_id) if network_id else None,
        placement=specs.placement(constraints, max_replicas=1),
    )


def warmup_spec(
    image_ref: pulumi.Input[str], network_id: pulumi.Input[str]
) -> docker.ServiceTaskSpecArgs:
    """A task on every node, on the overlay, reserving nothing.

    Why: on Docker 20.10 a GPU-reserving task that is the first on its node to use
    a new overlay is rejected ("node is missing network attachments"), and every
    retry is then rejected by the constraint enforcer ("assigned node no longer
    meets constraints"), for good (seen in the lab; tests/lab/test_infra_launch.py).
    Once any task has used the overlay on a node, GPU tasks schedule normally.
    Fixed in Docker 23.0.2 (moby/swarmkit#3082): on a current engine the service
    stays, with no task (warmup_replicas).
    """
    return idle_spec(image_ref, network_id)


def warmup_replicas(hosts: int, observed: Sequence[dict[str, Any] | None]) -> int:
    """Warm-up tasks for `hosts` active hosts whose facts are `observed`: one per host
    where any of them runs an engine before OVERLAY_ATTACH_FIXED_IN, or one whose
    engine is unknown (not yet read, or `docker version` printed nothing); else none.

    All or none: Swarm has no constraint on the engine's version, and a node label
    per engine would be a node update, which on 20.10 is what restarts GPU tasks.
    """
    versions = [(o or {}).get("docker_version") or "" for o in observed]
    needed = any(not v or older_than(v, OVERLAY_ATTACH_FIXED_IN) for v in versions)
    return hosts if needed else 0


def standby_spec(image_ref: pulumi.Input[str]) -> docker.ServiceTaskSpecArgs:
    """One sleeping task per spare host, reserving nothing.

    Why: a spare is labelled like a worker so that Swarm can move a lost host's
    `ds-worker` task onto it, but the first placement must leave it empty. Among
    nodes with equally many tasks of a service, Swarm's scheduler picks the node
    with fewer tasks in all (swarmkit `nodeLess`), so this one extra task makes
    every training host come before the spare. It also keeps the training image
    pulled on the spare, so a failover does not wait for the pull.
    """
    return idle_spec(image_ref, constraints=[SPARE_CONSTRAINT])


def task_spec_label(task_spec: docker.ServiceTaskSpecArgs) -> pulumi.Output[str]:
    """A digest of a task spec as the program declares it (never what Swarm reads
    back, so a refresh does not change it): what changes it makes Swarm replace the
    tasks; nothing else (a new step count, args, ds_config) does."""

    def digest(value: Any) -> str:
        text = json.dumps(value, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    return pulumi.Output.from_input(_plain(task_spec)).apply(digest)


def _plain(value: Any) -> Any:
    """An input-type tree as dicts and lists (its outputs left for `from_input`, which
    resolves them inside dicts and lists, never inside input types)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool | pulumi.Output):
        return value
    return {k: _plain(v) for k, v in vars(value).items()}  # an input type: its properties


def spec_digest(cfg: TaskSpecSource, *inputs: pulumi.Input[str]) -> pulumi.Output[str]:
    """A digest of what the training tasks' specs are made from: the training config,
    the tasks' environment, the secret names, and the image, network and secret ids.

    Any change to a task spec makes Swarm restart every task of the service, and
    the launched training dies with them; the launch's roster takes this digest
    as an input so that such an update re-reads the tasks (and the launch, whose
    triggers hold the task ids, starts again in the new ones). Host-level changes
    (labels, a drained host removed, a JupyterLab or Prometheus setting) are not in
    it: in a preview a re-read roster is unknown, which shows the launch as
    restarting when it will not. It may still change without a restart (a training
    key no task uses): the roster then re-reads the same tasks and nothing
    relaunches. Taken from the program's inputs, never from what Swarm reads back,
    so a refresh does not change it.
    """
    data: dict[str, Any] = {
        # Without the services' own labels, the run's recovery settings, its synced
        # code and its fork server (the launch's): they are not part of any task spec
        # (and a stack deployed before a key existed keeps its digest).
        # gpu_model and nodes only where set: a stack deployed before the keys keeps
        # its digest.
        "training": cfg.training.model_dump(
            mode="json",
            exclude={"service_labels", "recovery", "code", "fork_server"}
            | {k for k in ("gpu_model", "nodes") if getattr(cfg.training, k) is None},
        ),
        # The environment carries what tasks see of hosts (RDMA devices) and of
        # monitoring (their metrics port).
        "env": training_env(cfg),
        "secret_names": cfg.secret_names,
    }
    if cfg.training.recovery.follow_master:
        # The master's placement, command and environment (only where set).
        data["follow_master"] = True
    static = json.dumps(data, sort_keys=True)

    def digest(values: list[Any]) -> str:
        text = static + json.dumps(values, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    return pulumi.Output.all(*inputs).apply(digest)


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
        super().__init__("deepspeed-swarm:services:ClusterServices", name, None, opts)
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
        t = args.training
        image_ref = args.image.ref
        network_id = args.overlay.network_id
        secrets = args.secrets.secrets
        provider = args.swarm.manager_provider
        depends_on: list[pulumi.Resource] = list(
            dict.fromkeys(
                [args.image, args.overlay, args.secrets, *([args.facts] if args.facts else [])]
            )
        )
        # On the host data plane the training tasks join Swarm's `host` network (a
        # service on it can join no other): by the id Swarm reads back (hostnet.py).
        self.host_network = (
            SwarmHostNetwork(
                f"{name}-host-net",
                {"leader_endpoint": args.swarm.leader_endpoint},
                pulumi.ResourceOptions(parent=self, depends_on=args.swarm.members),
            )
            if args.network.data_plane == "host"
            else None
        )
        self.training_network_id = self.host_network.network_id if self.host_network else network_id
        if self.host_network:
            depends_on.append(self.host_network)
        spec = container_spec(args, image_ref, secrets)
        rp = t.restart_policy

        self.warmup, self.standby = (
            idle_services(
                name,
                args.active_hosts,
                args.spares,
                image_ref,
                network_id,
                args.facts,
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on),
            )
            if args.facts is not None
            else (None, None)
        )

        # A job on a shared cluster: its GPUs checked free before any of its services
        # is registered (infra/providers/fit.py says why).
        self.fit = None
        if args.job is not None and args.facts is None and t.gpus_per_node:
            self.fit = GpuFit(
                f"{name}-fit",
                {
                    "leader_endpoint": args.swarm.leader_endpoint,
                    "job": args.job,
                    "services": list(training_service_names(args.job)),
                    # The master's host (StackConfig.master, the first host), then the
                    # workers': where the job's GPU tasks go when every host is up.
                    "hosts": [args.hosts[0].name, *[h.name for h in args.workers]],
                    "gpus": t.gpus_per_node,
                },
                pulumi.ResourceOptions(parent=self, depends_on=args.swarm.members),
            )
            depends_on.append(self.fit)

        if args.job is not None and args.facts is None and args.spares:
            self.standby = self._job_standby(name, args, image_ref, provider, depends_on)

        # With `training.nodes`, the workers keep off the hosts the run leaves out (a
        # moved task may still go to a spare).
        keep_off = [f"node.hostname!={h.name}" for h in args.unused]

        # training.recovery.follow_master: the master may run on a spare, and its task
        # takes the run over when it starts again (infra/task/takeover.py).
        takeover = t.recovery.follow_master
        master_spec = container_spec(args, image_ref, secrets, takeover=True) if takeover else spec

        def task_spec(role: str) -> docker.ServiceTaskSpecArgs:
            constraints = placement_constraints(role, t.gpu_model, master_moves=takeover)
            return docker.ServiceTaskSpecArgs(
                container_spec=master_spec if role == "master" else spec,
                networks_advanceds=specs.overlay(self.training_network_id),
                placement=specs.placement(
                    constraints + (keep_off if role == "worker" else []), max_replicas=1
                ),
                resources=gpu_reservation(t.gpus_per_node),
                restart_policy=specs.restart_policy(
                    rp.condition, rp.delay, rp.max_attempts, rp.window
                ),
            )

        # Before the workers: the standby task must be on the spares when Swarm
        # places the workers (standby_spec says why).
        self.before_gpu_tasks = [s for s in (self.warmup, self.standby) if s is not None]

        def service(svc_name: str, role: str, replicas: int) -> docker.Service:
            spec_args = task_spec(role)
            # The master's tasks read their spec's digest from this label (DSS_SPEC): a
            # task an update made differs from the run's, a moved one does not.
            spec_label = (
                [docker.ServiceLabelArgs(label=SPEC_LABEL, value=task_spec_label(spec_args))]
                if takeover and role == "master"
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
                    *(
                        [docker.ServiceLabelArgs(label=JOB_LABEL, value=args.job)]
                        if args.job
                        else []
                    ),
                    *spec_label,
                    *[
                        docker.ServiceLabelArgs(label=k, value=v)
                        for k, v in sorted(t.service_labels.items())
                    ],
                ],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    provider=provider,
                    depends_on=[*depends_on, *self.before_gpu_tasks],
                ),
            )

        self.master_name, self.worker_name = training_service_names(args.job)
        self.master = service(self.master_name, "master", 1)
        n_workers = len(args.workers)
        self.workers = service(self.worker_name, "worker", n_workers) if n_workers else None
        self.service_names = [self.master_name] + ([self.worker_name] if n_workers else [])
        self.task_spec_digest = spec_digest(
            args, image_ref, self.training_network_id, *[s.id for s in secrets.values()]
        )
        self.register_outputs(
            {"service_names": self.service_names, "task_spec_digest": self.task_spec_digest}
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
