"""TrainingServices: `ds-master` (1 task) and `ds-worker` (one task per other host).

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
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_docker as docker

from infra import render
from infra.config import StackConfig, size_bytes
from infra.image import PLATFORM_ARCH, PLATFORM_OS
from infra.layout import DATA_MOUNT, IMAGE_HOME, SHM_MOUNT
from infra.secrets import secret_mount


def container_spec(
    cfg: StackConfig, image_ref: pulumi.Input[str], secrets: dict[str, docker.Secret]
) -> docker.ServiceTaskSpecContainerSpecArgs:
    """The container of every training task."""
    t = cfg.training
    mounts = [
        docker.ServiceTaskSpecContainerSpecMountArgs(
            type="bind", source=t.data_dir, target=DATA_MOUNT, read_only=False
        ),
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
        *[
            docker.ServiceTaskSpecContainerSpecMountArgs(
                type="bind", source=m.source, target=m.target, read_only=m.read_only
            )
            for m in t.datasets
        ],
    ]
    return docker.ServiceTaskSpecContainerSpecArgs(
        image=image_ref,
        env=render.env_list(render.training_env(cfg)),
        mounts=mounts,
        secrets=[secret_mount(file_name, s) for file_name, s in secrets.items()],
        healthcheck=docker.ServiceTaskSpecContainerSpecHealthcheckArgs(
            tests=["CMD", f"{IMAGE_HOME}/healthcheck.sh"],
            interval=render.docker_duration("10s"),
            timeout=render.docker_duration("5s"),
            retries=3,
            start_period=render.docker_duration("20s"),
        ),
        # SIGTERM reaches the launcher and ranks; they finish the step and
        # checkpoint within the grace period before Docker sends SIGKILL.
        stop_signal="SIGTERM",
        stop_grace_period=render.docker_duration(t.stop_grace_period),
        hostname="{{.Service.Name}}-{{.Task.Slot}}",
        # The image's USER, stated so the policy pack (policy/) can check it.
        user=render.TRAIN_UID,
    )


# Swarm records the image's platform in the service's placement, so the program
# states it too (otherwise every refresh reports `placement.platforms` as drift).
PLATFORMS = [
    docker.ServiceTaskSpecPlacementPlatformArgs(architecture=PLATFORM_ARCH, os=PLATFORM_OS)
]


def gpu_reservation(gpus: int) -> docker.ServiceTaskSpecResourcesArgs | None:
    """Reserve `gpus` NVIDIA-GPU generic resources (none for CPU training)."""
    if not gpus:
        return None
    return docker.ServiceTaskSpecResourcesArgs(
        reservation=docker.ServiceTaskSpecResourcesReservationArgs(
            generic_resources=docker.ServiceTaskSpecResourcesReservationGenericResourcesArgs(
                discrete_resources_specs=[f"{render.GPU_RESOURCE}={gpus}"]
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
            user=render.TRAIN_UID,
            # The image's healthcheck probes sshd, which this task does not run.
            healthcheck=docker.ServiceTaskSpecContainerSpecHealthcheckArgs(tests=["NONE"]),
        ),
        networks_advanceds=(
            [docker.ServiceTaskSpecNetworksAdvancedArgs(id=network_id)] if network_id else None
        ),
        placement=docker.ServiceTaskSpecPlacementArgs(
            constraints=constraints, max_replicas=1, platforms=PLATFORMS
        ),
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
    """
    return idle_spec(image_ref, network_id)


def standby_spec(image_ref: pulumi.Input[str]) -> docker.ServiceTaskSpecArgs:
    """One sleeping task per spare host, reserving nothing.

    Why: a spare is labelled like a worker so that Swarm can move a lost host's
    `ds-worker` task onto it, but the first placement must leave it empty. Among
    nodes with equally many tasks of a service, Swarm's scheduler picks the node
    with fewer tasks in all (swarmkit `nodeLess`), so this one extra task makes
    every training host come before the spare. It also keeps the training image
    pulled on the spare, so a failover does not wait for the pull.
    """
    return idle_spec(image_ref, constraints=[render.SPARE_CONSTRAINT])


