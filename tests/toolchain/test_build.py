"""toolchain/build's refusals and pins, checked without building anything."""

from __future__ import annotations

import hashlib
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.toolchain

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "toolchain" / "build"


def versions_env() -> dict[str, str]:
    """The pins in toolchain/versions.env, as bash expands them."""
    out = subprocess.run(
        ["bash", "-c", f'set -a; . "{ROOT}/toolchain/versions.env"; env -0'],
        capture_output=True,
        check=True,
        env={},
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def check(src: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`toolchain/build --check` against a given bundle and an empty cache."""
    env = {"PATH": "/usr/local/go/bin:/usr/bin:/bin", "HOME": str(cache)}
    env.update(DSS_TOOLCHAIN_SRC=str(src), DSS_CACHE=str(cache / "dss"))
    return subprocess.run(
        [str(BUILD), "--check"], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_sdk_pins_equal_toolchain_pins() -> None:
    """uv.lock pins the Python SDKs at the versions toolchain/versions.env builds."""
    pins = versions_env()
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    assert locked["pulumi"] == pins["PULUMI_VERSION"], "uv.lock pulumi"
    assert locked["pulumi-docker"] == pins["PULUMI_DOCKER_VERSION"], "uv.lock pulumi-docker"
    assert locked["pulumi-command"] == pins["PULUMI_COMMAND_VERSION"], "uv.lock pulumi-command"


def test_cli_wrapper_requires_the_pinned_release() -> None:
    """toolchain/pulumi/go.mod requires pkg/v3 at the pinned CLI version."""
    pins = versions_env()
    gomod = (ROOT / "toolchain" / "pulumi" / "go.mod").read_text()
    want = f"github.com/pulumi/pulumi/pkg/v3 v{pins['PULUMI_VERSION']}"
    assert re.search(rf"^(require )?\s*{re.escape(want)}\s*$", gomod, re.M), f"go.mod lacks {want}"


def test_refuses_a_bundle_with_a_bad_checksum(tmp_path: Path) -> None:
    """An archive whose checksum differs from SHA256SUMS is named and not unpacked."""
    pins = versions_env()
    src = tmp_path / "bundle"
    src.mkdir()
    name = pins["DSS_SRC_LANGUAGE_PYTHON"]
    (src / name).write_bytes(b"not the archive")
    (src / "SHA256SUMS").write_text(f"{'0' * 64}  {name}\n")
    proc = check(src, tmp_path / "cache")
    assert proc.returncode == 1, proc.stderr
    assert f"{name}: checksum" in proc.stderr, proc.stderr
    unpacked = list((tmp_path / "cache" / "dss" / "toolchain-work").glob("*/language-python"))
    assert not unpacked, f"a bad archive was unpacked: {unpacked}"


def test_names_a_missing_bundle(tmp_path: Path) -> None:
    """Without a source bundle the check says which setting to point at one."""
    proc = check(tmp_path / "nowhere", tmp_path / "cache")
    assert proc.returncode == 1, proc.stderr
    assert "no source bundle: DSS_TOOLCHAIN_SRC=" in proc.stderr, proc.stderr


def test_check_lists_every_missing_binary(tmp_path: Path) -> None:
    """On an empty cache, --check names each binary and plugin, builds nothing."""
    if not (src := ROOT.parent / "shared" / "toolchain-src").is_dir():
        pytest.fail(f"the source bundle is not beside the checkout ({src})")
    proc = check(src, tmp_path / "cache")
    assert proc.returncode == 1, proc.stderr
    for name in (
        "pulumi",
        "pulumi-language-python",
        "pulumi-resource-command",
        "pulumi-resource-docker",
        "plugin docker",
        "plugin command",
    ):
        assert f"FAILED {name}:" in proc.stderr, f"--check does not name {name}"
    assert not (tmp_path / "cache" / "dss" / "go").exists(), "--check ran the go command"


PATCHES = ROOT / "toolchain" / "patches" / "docker"


def project_patches() -> list[Path]:
    """The project's patches to the docker provider, in the order toolchain/build applies them."""
    return sorted(PATCHES.glob("*.patch"))


def test_docker_patches_match_their_pin() -> None:
    """versions.env pins the checksum of toolchain/patches/docker (a changed patch needs a
    new patch level, so it never lands under a key other checkouts already use)."""
    pins = versions_env()
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in project_patches())).hexdigest()
    assert project_patches(), f"no patches in {PATCHES}"
    assert digest[:16] == pins["DSS_DOCKER_PATCHES_SHA256"], (
        f"toolchain/patches/docker changed: bump DSS_DOCKER_PATCH_LEVEL and set "
        f"DSS_DOCKER_PATCHES_SHA256={digest[:16]} in toolchain/versions.env"
    )


def test_toolchain_key_names_the_patch_level() -> None:
    """The toolchain key (folder of the binaries and of PULUMI_HOME) names the docker
    provider's patch level beside its upstream version."""
    pins = versions_env()
    level = pins["DSS_DOCKER_PATCH_LEVEL"]
    assert re.fullmatch(r"dss\d+", level), f"DSS_DOCKER_PATCH_LEVEL={level!r}, want dss<N>"
    assert f"_docker-{pins['PULUMI_DOCKER_VERSION']}-{level}_" in pins["DSS_TOOLCHAIN_KEY"]


def test_docker_patches_apply_to_the_bundle(tmp_path: Path) -> None:
    """The project's patches apply with `git apply` to the bundle's terraform provider after
    pulumi-docker's own, as toolchain/build applies them, and sort a service's env."""
    if not (src := ROOT.parent / "shared" / "toolchain-src").is_dir():
        pytest.fail(f"the source bundle is not beside the checkout ({src})")
    pins = versions_env()
    root = tmp_path / "pulumi-docker"
    upstream = root / "upstream"
    upstream.mkdir(parents=True)
    for archive, into, strip in (
        (pins["DSS_SRC_DOCKER"], tmp_path, []),
        (pins["DSS_SRC_DOCKER_UPSTREAM"], upstream, ["--strip-components=1"]),
    ):
        untar = ["tar", "-xzf", str(src / archive), "-C", str(into), "--no-same-owner", *strip]
        subprocess.run(untar, check=True)
    subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)  # as toolchain/build's unpack
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CEILING_DIRECTORIES": str(root)}
    for patch in [*sorted((root / "patches").glob("*.patch")), *project_patches()]:
        proc = subprocess.run(
            ["git", "apply", str(patch)], cwd=upstream, capture_output=True, text=True, env=env
        )
        assert proc.returncode == 0, f"{patch.name} does not apply: {proc.stderr}"
    structures = upstream / "internal" / "provider" / "resource_docker_service_structures.go"
    assert "sort.Strings(containerSpec.Env)" in structures.read_text()
