"""The remedy a refusal names for a bad host (infra/render/remedy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.configs import dev_on_hosts, unprefixed
from infra.config import parse_stack_config
from infra.render.remedy import drain_remedies

pytestmark = pytest.mark.unit


def remedies(hosts: int, **last: Any) -> dict[str, str]:
    raw = unprefixed(dev_on_hosts(hosts, 2))
    raw["hosts"][-1].update(last)
    return drain_remedies(parse_stack_config(raw).hosts)


def test_with_a_spare_a_worker_is_drained_and_the_spare_named() -> None:
    """Three training hosts and a spare: drain the worker; the spare takes its place."""
    r = remedies(4, spare=True)
    assert r["lab-h2"] == (
        "set hosts[1].availability: drain (the spare lab-h4 takes its place), then `pulumi up`"
    )


def test_without_a_spare_a_worker_of_three_is_drained() -> None:
    """Three training hosts and no spare: drain it, the job runs on one host fewer."""
    assert "(the job runs on one host fewer: this stack has no spare)" in remedies(3)["lab-h3"]


def test_two_training_hosts_and_a_spare_turn_the_spare_into_a_training_host() -> None:
    """Two training hosts and a spare: drain the worker and make the spare a training host."""
    assert remedies(3, spare=True)["lab-h2"] == (
        "set hosts[1].availability: drain and set hosts[2].spare: false (the spare lab-h3 "
        "becomes a training host), then `pulumi up`"
    )


def test_each_remedy_is_a_config_the_rules_accept() -> None:
    """Applying a worker's remedy (where it is one change) gives a valid stack config."""
    raw = unprefixed(dev_on_hosts(3, 2))
    raw["hosts"][2]["spare"] = True
    raw["hosts"][1]["availability"] = "drain"
    raw["hosts"][2]["spare"] = False
    parse_stack_config(raw)


def test_the_last_worker_cannot_simply_be_drained() -> None:
    """Two hosts and no spare: add a host first (the config refuses zero workers)."""
    assert remedies(2)["lab-h2"].startswith("add a spare host (`spare: true`) or another worker")


def test_the_master_is_never_drained() -> None:
    """The master's remedy is to put another manager first."""
    assert remedies(3, spare=True)["lab-h1"].startswith("it is the master (hosts[0])")
