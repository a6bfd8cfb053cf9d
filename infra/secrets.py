"""ClusterSecrets: the SSH key pair the tasks trust each other with, and the user's
named secrets, as Docker Swarm secrets.

Values stay Pulumi secrets end to end: generated or read from secret config,
stored encrypted in state, handed to Docker's Raft store, mounted as files under
/run/secrets in the tasks. They never enter an image layer, env var or log.

`docker.Secret` forces replacement on any change and Docker refuses to delete a
secret a service still uses, so secrets are auto-named (a fresh name per value)
and replaced create-before-delete: the new one exists, services roll onto it,
then the old one goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_docker as docker
from pulumi.dynamic import CreateResult, DiffResult, Resource

from infra import render
from infra.dynamic import BoundaryProvider, diff_keys


class SshKeyPairProvider(BoundaryProvider):
    """Generates an ed25519 key pair once; rotation is a replace (change `rotation`)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        import base64
        import hashlib

        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        public = (
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        comment = f"{public} {props['comment']}"
        # The id is a SHA256 of the raw public key: stable, and says nothing secret.
        fingerprint = base64.b64encode(
            hashlib.sha256(key.public_key().public_bytes_raw()).digest()
        ).decode()
        return CreateResult(
            id_=fingerprint,
            outs={**props, "private_key": private, "public_key": comment},
        )

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("rotation", "comment")
        return diff_keys(olds, news, keys, replace_on=keys)


class GeneratedTokenProvider(BoundaryProvider):
    """A random URL-safe token, generated once; rotation is a replace."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        import hashlib
        import secrets

        value = secrets.token_urlsafe(32)
        # The id says nothing about the value.
        id_ = hashlib.sha256(secrets.token_bytes(16)).hexdigest()[:16]
        return CreateResult(id_=id_, outs={**props, "value": value})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, ("rotation",), replace_on=("rotation",))


class GeneratedToken(Resource):
    """A generated token whose value is a secret output (dynamic resource)."""

    value: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=["value"])
        )
        super().__init__(GeneratedTokenProvider(), name, {**props, "value": None}, opts)


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


def secret_mount(
    file_name: str, secret: docker.Secret
) -> docker.ServiceTaskSpecContainerSpecSecretArgs:
    """A secret mounted at /run/secrets/<file_name>, readable by the training user only."""
    return docker.ServiceTaskSpecContainerSpecSecretArgs(
        secret_id=secret.id,
        secret_name=secret.name,
        file_name=file_name,
        file_uid=render.TRAIN_UID,
        file_gid=render.TRAIN_UID,
        file_mode=0o400,
    )


class SshKeyPair(Resource):
    """An SSH key pair whose private half is a secret output (dynamic resource)."""

    private_key: pulumi.Output[str]
    public_key: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=["private_key"])
        )
        super().__init__(
            SshKeyPairProvider(), name, {**props, "private_key": None, "public_key": None}, opts
        )


class ClusterSecrets(pulumi.ComponentResource):
    """Every secret the training tasks mount, keyed by the file name under /run/secrets."""

    secrets: dict[str, docker.Secret]
    ssh_public_key: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        values: dict[str, Any],
        provider: docker.Provider,
        depends_on: Sequence[pulumi.Resource],
        rotation: str = "1",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:secrets:ClusterSecrets", name, None, opts)
        keys = SshKeyPair(
            f"{name}-ssh-key",
            {"comment": f"{name}@deepspeed-swarm", "rotation": rotation},
            pulumi.ResourceOptions(parent=self),
        )
        self.ssh_public_key = keys.public_key
        contents: dict[str, pulumi.Output[str]] = {
            render.SSH_PRIVATE_KEY_FILE: keys.private_key,
            render.SSH_PUBLIC_KEY_FILE: keys.public_key,
            **{k: pulumi.Output.secret(str(v)) for k, v in sorted(values.items())},
        }
        self.secrets = {}
        for file_name, value in contents.items():
            self.secrets[file_name] = swarm_secret(
                f"{name}-{file_name.replace('_', '-')}",
                file_name,
                value,
                provider,
                pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
            )
        self.register_outputs({"ssh_public_key": self.ssh_public_key})


def _b64(value: str) -> str:
    import base64

    return base64.b64encode(value.encode()).decode()
