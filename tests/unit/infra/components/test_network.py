"""infra.components.network: driver options and IPAM stated as Docker reads them back."""

from __future__ import annotations

import pytest

from infra.components.network import (
    VNI_END,
    VNI_FLOOR,
    ipam,
    network_name,
    network_options,
    vxlan_id,
)
from infra.config import Network

pytestmark = pytest.mark.unit


def test_vni_is_stable_and_in_the_high_range() -> None:
    """The same network in the same stack always asks for the same VNI, above Docker's own."""
    net = Network()
    assert vxlan_id(net, "p/dev") == vxlan_id(Network(), "p/dev")
    assert VNI_FLOOR <= vxlan_id(net, "p/dev") <= VNI_END


@pytest.mark.parametrize(
    "change", [{"mtu": 1500}, {"encrypted": True}, {"subnet": "10.50.0.0/16"}, {"name": "x"}]
)
def test_vni_changes_with_a_replacement(change: dict[str, object]) -> None:
    """A change that replaces the network gives it a new VNI (old and new coexist)."""
    assert vxlan_id(Network(), "p/dev") != vxlan_id(Network.model_validate(change), "p/dev")


def test_vni_differs_per_stack() -> None:
    """Two stacks' networks do not ask for the same VNI."""
    assert vxlan_id(Network(), "p/dev") != vxlan_id(Network(), "p/prod")


def test_options_carry_mtu_and_vni() -> None:
    """Options hold exactly what Docker reports for an overlay: MTU and VNI."""
    opts = network_options(Network(), "p/dev")
    assert set(opts) == {
        "com.docker.network.driver.mtu",
        "com.docker.network.driver.overlay.vxlanid_list",
    }


def test_ipam_states_the_gateway_docker_picks() -> None:
    """With a subnet, the gateway is its first address (what Docker fills in)."""
    cfgs = ipam(Network(subnet="10.50.0.0/16"))
    assert cfgs is not None and len(cfgs) == 1
    assert (cfgs[0].subnet, cfgs[0].gateway) == ("10.50.0.0/16", "10.50.0.1")
    assert ipam(Network()) is None


def test_name_changes_with_a_replacement() -> None:
    """The network's name carries its VNI, so a replacement can be created first."""
    dev = network_name(Network(), "p/dev")
    assert dev == f"ds-net-{vxlan_id(Network(), 'p/dev'):06x}"
    assert dev != network_name(Network(mtu=1500), "p/dev")
