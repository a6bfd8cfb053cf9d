"""Generated secrets (dynamic providers): the SSH key pair the training tasks trust
each other with, and random tokens (JupyterLab's).

Each is generated once, in `create`, and kept in the state as a secret output
(`additional_secret_outputs`); rotation is a replacement (change `rotation`).
infra/components/secrets.py hands them to Docker Swarm as secrets.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource

from infra.providers.boundary import BoundaryProvider, diff_keys


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
