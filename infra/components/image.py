"""TrainingImage: build the image from `images/`, tag it by content, distribute it.

With a registry: build once on the build host, push, and services pin the pushed
digest (`repo_digest`), so every host pulls exactly the bytes that were built.
Without one: build on every host's engine (same context, same tag), because an
image built with `skip_push` exists on one daemon only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker

from infra.components.swarm import SwarmCluster
from infra.config import Image
from infra.render.digest import tree_hash
from infra.render.specs import BUILD_PLATFORM
from infra.render.ssh import docker_ssh_opts
from infra.sshspec import SshSpec


@dataclass(frozen=True)
class TrainingImageArgs:
    """The image config, the project it is built from, the hosts' engines."""

    image: Image
    project_dir: Path
    swarm: SwarmCluster


def image_tag(project_dir: Path, image: Image) -> str:
    """Content tag: a one-line change in the build context gives a new tag."""
    return tree_hash(project_dir / image.context)


def image_name(image: Image, tag: str, repository: str | None = None) -> str:
    """`[registry/]repository:tag` (`repository` defaults to the training image's)."""
    prefix = f"{image.registry}/" if image.registry else ""
    return f"{prefix}{repository or image.repository}:{tag}"


def distribute(
    parent: pulumi.Resource,
    name: str,
    image: Image,
    ref_name: str,
    build: docker.DockerBuildArgs,
    host_providers: dict[str, docker.Provider],
    ssh_specs: Mapping[str, SshSpec] | None = None,
) -> pulumi.Output[str]:
    """Build `ref_name` and make it available to every host; returns what services run.

    With `image.registry`: built once on `image.build_host` (resource `<name>-build`,
    its provider `<name>-build-host`) and pushed; the pushed digest is returned.
    Without: built on every host's engine (`<name>-build-<host>`), returned by tag.
    """
    if image.registry:
        # The build host's SSH settings when it is one of the hosts (ssh:// URL as
        # theirs): the same checks and shared master as the host's own provider.
        spec = (ssh_specs or {}).get(image.build_host)
        builder = docker.Provider(
            f"{name}-build-host",
            host=image.build_host,
            ssh_opts=docker_ssh_opts(spec) if spec else None,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        built = docker.Image(
            f"{name}-build",
            image_name=ref_name,
            build=build,
            registry=docker.RegistryArgs(server=image.registry),
            opts=pulumi.ResourceOptions(parent=parent, provider=builder),
        )
        return built.repo_digest
    for host, provider in host_providers.items():
        docker.Image(
            f"{name}-build-{host}",
            image_name=ref_name,
            build=build,
            skip_push=True,
            opts=pulumi.ResourceOptions(parent=parent, provider=provider),
        )
    return pulumi.Output.from_input(ref_name)


class TrainingImage(pulumi.ComponentResource):
    """The training image, available to every host's engine."""

    tag: str
    """Content hash of the build context."""
    ref: pulumi.Output[str]
    """What services run: `registry/repo@sha256:...` with a registry, else `repo:tag`."""

    def __init__(
        self,
        name: str,
        args: TrainingImageArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:image:TrainingImage", name, None, opts)
        img = args.image
        self.tag = image_tag(args.project_dir, img)
        build = docker.DockerBuildArgs(
            # Relative to the project (the program's working directory), so state
            # does not change when the project is cloned somewhere else.
            context=img.context,
            dockerfile=f"{img.context}/{img.dockerfile}",
            args=img.build_args,
            builder_version=docker.BuilderVersion(img.builder),
            platform=BUILD_PLATFORM,
        )
        self.ref = distribute(
            self,
            name,
            img,
            image_name(img, self.tag),
            build,
            args.swarm.providers,
            args.swarm.ssh_specs,
        )
        self.register_outputs({"tag": self.tag, "ref": self.ref})
