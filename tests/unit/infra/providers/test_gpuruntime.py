"""infra.providers.gpuruntime: reading the NVIDIA container toolkit, and which
version and mode ignore Swarm's GPU assignment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra.providers.gpuruntime import (
    TOOLKIT_SCRIPT,
    effective_mode,
    runtime_isolates,
    runtime_problem,
)

pytestmark = pytest.mark.unit

# What `nvidia-ctk config` prints for a 1.18 install (the packaged config.toml, trimmed):
# `mode` in the runtime's section, other `*mode` keys in its subsections.
CONFIG_1_18 = """#accept-nvidia-visible-devices-as-volume-mounts = false
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig.real"

[nvidia-container-runtime]
log-level = "info"
mode = "{mode}"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"
"""


def toolkit_facts(tmp_path: Path, version: str | None, config: str) -> str:
    """TOOLKIT_SCRIPT's output on a host whose nvidia-ctk reports `version` (None: its
    --version prints nothing) and prints `config` for `nvidia-ctk config`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "config.toml").write_text(config)
    said = f"NVIDIA Container Toolkit CLI version {version}\\ncommit: 9e88ed39" if version else ""
    ctk = bin_dir / "nvidia-ctk"
    ctk.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version) printf "{said}\\n" ;; config) cat {tmp_path}/config.toml ;; '
        "*) exit 2 ;; esac\n"
    )
    ctk.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", TOOLKIT_SCRIPT], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_script_reads_version_and_runtime_mode(tmp_path: Path) -> None:
    """The script prints the toolkit's version and the runtime section's `mode`."""
    out = toolkit_facts(tmp_path, "1.18.2", CONFIG_1_18.format(mode="legacy"))
    assert out == "toolkit_version=1.18.2\ntoolkit_mode=legacy\n"


def test_script_reports_an_unset_mode_as_empty(tmp_path: Path) -> None:
    """A config.toml without `mode` in the runtime's section gives an empty mode."""
    config = CONFIG_1_18.replace('mode = "{mode}"\n', "")
    assert toolkit_facts(tmp_path, "1.18.2", config) == "toolkit_version=1.18.2\ntoolkit_mode=\n"


def test_script_prints_nothing_without_a_version(tmp_path: Path) -> None:
    """An nvidia-ctk that reports no version gives no toolkit lines at all."""
    assert toolkit_facts(tmp_path, None, CONFIG_1_18.format(mode="legacy")) == ""


@pytest.mark.parametrize(
    ("version", "mode", "runs"),
    [
        ("1.17.9", "auto", "legacy"),
        ("1.17.9", "", "legacy"),
        ("1.18.0-rc.1", "auto", "jit-cdi"),
        ("1.18.2", "", "jit-cdi"),
        ("1.18.2", "legacy", "legacy"),
        ("1.19.0", "auto", "jit-cdi"),
    ],
)
def test_effective_mode(version: str, mode: str, runs: str) -> None:
    """`auto` (or no mode) resolves to legacy before 1.18 and to jit-cdi from 1.18."""
    assert effective_mode(version, mode) == runs


@pytest.mark.parametrize(
    ("version", "mode", "isolates"),
    [
        ("1.18.2", "auto", False),
        ("1.18.2", "", False),
        ("1.18.0", "jit-cdi", False),
        ("1.18.2", "cdi", False),
        ("1.19.0-rc.1", "auto", False),
        ("1.18.2", "legacy", True),
        ("1.17.9", "auto", True),
        ("1.19.0", "auto", True),
        ("1.20.0", "jit-cdi", True),
    ],
)
def test_runtime_isolates(version: str, mode: str, isolates: bool) -> None:
    """Before 1.19.0 only legacy mode reads swarm-resource; from 1.19.0 every mode does."""
    assert runtime_isolates({"toolkit_version": version, "toolkit_mode": mode}) is isolates


def test_no_toolkit_reported_is_no_verdict() -> None:
    """A host whose nvidia-ctk reported nothing is not refused on the toolkit's account."""
    assert runtime_isolates({"hostname": "gpu-01"}) is True


def test_problem_names_version_auto_mode_and_the_fix() -> None:
    """The refusal of 1.18 under auto says what auto became and what to set."""
    assert runtime_problem("gpu-01", {"toolkit_version": "1.18.2", "toolkit_mode": "auto"}) == (
        "host gpu-01: tasks would see every GPU: NVIDIA container toolkit 1.18.2 runs in mode "
        "'jit-cdi' (config.toml sets mode 'auto', which 1.18 resolves to jit-cdi), which "
        "ignores Swarm's GPU assignment (NVIDIA/nvidia-container-toolkit#1599); set "
        'mode = "legacy" under [nvidia-container-runtime] in '
        "/etc/nvidia-container-runtime/config.toml, or install toolkit >= 1.19.0"
    )


def test_problem_names_an_explicit_mode() -> None:
    """An explicit jit-cdi is named as set in config.toml."""
    said = runtime_problem("gpu-01", {"toolkit_version": "1.18.1", "toolkit_mode": "jit-cdi"})
    assert "toolkit 1.18.1 runs in mode 'jit-cdi' (as config.toml sets)" in said


def test_problem_names_an_unset_mode() -> None:
    """No mode in config.toml is named as the default, auto."""
    said = runtime_problem("gpu-01", {"toolkit_version": "1.18.2", "toolkit_mode": ""})
    assert (
        "(config.toml sets no mode (the default, 'auto'), which 1.18 resolves to jit-cdi)" in said
    )
