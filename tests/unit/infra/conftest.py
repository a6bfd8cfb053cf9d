"""Fixtures for the infra unit tests: sample configs and the Pulumi mocks."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests.unit.infra.samples import Mocks, small_config, stack_config, write_ssh_home


@pytest.fixture(autouse=True)
def ssh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME with a known_hosts holding a key for every sample host: the program pins
    the ssh:// hosts' keys from `~/.ssh/known_hosts` (never the machine's own file)."""
    home = write_ssh_home(tmp_path_factory.mktemp("home"))
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def dev_raw() -> dict[str, Any]:
    """The dev stack's config without its encrypted secrets, as a fresh mutable copy."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    return raw


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
