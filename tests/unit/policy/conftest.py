"""The real program's resources, as the policy pack sees them (inputs under Pulumi mocks)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.unit.infra import conftest as infra_conftest
from tests.unit.infra.samples import Mocks, stack_config
from tests.unit.infra.test_program import run_program

mocks = infra_conftest.mocks
"""The Pulumi mocks fixture of the infra tests, shared."""


def program_resources(
    stack: str, mocks: Mocks, tmp_path: Path, monitoring: bool = False
) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, name, inputs) of every resource a committed stack's program registers
    (with `monitoring`: also Prometheus and the node exporters)."""
    raw = copy.deepcopy(stack_config(stack))
    raw.pop("secrets", None)
    if monitoring:
        raw["monitoring"] = {"enabled": True}
    run_program(raw, tmp_path, {"wandb_api_key": "s3cr3t-value"})
    return [(r.typ, r.name, dict(r.inputs)) for r in mocks.resources]


@pytest.fixture(params=["dev", "prod", "dev+monitoring", "prod+monitoring"])
def real_resources(
    request: pytest.FixtureRequest, mocks: Mocks, tmp_path: Path
) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    """A committed stack's name and its program's resources (as committed, and with
    monitoring on)."""
    stack, _, extra = str(request.param).partition("+")
    return stack, program_resources(stack, mocks, tmp_path, monitoring=extra == "monitoring")
