"""toolchain/make-bundle: a source bundle from upstream clones that toolchain/build accepts."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.toolchain.test_build import ROOT, check, versions_env

pytestmark = pytest.mark.toolchain


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def repo(path: Path, files: dict[str, str], tag: str) -> str:
    """A git repository holding `files`, tagged `tag`; returns the commit."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-qm", "release")
    if tag:
        git(path, "tag", tag)
    return git(path, "rev-parse", "HEAD")


@pytest.fixture
def clones(tmp_path: Path) -> list[Path]:
    """Stand-ins for the four upstream clones, at the pinned tags."""
    pins = versions_env()
    up = tmp_path / "upstream"
    pin = repo(
        up,
        {
            "LICENSE": "MPL",
            "go.mod": "module x",
            "go.sum": "",
            "internal/provider/p.go": "package provider",
            "README.md": "no",
        },
        "",
    )
    docker = tmp_path / "docker"
    repo(
        docker,
        {
            "LICENSE": "Apache",
            "provider/go.mod": "module p",
            "patches/0001.patch": "",
            "sdk/big.txt": "not bundled",
        },
        "",
    )
    # The `upstream` submodule as the release tree records it: a gitlink to `pin`.
    git(docker, "update-index", "--add", "--cacheinfo", f"160000,{pin},upstream")
    git(docker, "commit", "-qm", "pin upstream")
    git(docker, "tag", f"v{pins['PULUMI_DOCKER_VERSION']}")
    pulumi = tmp_path / "pulumi"
    lang = "sdk/python/cmd/pulumi-language-python"
    repo(
        pulumi,
        {
            "LICENSE": "Apache",
            f"{lang}/main.go": "package main",
            f"{lang}/go.mod": "m",
            "sdk/python/cmd/pulumi-language-python-exec": "#!/bin/sh",
            "sdk/python/dist/pulumi-resource-pulumi-python": "#!/bin/sh",
            "pkg/huge.go": "not bundled",
        },
        f"v{pins['PULUMI_VERSION']}",
    )
    command = tmp_path / "command"
    repo(
        command,
        {"LICENSE": "Apache", "provider/go.mod": "module c", "sdk/x": "no"},
        f"v{pins['PULUMI_COMMAND_VERSION']}",
    )
    return [pulumi, command, docker, up]


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


def test_bundle_holds_only_what_the_build_needs(tmp_path: Path, clones: list[Path]) -> None:
    """Each archive carries the licence and the build's paths, nothing else."""
    pins = versions_env()
    out = tmp_path / "bundle"
    subprocess.run(
        [str(ROOT / "toolchain" / "make-bundle"), str(out), *map(str, clones)],
        check=True,
        capture_output=True,
    )
    assert members(out / pins["DSS_SRC_CLI"]) == {"pulumi/LICENSE"}
    assert members(out / pins["DSS_SRC_DOCKER_UPSTREAM"]) == {
        "terraform-provider-docker/LICENSE",
        "terraform-provider-docker/go.mod",
        "terraform-provider-docker/go.sum",
        "terraform-provider-docker/internal/provider/p.go",
    }
    assert "pulumi-docker/sdk/big.txt" not in members(out / pins["DSS_SRC_DOCKER"])
    lang = members(out / pins["DSS_SRC_LANGUAGE_PYTHON"])
    assert "pulumi/sdk/python/dist/pulumi-resource-pulumi-python" in lang, lang
    assert "pulumi/pkg/huge.go" not in lang, lang


def test_build_accepts_the_bundle(tmp_path: Path, clones: list[Path]) -> None:
    """toolchain/build verifies the new bundle's checksums (then finds nothing built)."""
    out = tmp_path / "bundle"
    subprocess.run(
        [str(ROOT / "toolchain" / "make-bundle"), str(out), *map(str, clones)],
        check=True,
        capture_output=True,
    )
    proc = check(out, tmp_path / "cache")
    assert "checksum" not in proc.stderr and "no source bundle" not in proc.stderr, proc.stderr
    assert "FAILED pulumi-resource-docker: not built" in proc.stderr, proc.stderr
