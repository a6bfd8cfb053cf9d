"""infra.components.idleservices: the warm-up's task count from the hosts' engines; the
spares' standby, one task each, and none without spares."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pulumi
import pytest
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from infra.components.idleservices import idle_services
from infra.config import parse_stack_config
from infra.layout import STANDBY_SERVICE, WARMUP_SERVICE
from infra.render.labels import SPARE_CONSTRAINT
from tests.unit.infra.samples import Mocks, stack_config

pytestmark = pytest.mark.unit


def _idle(engines: dict[str, str], with_spare: bool) -> tuple[Any, Any]:
    """idle_services on the lab8 config's active hosts, each host's engine the version
    `engines` names (28.5.2 where it names none), with its spare or with none."""
    raw = stack_config("lab8")
    raw.pop("secrets", None)
    cfg = parse_stack_config(raw)
    facts = SimpleNamespace(
        facts={
            h.name: SimpleNamespace(
                observed=pulumi.Output.from_input({"docker_version": engines.get(h.name, "28.5.2")})
            )
            for h in cfg.hosts
        }
    )
    made = idle_services(
        "unit",
        cfg.active_hosts,
        cfg.spares if with_spare else [],
        pulumi.Output.from_input(f"train@sha256:{'ab' * 32}"),
        pulumi.Output.from_input("overlay-id"),
        cast(Any, facts),
        pulumi.ResourceOptions(),
    )
    _sync_await(wait_for_rpcs())
    return made


def test_warmup_exists_without_tasks_on_current_engines(mocks: Mocks) -> None:
    """Current engines: the warm-up service is still made (the GPU services depend on
    it), with no task."""
    warmup, _ = _idle({}, with_spare=True)
    assert warmup is not None
    made = mocks.named("unit-net-warmup")
    assert made.inputs["name"] == WARMUP_SERVICE
    assert made.inputs["mode"]["replicated"]["replicas"] == 0


def test_one_old_engine_gives_every_active_host_a_warmup_task(mocks: Mocks) -> None:
    """One active host on 20.10: a warm-up task on each of lab8's 9 active hosts, its
    spare too (all or none)."""
    _idle({"lab-h3": "20.10.24+dfsg1"}, with_spare=True)
    assert mocks.named("unit-net-warmup").inputs["mode"]["replicated"]["replicas"] == 9


def test_spares_get_one_standby_task_each(mocks: Mocks) -> None:
    """lab8's one spare: `ds-standby`, one task, placed on spares only."""
    _, standby = _idle({}, with_spare=True)
    assert standby is not None
    made = mocks.named("unit-standby")
    assert made.inputs["name"] == STANDBY_SERVICE
    assert made.inputs["mode"]["replicated"]["replicas"] == 1
    assert made.inputs["taskSpec"]["placement"]["constraints"] == [SPARE_CONSTRAINT]


def test_no_spares_no_standby(mocks: Mocks) -> None:
    """Without spares there is no standby service at all."""
    _, standby = _idle({}, with_spare=False)
    assert standby is None
    assert not [r for r in mocks.resources if r.name.endswith("-standby")]
