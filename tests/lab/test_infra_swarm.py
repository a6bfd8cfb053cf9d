"""infra.providers.swarm against lab hosts: init, join, labels, adoption, drift, leave."""

from __future__ import annotations

from typing import Any

import pytest

from harness.configs import dev_stack_config
from infra.providers.swarm import SwarmInitProvider, SwarmNodeProvider
from tests.lab.conftest import Lab, client_of, init_props, node_props, outs

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def swarm(bare_lab: Lab) -> dict[str, Any]:
    """A swarm formed by the providers on the bare lab; left after the module."""
    cfg = dev_stack_config()
    init = SwarmInitProvider().create(init_props(cfg))
    nodes = {
        h.name: SwarmNodeProvider().create(node_props(cfg, h.name, init.id)) for h in cfg.hosts
    }
    return {"cfg": cfg, "init": init, "nodes": nodes}


def test_nodes_join_with_labels(swarm: dict[str, Any]) -> None:
    """Both hosts are Ready members; each carries its dss.* labels and role."""
    leader = client_of(swarm["cfg"], swarm["cfg"].leader)
    nodes = {n.attrs["Description"]["Hostname"]: n.attrs for n in leader.nodes.list()}
    assert set(nodes) == {"lab-h1", "lab-h2"}
    assert nodes["lab-h1"]["Spec"]["Labels"]["dss.role"] == "master"
    assert nodes["lab-h2"]["Spec"]["Labels"] == {
        "dss.role": "worker",
        "dss.gpus": "2",
        "dss.gpu-model": "fake-gpu",
    }
    assert nodes["lab-h2"]["Spec"]["Role"] == "worker"
    assert all(n["Status"]["State"] == "ready" for n in nodes.values())


def test_init_adopts_existing_swarm(swarm: dict[str, Any]) -> None:
    """Creating again on a leader that already manages the swarm adopts it, same id."""
    again = SwarmInitProvider().create(init_props(swarm["cfg"]))
    assert again.id == swarm["init"].id


def test_join_adopts_membership(swarm: dict[str, Any]) -> None:
    """Creating a node that is already a member keeps it (no leave, no re-join)."""
    again = SwarmNodeProvider().create(node_props(swarm["cfg"], "lab-h2", swarm["init"].id))
    assert again.id == swarm["nodes"]["lab-h2"].id


def test_refresh_without_drift_proposes_nothing(swarm: dict[str, Any]) -> None:
    """Reading an untouched node gives no diff against the program's inputs."""
    p = SwarmNodeProvider()
    want = node_props(swarm["cfg"], "lab-h2", swarm["init"].id)
    read = p.read(swarm["nodes"]["lab-h2"].id, outs(swarm["nodes"]["lab-h2"]))
    assert p.diff(read.id or "", outs(read), want).changes is False


def test_refresh_names_a_removed_label(swarm: dict[str, Any]) -> None:
    """A label removed by hand shows up as a labels diff on that node."""
    p = SwarmNodeProvider()
    want = node_props(swarm["cfg"], "lab-h2", swarm["init"].id)
    leader = client_of(swarm["cfg"], swarm["cfg"].leader)
    node = leader.nodes.get(swarm["nodes"]["lab-h2"].id)
    spec = node.attrs["Spec"]
    spec["Labels"] = {k: v for k, v in spec["Labels"].items() if k != "dss.gpus"}
    node.update(spec)
    read = p.read(node.id, outs(swarm["nodes"]["lab-h2"]))
    assert read.inputs is not None and "dss.gpus" not in read.inputs["labels"]
    assert p.diff(node.id, outs(read), want).changes is True
    p.update(node.id, outs(read), want)  # what `pulumi up` does: put the label back
    node.reload()
    assert node.attrs["Spec"]["Labels"]["dss.gpus"] == "2"


def test_delete_leaves_the_swarm(swarm: dict[str, Any]) -> None:
    """Deleting the worker node, then the swarm, leaves both engines outside any swarm."""
    cfg = swarm["cfg"]
    SwarmNodeProvider().delete(swarm["nodes"]["lab-h2"].id, outs(swarm["nodes"]["lab-h2"]))
    leader = client_of(cfg, cfg.leader)
    assert [n.attrs["Description"]["Hostname"] for n in leader.nodes.list()] == ["lab-h1"]
    SwarmInitProvider().delete(swarm["init"].id, outs(swarm["init"]))
    for h in cfg.hosts:
        state = client_of(cfg, h).info()["Swarm"]["LocalNodeState"]
        assert state == "inactive", f"{h.name} is still in a swarm ({state})"


def test_join_refuses_a_host_of_another_swarm(swarm: dict[str, Any]) -> None:
    """A host that already belongs to a different swarm is not silently adopted."""
    cfg = swarm["cfg"]
    h2 = next(h for h in cfg.hosts if h.name == "lab-h2")
    init = SwarmInitProvider().create(init_props(cfg))
    other = client_of(cfg, h2)
    other.swarm.init(advertise_addr=h2.address, listen_addr="0.0.0.0:2377")
    try:
        with pytest.raises(Exception, match="swarm join: lab-h2 is in another swarm"):
            SwarmNodeProvider().create(node_props(cfg, "lab-h2", init.id))
    finally:
        other.swarm.leave(force=True)
        SwarmInitProvider().delete(init.id, outs(init))
