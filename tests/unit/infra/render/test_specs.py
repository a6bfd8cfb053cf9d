"""infra.render.specs: Swarm spec fields stated the way Swarm reads them back."""

from __future__ import annotations

import pytest

from infra.render import specs

pytestmark = pytest.mark.unit


def test_restart_policy_states_every_field_in_go_spelling() -> None:
    """All four fields, durations as Go prints them (a partial policy is a perpetual diff)."""
    rp = specs.restart_policy("any", "60s", max_attempts=0, window="0s")
    assert (rp.condition, rp.delay, rp.max_attempts, rp.window) == ("any", "1m", 0, "0s")


def test_placement_names_the_images_platform() -> None:
    """Every placement names the platform the images are built for, constraints or not."""
    for p in (specs.placement(), specs.placement(["node.labels.dss.role==master"], 1)):
        assert p.platforms == specs.PLATFORMS, p
    assert specs.BUILD_PLATFORM == "linux/amd64"


def test_host_port_is_published_on_the_task_host_only() -> None:
    """A published port binds where the task runs (host mode), not on the routing mesh."""
    port = specs.host_port(8888, 8899)
    assert (port.publish_mode, port.protocol, port.target_port, port.published_port) == (
        "host",
        "tcp",
        8888,
        8899,
    )


def test_dnsrr_without_ports_sends_none() -> None:
    """No ports leaves the field out; an empty list would be a changed input."""
    assert specs.dnsrr().ports is None and specs.dnsrr().mode == "dnsrr"