def spec_digest(cfg: StackConfig, *inputs: pulumi.Input[str]) -> pulumi.Output[str]:
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
    data = {
        "training": cfg.training.model_dump(mode="json"),
        # The environment carries what tasks see of hosts (RDMA devices) and of
        # monitoring (their metrics port).
        "env": render.training_env(cfg),
        "secret_names": cfg.secret_names,
    }
    static = json.dumps(data, sort_keys=True)

    def digest(values: list[Any]) -> str:
        text = static + json.dumps(values, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    return pulumi.Output.all(*inputs).apply(digest)


class TrainingServices(pulumi.ComponentResource):
    """The master and worker services of the training job."""

    warmup: docker.Service
    """`ds-net-warmup`: one task per node on the overlay, before any GPU task."""
    standby: docker.Service | None
    """`ds-standby`: one idle task per spare host (none without spares)."""
    master: docker.Service
    workers: docker.Service | None
    service_names: list[str]
    task_spec_digest: pulumi.Output[str]
    """Changes whenever an update restarts the training tasks (see spec_digest)."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        image_ref: pulumi.Input[str],
        network_id: pulumi.Input[str],
        secrets: dict[str, docker.Secret],
        provider: docker.Provider,
        depends_on: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:services:TrainingServices", name, None, opts)
        t = cfg.training
        spec = container_spec(cfg, image_ref, secrets)
        rp = t.restart_policy

        # One task per node as a replicated service (one replica per host, at most
        # one per node) rather than `global` mode: the docker provider refuses
        # `converge_config` with global mode ("mode.0.global conflicts with
        # converge_config"), and without it the GPU services could be created
        # before any warm-up task ran.
        self.warmup = docker.Service(
            f"{name}-net-warmup",
            name=render.WARMUP_SERVICE,
            mode=docker.ServiceModeArgs(
                replicated=docker.ServiceModeReplicatedArgs(replicas=len(cfg.active_hosts))
            ),
            task_spec=warmup_spec(image_ref, network_id),
            endpoint_spec=docker.ServiceEndpointSpecArgs(mode="dnsrr"),
            converge_config=docker.ServiceConvergeConfigArgs(delay="2s", timeout="5m"),
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=list(depends_on)
            ),
        )

        def task_spec(role: str) -> docker.ServiceTaskSpecArgs:
            return docker.ServiceTaskSpecArgs(
                container_spec=spec,
                networks_advanceds=[docker.ServiceTaskSpecNetworksAdvancedArgs(id=network_id)],
                placement=docker.ServiceTaskSpecPlacementArgs(
                    constraints=render.placement_constraints(role),
                    max_replicas=1,
                    platforms=PLATFORMS,
                ),
                resources=gpu_reservation(t.gpus_per_node),
                restart_policy=docker.ServiceTaskSpecRestartPolicyArgs(
                    condition=rp.condition,
                    delay=render.docker_duration(rp.delay),
                    max_attempts=rp.max_attempts,
                    window=render.docker_duration(rp.window),
                ),
            )

        # Before the workers: the standby task must be on the spares when Swarm
        # places `ds-worker` (standby_spec says why).
        self.standby = (
            docker.Service(
                f"{name}-standby",
                name=render.STANDBY_SERVICE,
                mode=docker.ServiceModeArgs(
                    replicated=docker.ServiceModeReplicatedArgs(replicas=len(cfg.spares))
                ),
                task_spec=standby_spec(image_ref),
                endpoint_spec=docker.ServiceEndpointSpecArgs(mode="dnsrr"),
                converge_config=docker.ServiceConvergeConfigArgs(delay="2s", timeout="5m"),
                opts=pulumi.ResourceOptions(
                    parent=self, provider=provider, depends_on=list(depends_on)
                ),
            )
            if cfg.spares
            else None
        )
        before_gpu_tasks = [self.warmup, *([self.standby] if self.standby else [])]

        def service(svc_name: str, role: str, replicas: int) -> docker.Service:
            return docker.Service(
                f"{name}-{role}",
                name=svc_name,
                mode=docker.ServiceModeArgs(
                    replicated=docker.ServiceModeReplicatedArgs(replicas=replicas)
                ),
                task_spec=task_spec(role),
                endpoint_spec=docker.ServiceEndpointSpecArgs(mode="dnsrr"),
                converge_config=docker.ServiceConvergeConfigArgs(delay="2s", timeout="10m"),
                labels=[docker.ServiceLabelArgs(label="dss.role", value=role)],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    provider=provider,
                    depends_on=[*depends_on, *before_gpu_tasks],
                ),
            )

        self.master = service(render.MASTER_SERVICE, "master", 1)
        n_workers = len(cfg.workers)
        self.workers = service(render.WORKER_SERVICE, "worker", n_workers) if n_workers else None
        self.service_names = [render.MASTER_SERVICE] + (
            [render.WORKER_SERVICE] if n_workers else []
        )
        self.task_spec_digest = spec_digest(
            cfg, image_ref, network_id, *[s.id for s in secrets.values()]
        )
        self.register_outputs(
            {"service_names": self.service_names, "task_spec_digest": self.task_spec_digest}
        )
