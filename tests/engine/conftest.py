"""Real-engine fixtures: the lab, the pinned Pulumi CLI, and a throwaway stack.

Everything here is real: `pulumi` built by toolchain/build, the docker and command
plugins, dockerd per lab host, Swarm scheduling. Each fixture removes what it
made (stack, backend dir, lab), also when a test fails. The drivers themselves are
the harness's (harness/stack.py, harness/lab.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import ROOT, image_code
from harness.labup import running_lab
from harness.stack import Stack, project_env

# On PATH: the CLI, the language host and the plugin that runs dynamic providers.
# The docker and command providers are registered in PULUMI_HOME instead.
ENGINE_BINARIES = ("pulumi", "pulumi-language-python", "pulumi-resource-pulumi-python")
ENGINE_PLUGINS = ("docker", "command")

MakeStack = Callable[[str, dict[str, Any], dict[str, str]], Stack]
"""The `make_stack` fixture: (name, config, secret values) -> an initialised stack."""


@pytest.fixture(scope="session", autouse=True)
def engine() -> None:
    """The real engine needs the whole pinned toolchain; say exactly what is missing."""
    env = project_env()
    missing = [b for b in ENGINE_BINARIES if shutil.which(b, path=env["PATH"]) is None]
    if "pulumi" not in missing:
        listed = subprocess.run(
            ["pulumi", "plugin", "ls", "--json"], env=env, capture_output=True, text=True
        )
        names = {p["name"] for p in json.loads(listed.stdout or "[]") or []}
        missing += [f"plugin {p}" for p in ENGINE_PLUGINS if p not in names]
    if missing:
        msg = (
            f"the real Pulumi engine cannot run: {', '.join(missing)} missing "
            "(toolchain/build says why; toolchain/README.md)"
        )
        if os.environ.get("DSS_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def lab_of(hosts: int) -> contextlib.AbstractContextManager[dict[str, Any]]:
    """A lab of `hosts` hosts with 2 fake GPUs each (no swarm: the program forms it),
    down again afterwards whatever happens."""
    return running_lab(hosts, gpus=2)


@pytest.fixture(scope="module")
def lab() -> Iterator[dict[str, Any]]:
    """A 2-host lab with 2 fake GPUs each (no swarm: the program forms it)."""
    with lab_of(2) as status:
        yield status


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A code dir (`training.code.dir`): the image's own train.py and its package."""
    return image_code(tmp_path_factory.mktemp("code"))


@pytest.fixture(scope="module")
def make_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeStack]:
    """Factory for throwaway stacks; every stack made is removed with its state.

    Not destroyed first: every module that makes stacks (here and in the acceptance
    suite) deploys them on a lab of its own that its fixture takes down after its last
    test, and `lab down` removes everything a stack made on the hosts. A destroy of each
    stack cost 25-90 s a module in the test command, for nothing; `pulumi destroy` itself
    is what test_stack.py's `test_destroy_stops_training_and_cleans_hosts` and
    test_faults.py's interrupted destroy test."""
    made: list[Stack] = []

    def make(name: str, config: dict[str, Any], secret_values: dict[str, str]) -> Stack:
        assert name.startswith("test-"), "test stacks are named test-* (git-ignored files)"
        stack = Stack(name, tmp_path_factory.mktemp(name), config)
        made.append(stack)
        stack.init(secret_values)
        return stack

    yield make
    for stack in reversed(made):
        stack.forget()
        shutil.rmtree(stack.workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def monitoring_images() -> None:
    """The bases a stack with monitoring builds on: the training image's (and its
    wheelhouse, which holds prometheus-client) and the monitoring base (debootstrap of
    Debian's Prometheus; ~5 min the first time, then cached by content)."""
    for script in ("images/prepare", "monitoring/build-base"):
        proc = subprocess.run(
            [str(ROOT / script)], cwd=ROOT, capture_output=True, text=True, timeout=1800
        )
        assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
