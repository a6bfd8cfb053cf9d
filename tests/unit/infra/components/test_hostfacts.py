"""infra.components.hostfacts: which facts the config promises per host."""

from __future__ import annotations

import pytest

from infra.components.hostfacts import expected_facts
from infra.config import parse_stack_config
from infra.providers.health import HEALTH_KEYS
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit


def test_isolation_required_expects_an_isolating_toolkit() -> None:
    """Where GPU isolation is required (prod), GPU hosts expect the toolkit to isolate."""
    cfg = parse_stack_config(stack_config("prod"), {"secrets"})
    host = next(h for h in cfg.hosts if h.gpus.count)
    exp = expected_facts(cfg, host)
    assert exp["gpu_isolation"] is True and exp["gpu_runtime_isolates"] is True


def test_isolation_off_expects_no_toolkit_fact() -> None:
    """Where isolation is off (dev: fake GPUs), no toolkit fact is expected (the GPU
    health facts are, as on every GPU host)."""
    cfg = parse_stack_config(stack_config("dev"), {"secrets"})
    assert [sorted(expected_facts(cfg, h)) for h in cfg.hosts] == [
        ["driver_meets_minimum", "gpu_count", *sorted(HEALTH_KEYS), "hostname", "nic_mtu"]
    ] * 2
