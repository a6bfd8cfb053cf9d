"""The pinned Pulumi toolchain that toolchain/build makes: versions, plugin
registration, and an engine run with no network at all."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.toolchain.test_build import project_patches, versions_env

pytestmark = pytest.mark.toolchain

Run = Callable[..., subprocess.CompletedProcess[str]]


def test_pulumi_version_is_pinned(
    tool: Callable[[str], Path], tc_env: dict[str, str], run: Run, pins: dict[str, str]
) -> None:
    """`pulumi version` prints the pinned CLI version."""
    res = run([str(tool("pulumi")), "version"], tc_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"v{pins['pulumi']}"


def test_language_host_reports_pinned_version(
    tool: Callable[[str], Path], tc_env: dict[str, str], run: Run, pins: dict[str, str]
) -> None:
    """`pulumi-language-python -version` prints the pinned SDK version."""
    res = run([str(tool("pulumi-language-python")), "-version"], tc_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().lstrip("v") == pins["pulumi"]


def test_python_exec_shim_next_to_language_host(tool: Callable[[str], Path]) -> None:
    """The exec shim the python host runs programs through sits next to it."""
    host = tool("pulumi-language-python")
    shim = host.parent / "pulumi-language-python-exec"
    assert os.access(shim, os.X_OK)


def test_dynamic_provider_plugin_on_path(tool: Callable[[str], Path]) -> None:
    """The plugin that runs dynamic providers sits next to the language host."""
    host = tool("pulumi-language-python")
    plugin = host.parent / "pulumi-resource-pulumi-python"
    assert os.access(plugin, os.X_OK), f"{plugin} missing: every dynamic resource would fail"


@pytest.mark.parametrize("name", ["command", "docker"])
def test_provider_reports_pinned_version(
    name: str,
    tool: Callable[[str], Path],
    pins: dict[str, str],
    plugin_info_version: Callable[[Path], str],
) -> None:
    """Each provider binary answers GetPluginInfo with its pinned version."""
    version = plugin_info_version(tool(f"pulumi-resource-{name}"))
    assert version.lstrip("v") == pins[name]


def test_plugin_ls_lists_pinned_providers(
    tool: Callable[[str], Path],
    tc_env: dict[str, str],
    pins: dict[str, str],
    plugin_list: Callable[..., list[dict[str, object]]],
) -> None:
    """`pulumi plugin ls` lists docker and command at their pinned versions."""
    listed = {(p["kind"], p["name"], p["version"]) for p in plugin_list(tool("pulumi"), tc_env)}
    assert ("resource", "docker", pins["docker"]) in listed
    assert ("resource", "command", pins["command"]) in listed
    others = {(k, n, v) for k, n, v in listed if n in ("docker", "command", "python")}
    assert others <= {
        ("resource", "docker", pins["docker"]),
        ("resource", "command", pins["command"]),
        ("language", "python", pins["pulumi"]),
    }, f"unpinned plugin versions installed: {others}"


def test_offline_plugin_ls(
    tool: Callable[[str], Path],
    tc_env: dict[str, str],
    pins: dict[str, str],
    offline: Callable[[list[str]], list[str]],
    plugin_list: Callable[..., list[dict[str, object]]],
    pulumi_home: Path,
) -> None:
    """With no network, `pulumi plugin ls` still lists the pinned providers."""
    env = {**tc_env, "PULUMI_HOME": str(pulumi_home)}
    listed = {(p["name"], p["version"]) for p in plugin_list(tool("pulumi"), env, offline)}
    assert ("docker", pins["docker"]) in listed
    assert ("command", pins["command"]) in listed


def test_offline_preview_downloads_nothing(
    tool: Callable[[str], Path],
    tc_env: dict[str, str],
    run: Run,
    offline: Callable[[list[str]], list[str]],
    offline_project: tuple[Path, dict[str, str]],
) -> None:
    """With no network, a docker+command preview succeeds and installs no plugin."""
    pulumi = str(tool("pulumi"))
    for name in ("pulumi-language-python", "pulumi-resource-docker", "pulumi-resource-command"):
        tool(name)
    proj, env = offline_project
    plugins = Path(tc_env["PULUMI_HOME"]) / "plugins"
    # Plugin folders only: the engine stamps `<plugin>.lastused` beside them on use.
    before = sorted(p.name for p in plugins.iterdir() if p.is_dir())

    init = run(offline([pulumi, "stack", "init", "offline", "--non-interactive"]), env, proj)
    assert init.returncode == 0, init.stdout + init.stderr
    prev = run(
        offline([pulumi, "preview", "--non-interactive", "--stack", "offline"]),
        env,
        proj,
        timeout=300,
    )
    out = prev.stdout + prev.stderr
    assert prev.returncode == 0, out
    assert "pulumi:providers:docker" in out, out
    assert "command:local:Command" in out, out
    assert "pulumi-python:dynamic:Resource" in out, out
    # Providers come from PULUMI_HOME (registered with --file), never from PATH.
    assert "from $PATH" not in out, out
    assert not re.search(r"[Dd]ownloading|plugin install", out), out
    assert sorted(p.name for p in plugins.iterdir() if p.is_dir()) == before, "a plugin was added"


def test_docker_stamp_names_the_project_patches(tool: Callable[[str], Path]) -> None:
    """The built docker provider's stamp names the patch level and every project patch
    it was built with (toolchain/patches/docker)."""
    binary = tool("pulumi-resource-docker")
    stamp = (binary.parent / ".stamp-pulumi-resource-docker").read_text().split()
    pins = versions_env()
    assert stamp[:2] == [pins["PULUMI_DOCKER_VERSION"], pins["DSS_DOCKER_PATCH_LEVEL"]], stamp
    assert stamp[3:] == ["patches:", *(p.name for p in project_patches())], stamp
