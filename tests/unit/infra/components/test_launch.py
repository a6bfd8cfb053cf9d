"""infra.components.launch: where a launch that follows its master connects."""

from __future__ import annotations

from typing import Any, cast

import pytest

from infra.components.launch import master_host, master_on_spare
from infra.config import parse_stack_config
from infra.render.launch import RosterEntry
from tests.unit.infra.samples import host, small_config

pytestmark = pytest.mark.unit


def _entry(node: str) -> RosterEntry:
    return cast(RosterEntry, {"service": "ds-master", "node": node, "address": "10.0.1.2"})


def test_the_launch_goes_where_the_roster_found_the_master() -> None:
    """follow_master: the master's task on the spare (an update placed it there) is
    where the launch connects; no entries, or a node not in the config, is the master."""
    raw: dict[str, Any] = small_config()
    raw["hosts"].append({**host(4), "spare": True})
    cfg = parse_stack_config(raw)
    spare = cfg.spares[0]
    assert master_host(cfg.hosts, cfg.master, [_entry(spare.name)]) is spare
    assert master_host(cfg.hosts, cfg.master, []) is cfg.master
    assert master_host(cfg.hosts, cfg.master, [_entry("not-a-host")]) is cfg.master


def test_a_master_on_a_spare_is_a_warning_naming_the_spare_and_the_way_home() -> None:
    """follow_master: the launch's master on a spare warns, naming the spare and the
    drain that moves it home; on its own host nothing is said."""
    raw: dict[str, Any] = small_config()
    raw["hosts"].append({**host(4), "spare": True})
    cfg = parse_stack_config(raw)
    spare = cfg.spares[0].name
    said = master_on_spare(cfg.hosts, [_entry(spare)])
    assert said is not None and f"runs on the spare {spare!r}" in said
    assert f"docker node update --availability drain {spare}, then active" in said
    assert master_on_spare(cfg.hosts, [_entry(cfg.master.name)]) is None
    assert master_on_spare(cfg.hosts, []) is None
