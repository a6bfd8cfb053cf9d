"""Fixtures for the infra unit tests: sample configs and the Pulumi mocks."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.components import remote
from infra.sshspec import SshSpec
from lab.config import DEFAULT_ROOT
from tests.unit.infra.samples import Mocks, small_config, stack_config, write_ssh_home


@pytest.fixture(autouse=True)
def ssh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME with a known_hosts holding a key for every sample host: the program pins
    the ssh:// hosts' keys from `~/.ssh/known_hosts` (never the machine's own file)."""
    home = write_ssh_home(tmp_path_factory.mktemp("home"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(remote, "_known_hosts_text", _lab_known_hosts_at_home)
    return home


_read_known_hosts = remote._known_hosts_text


def _lab_known_hosts_at_home(spec: SshSpec) -> str:
    """The lab stacks' known_hosts (under the lab root, written by `lab up`) read from
    HOME's instead: a unit test never reads a file of the machine's own lab."""
    if spec.known_hosts_file and spec.known_hosts_file.startswith(f"{DEFAULT_ROOT}/"):
        spec = dataclasses.replace(spec, known_hosts_file="~/.ssh/known_hosts")
    return _read_known_hosts(spec)


@pytest.fixture
def dev_raw() -> dict[str, Any]:
    """The dev stack's config without its encrypted secrets, as a fresh mutable copy."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    return raw


@pytest.fixture
def dev_unix_raw(dev_raw: dict[str, Any]) -> dict[str, Any]:
    """The dev stack's config with its hosts' engines on the lab's unix sockets (the
    variant the lab keeps for tests that need it), not ssh://."""
    for i, h in enumerate(dev_raw["hosts"], start=1):
        h["docker_host"] = f"unix://{DEFAULT_ROOT}/h{i}/docker.sock"
    return dev_raw


@pytest.fixture
def raw() -> dict[str, Any]:
    """A small valid three-host config (1 manager, 8 GPUs each)."""
    return small_config()


@pytest.fixture
def mocks() -> Iterator[Mocks]:
    """Pulumi runtime in mock mode for one test, project deepspeed-swarm, stack `unit`."""
    m = Mocks()
    pulumi.runtime.set_mocks(m, project="deepspeed-swarm", stack="unit", preview=False)
    yield m
