"""No secret ends up in any layer of the image."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from .conftest import IMAGES, docker

pytestmark = [pytest.mark.image, pytest.mark.timeout(1800)]


def needles(keys: Path) -> dict[str, bytes]:
    priv = (keys / "ssh_private_key").read_text().splitlines()
    pub = (keys / "ssh_public_key").read_text().split()
    return {"private key body": priv[2].encode(), "public key": pub[1].encode()}


def scan_saved_image(tag: str, find: dict[str, bytes]) -> list[str]:
    """Stream `docker save` and search every file of every layer, and the config, for needles."""
    hits: list[str] = []
    p = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
    assert p.stdout is not None
    with tarfile.open(fileobj=p.stdout, mode="r|") as outer:
        for m in outer:
            if not m.isfile():
                continue
            f = outer.extractfile(m)
            assert f is not None
            if m.name.endswith(".tar") or m.name.startswith("blobs/"):
                try:
                    with tarfile.open(fileobj=f, mode="r|") as layer:
                        for lm in layer:
                            if lm.isfile():
                                data = layer.extractfile(lm).read()  # type: ignore[union-attr]
                                hits += [
                                    f"{m.name}:{lm.name}: {k}" for k, v in find.items() if v in data
                                ]
                    continue
                except tarfile.ReadError:
                    f = outer.extractfile(m)  # a config blob, not a layer
                    assert f is not None
            data = f.read()
            hits += [f"{m.name}: {k}" for k, v in find.items() if v in data]
    assert p.wait() == 0
    return hits


def test_no_secret_in_any_layer(image: str, ssh_keys: Path, tmp_path: Path) -> None:
    """Built with key files in the context, as build args and in the env, no layer holds them."""
    ctx = tmp_path / "images"
    shutil.copytree(IMAGES, ctx, ignore=shutil.ignore_patterns(".wheelhouse", "__pycache__"))
    for name in ("ssh_private_key", "ssh_public_key"):  # a careless developer's context
        shutil.copy(ssh_keys / name, ctx / name)
        (ctx / "secrets").mkdir(exist_ok=True)
        shutil.copy(ssh_keys / name, ctx / "secrets" / name)
    tag = f"dss-train:secret-test-{uuid.uuid4().hex[:8]}"
    priv = (ssh_keys / "ssh_private_key").read_text()
    env = os.environ | {"DSS_IMAGE": tag, "SSH_PRIVATE_KEY": priv}
    try:
        r = subprocess.run(
            [
                str(ctx / "build"),
                "--build-arg",
                f"SSH_PRIVATE_KEY={priv}",
                "--build-arg",
                "SSH_PUBLIC_KEY=" + (ssh_keys / "ssh_public_key").read_text(),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert scan_saved_image(tag, needles(ssh_keys)) == []
    finally:
        docker("rmi", "-f", tag, check=False)


def test_scanner_finds_a_planted_secret(image: str, ssh_keys: Path, tmp_path: Path) -> None:
    """The layer scan does find key material when it is in a layer (scanner self-test)."""
    tag = f"dss-train:secret-plant-{uuid.uuid4().hex[:8]}"
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY ssh_public_key /k\n")
    shutil.copy(ssh_keys / "ssh_public_key", tmp_path / "ssh_public_key")
    try:
        docker("build", "-q", "-t", tag, str(tmp_path), timeout=600)
        hits = scan_saved_image(tag, needles(ssh_keys))
        assert any("public key" in h for h in hits)
    finally:
        docker("rmi", "-f", tag, check=False)
