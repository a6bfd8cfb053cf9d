"""TrainingImage: build the image from `images/`, tag it by content, distribute it.

With a registry: build once on the build host, push, and services pin the pushed
digest (`repo_digest`), so every host pulls exactly the bytes that were built.
Without one: build on every host's engine (same context, same tag), because an
image built with `skip_push` exists on one daemon only.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_docker as docker

from infra import render
from infra.config import Image, StackConfig

# The one platform the image is built for; services declare it in their placement.
PLATFORM_OS, PLATFORM_ARCH = "linux", "amd64"


def image_tag(project_dir: Path, image: Image) -> str:
    """Content tag: a one-line change in the build context gives a new tag."""
    return render.tree_hash(project_dir / image.context)


def image_name(image: Image, tag: str) -> str:
    """`[registry/]repository:tag`."""
    prefix = f"{image.registry}/" if image.registry else ""
    return f"{prefix}{image.repository}:{tag}"


class TrainingImage(pulumi.ComponentResource):
    """The training image, available to every host's engine."""

    tag: str
    """Content hash of the build context."""
    ref: pulumi.Output[str]
    """What services run: `registry/repo@sha256:...` with a registry, else `repo:tag`."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        project_dir: Path,
        host_providers: dict[str, docker.Provider],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:image:TrainingImage", name, None, opts)
        img = cfg.image
        self.tag = image_tag(project_dir, img)
        build = docker.DockerBuildArgs(
            # Relative to the project (the program's working directory), so state
            # does not change when the project is cloned somewhere else.
            context=img.context,
            dockerfile=f"{img.context}/{img.dockerfile}",
            args=img.build_args,
            builder_version=docker.BuilderVersion(img.builder),
            platform=f"{PLATFORM_OS}/{PLATFORM_ARCH}",
        )
        if img.registry:
            builder = docker.Provider(
                f"{name}-build-host", host=img.build_host, opts=pulumi.ResourceOptions(parent=self)
            )
            built = docker.Image(
                f"{name}-build",
                image_name=image_name(img, self.tag),
                build=build,
                registry=docker.RegistryArgs(server=img.registry),
                opts=pulumi.ResourceOptions(parent=self, provider=builder),
            )
            self.ref = built.repo_digest
        else:
            for host, provider in host_providers.items():
                docker.Image(
                    f"{name}-build-{host}",
                    image_name=image_name(img, self.tag),
                    build=build,
                    skip_push=True,
                    opts=pulumi.ResourceOptions(parent=self, provider=provider),
                )
            self.ref = pulumi.Output.from_input(image_name(img, self.tag))
        self.register_outputs({"tag": self.tag, "ref": self.ref})
