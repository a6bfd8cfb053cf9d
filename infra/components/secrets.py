"""ClusterSecrets: the SSH key pair the tasks trust each other with, and the user's
named secrets, as Docker Swarm secrets.

Values stay Pulumi secrets end to end: generated (infra/providers/secrets.py) or
read from secret config, stored encrypted in state, handed to Docker's Raft store,
mounted as files under /run/secrets in the tasks. They never enter an image layer,
env var or log.

`docker.Secret` forces replacement on any change and Docker refuses to delete a
secret a service still uses, so secrets are auto-named (a fresh name per value)
and replaced create-before-delete: the new one exists, services roll onto it,
then the old one goes.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from infra.components.swarm import SwarmCluster
from infra.layout import SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE
from infra.providers.secrets import SshKeyPair


@dataclass(frozen=True)
class ClusterSecretsArgs:
    """The user's secret values (plain, wrapped as secrets at once) and the swarm."""

    values: Mapping[str, Any]
    swarm: SwarmCluster
    rotation: str = "1"
    """Change to generate a new SSH key pair."""


def swarm_secret(
    name: str,
    file_name: str,
    value: pulumi.Output[str],
    provider: docker.Provider,
    opts: pulumi.ResourceOptions,
) -> docker.Secret:
    """A Swarm secret (auto-named) holding `value`, labelled with its file name; the
    value stays a Pulumi secret, so state keeps it encrypted."""
    return docker.Secret(
        name,
        # Docker wants base64; the value stays a secret through the apply.
        # The SDK types Output.secret's argument with the class's own TypeVar,
        # which mypy binds to Never when called on the class.
        data=pulumi.Output.secret(value.apply(_b64)),  # type: ignore[arg-type]
        labels=[docker.SecretLabelArgs(label="dss.file", value=file_name)],
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(provider=provider, additional_secret_outputs=["data"]),
        ),
    )


class ClusterSecrets(pulumi.ComponentResource):
    """Every secret the training tasks mount, keyed by the file name under /run/secrets."""

    secrets: dict[str, docker.Secret]
    ssh_public_key: pulumi.Output[str]

    def __init__(
        self, name: str, args: ClusterSecretsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:secrets:ClusterSecrets", name, None, opts)
        keys = SshKeyPair(
            f"{name}-ssh-key",
            {"comment": f"{name}@deepspeed-swarm", "rotation": args.rotation},
            pulumi.ResourceOptions(parent=self),
        )
        self.ssh_public_key = keys.public_key
        contents: dict[str, pulumi.Output[str]] = {
            SSH_PRIVATE_KEY_FILE: keys.private_key,
            SSH_PUBLIC_KEY_FILE: keys.public_key,
            **{k: pulumi.Output.secret(str(v)) for k, v in sorted(args.values.items())},
        }
        self.secrets = {}
        for file_name, value in contents.items():
            self.secrets[file_name] = swarm_secret(
                f"{name}-{file_name.replace('_', '-')}",
                file_name,
                value,
                args.swarm.manager_provider,
                pulumi.ResourceOptions(parent=self, depends_on=args.swarm.members),
            )
        self.register_outputs({"ssh_public_key": self.ssh_public_key})


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()
