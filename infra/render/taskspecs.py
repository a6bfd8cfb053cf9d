"""The training services' task specs, as the docker provider's input types: the training
container, its GPU reservation, the idle tasks (overlay warm-up, spares' standby) and how
many warm-up tasks the hosts' engines need, and the digests that tell a change that
restarts the training tasks from one that does not. Builds inputs, registers nothing:
infra/components/services.py creates the services from them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_docker as docker

from infra.config import size_bytes
from infra.layout import (
    GPU_RESOURCE,
    IMAGE_HOME,
    OVERLAY_ATTACH_FIXED_IN,
    SHM_MOUNT,
    TRAIN_UID,
)
from infra.render import specs
from infra.render.labels import SPARE_CONSTRAINT, env_list, training_env
from infra.render.sections import TaskEnvSource, TaskSpecSource
from infra.render.supervisor import TAKEOVER_ENV, takeover_loop
from infra.versions import older_than


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
        # code, its fork server, its command and secret_env (the launch's): not part of
        # any task spec (and a stack deployed before a key existed keeps its digest).
        # gpu_model, nodes and hosts only where set: a stack deployed before the keys
        # keeps its digest. Not how the hosts were chosen, the job's priority or its
        # queued or released mark: no task spec holds them.
        "training": cfg.training.model_dump(
            mode="json",
            exclude={"service_labels", "recovery", "code", "fork_server", "command", "secret_env"}
            | {"placement", "priority", "queued", "released"}
            | {k for k in ("gpu_model", "nodes", "hosts") if getattr(cfg.training, k) is None},
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
