"""infra.components.hostfacts: which facts the config promises per host."""

from __future__ import annotations

import pytest

from infra.components.hostfacts import expected_facts, facts_props, health_props
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


def test_nic_limits_expect_a_healthy_nic_on_active_hosts() -> None:
    """preflight.nic's limits (prod sets both) expect the speed met and no link errors on
    every active host, and give the facts the limits and the remedy."""
    cfg = parse_stack_config(stack_config("prod"), {"secrets"})
    host = cfg.hosts[0]
    exp = expected_facts(cfg, host)
    assert exp["nic_speed_meets_minimum"] is True and exp["nic_link_errors"] == {}
    props = health_props(cfg, host, "drain it")
    assert props["nic_health"] == {"min_speed_Mbps": 100000, "max_errors": 0}
    assert props["remedy"] == "drain it"


def test_no_nic_limits_no_nic_facts() -> None:
    """Without preflight.nic (dev) no NIC fact is expected and no limit is passed."""
    cfg = parse_stack_config(stack_config("dev"), {"secrets"})
    for host in cfg.hosts:
        assert not {"nic_speed_meets_minimum", "nic_link_errors"} & set(expected_facts(cfg, host))
        assert "nic_health" not in health_props(cfg, host, "")


def test_a_drained_host_expects_no_nic_health() -> None:
    """A drained host carries no training: its NIC is read, not judged."""
    raw = stack_config("prod")
    raw["hosts"][1]["availability"] = "drain"
    cfg = parse_stack_config(raw, {"secrets"})
    assert "nic_link_errors" not in expected_facts(cfg, cfg.hosts[1])
    assert "nic_link_errors" in expected_facts(cfg, cfg.hosts[0])


def test_dcgm_level_expects_a_passing_diagnostic_on_gpu_hosts() -> None:
    """preflight.dcgm_diag_level (prod: 1) expects no failed DCGM test and passes the level."""
    cfg = parse_stack_config(stack_config("prod"), {"secrets"})
    host = cfg.hosts[0]
    assert expected_facts(cfg, host)["dcgm_diag_failures"] == []
    assert health_props(cfg, host, "")["dcgm_level"] == 1
    dev = parse_stack_config(stack_config("dev"), {"secrets"})
    assert "dcgm_diag_failures" not in expected_facts(dev, dev.hosts[0])


def test_host_data_plane_expects_quick_peer_lookups_on_active_hosts() -> None:
    """On the host data plane (prod) an active host looks up every other host of the
    stack, drained ones too; a drained host is not judged."""
    raw = stack_config("prod")
    raw["hosts"][1]["availability"] = "drain"
    cfg = parse_stack_config(raw, {"secrets"})
    first, drained = cfg.hosts[0], cfg.hosts[1]
    props = facts_props(cfg, first, "")
    assert props["peers"] == {h.address: h.name for h in cfg.hosts[1:]}
    assert props["expected"]["slow_peer_lookups"] == []
    assert "peers" not in facts_props(cfg, drained, "")
    assert "slow_peer_lookups" not in expected_facts(cfg, drained)


def test_overlay_expects_no_peer_lookups() -> None:
    """On the overlay (dev) Docker's DNS names the tasks: no peer fact, no peers input."""
    cfg = parse_stack_config(stack_config("dev"), {"secrets"})
    assert all("peers" not in facts_props(cfg, h, "") for h in cfg.hosts)
