"""Fixtures for the infra unit tests: sample configs and the Pulumi mocks."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest

from lab.config import DEFAULT_ROOT
from tests.unit.infra.samples import Mocks, small_config, stack_config


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
