"""Swarm service spec builders shared by the training services, JupyterLab and
monitoring: mode, endpoint spec, placement (platforms), restart policy, mounts.

Each states a field the way Swarm reads it back, so that a refresh of a healthy
service finds no drift: the platform the image is built for, durations in Go's
spelling, every field of a restart policy. Pure: builds the provider's input types,
registers nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pulumi
import pulumi_docker as docker

from infra.config import duration_seconds
from infra.layout import DATA_MOUNT, TRAIN_UID

# The one platform the images are built for; services declare it in their placement.
PLATFORM_OS, PLATFORM_ARCH = "linux", "amd64"
BUILD_PLATFORM = f"{PLATFORM_OS}/{PLATFORM_ARCH}"
# Swarm records the image's platform in the service's placement, so the program
# states it too (otherwise every refresh reports `placement.platforms` as drift).
PLATFORMS = [
    docker.ServiceTaskSpecPlacementPlatformArgs(architecture=PLATFORM_ARCH, os=PLATFORM_OS)
]


def docker_duration(value: str) -> str:
    """A duration spelled as the docker provider reads it back from Swarm: Go's
    `time.Duration` with trailing zero units dropped (`60s` -> `1m`, `90s` ->
    `1m30s`, `3600s` -> `1h`). Spelled any other way, every refresh would see a
    change (`stopGracePeriod: "1m" => "60s"`) and replace the service."""
    hours, rest = divmod(duration_seconds(value), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{hours}h{minutes}m{seconds}s" if hours else f"{minutes}m{seconds}s"
    text = text if hours or minutes else f"{seconds}s"
    if text.endswith("m0s"):
        text = text[:-2]
    if text.endswith("h0m"):
        text = text[:-2]
    return text


def replicated(replicas: pulumi.Input[int]) -> docker.ServiceModeArgs:
    """A replicated service of `replicas` tasks."""
    return docker.ServiceModeArgs(replicated=docker.ServiceModeReplicatedArgs(replicas=replicas))


def converge(timeout: str) -> docker.ServiceConvergeConfigArgs:
    """Create and update wait until the tasks run (at most `timeout`)."""
    return docker.ServiceConvergeConfigArgs(delay="2s", timeout=timeout)


def dnsrr(
    ports: Sequence[docker.ServiceEndpointSpecPortArgs] | None = None,
) -> docker.ServiceEndpointSpecArgs:
    """DNS round robin (`tasks.<service>`), no VIP: the lab has no IPVS, nothing needs one."""
    return docker.ServiceEndpointSpecArgs(mode="dnsrr", ports=list(ports) if ports else None)


def host_port(target: int, published: int) -> docker.ServiceEndpointSpecPortArgs:
    """A TCP port published in host mode: only where the task runs, no routing mesh."""
    return docker.ServiceEndpointSpecPortArgs(
        target_port=target, published_port=published, publish_mode="host", protocol="tcp"
    )


def placement(
    constraints: list[str] | None = None, max_replicas: int | None = None
) -> docker.ServiceTaskSpecPlacementArgs:
    """Placement on the images' platform, with optional constraints and a per-node cap."""
    return docker.ServiceTaskSpecPlacementArgs(
        constraints=constraints, max_replicas=max_replicas, platforms=PLATFORMS
    )


def restart_policy(
    condition: str, delay: str, max_attempts: int, window: str
) -> docker.ServiceTaskSpecRestartPolicyArgs:
    """All four fields: the provider sends the ones left out as zeros and reads them
    back ("0s"), so a partial policy is a perpetual `taskSpec` diff."""
    return docker.ServiceTaskSpecRestartPolicyArgs(
        condition=condition,
        delay=docker_duration(delay),
        max_attempts=max_attempts,
        window=docker_duration(window),
    )


def overlay(network_id: pulumi.Input[str]) -> list[docker.ServiceTaskSpecNetworksAdvancedArgs]:
    """The tasks' attachment to the training overlay (by id: its name changes)."""
    return [docker.ServiceTaskSpecNetworksAdvancedArgs(id=network_id)]


def no_healthcheck() -> docker.ServiceTaskSpecContainerSpecHealthcheckArgs:
    """The image's healthcheck probes sshd, which tasks other than training do not run."""
    return docker.ServiceTaskSpecContainerSpecHealthcheckArgs(tests=["NONE"])


def bind_mount(
    source: str, target: str, read_only: bool
) -> docker.ServiceTaskSpecContainerSpecMountArgs:
    """A host path bound into the task."""
    return docker.ServiceTaskSpecContainerSpecMountArgs(
        type="bind", source=source, target=target, read_only=read_only
    )


def data_mount(data_dir: str) -> docker.ServiceTaskSpecContainerSpecMountArgs:
    """The shared data dir (`training.data_dir`) at /data, writable."""
    return bind_mount(data_dir, DATA_MOUNT, read_only=False)


class SwarmSecret(Protocol):
    """What a secret mount needs of a Swarm secret: a `docker.Secret` of this stack, or
    a cluster's secret a job stack mounts by its exported id and name."""

    @property
    def id(self) -> pulumi.Output[str]: ...

    @property
    def name(self) -> pulumi.Output[str]: ...


def secret_mount(
    file_name: str, secret: SwarmSecret
) -> docker.ServiceTaskSpecContainerSpecSecretArgs:
    """A secret mounted at /run/secrets/<file_name>, readable by the training user only."""
    return docker.ServiceTaskSpecContainerSpecSecretArgs(
        secret_id=secret.id,
        secret_name=secret.name,
        file_name=file_name,
        file_uid=TRAIN_UID,
        file_gid=TRAIN_UID,
        file_mode=0o400,
    )
