"""infra.providers.swarm with three managers: a destroy deletes the nodes in parallel and the
swarm keeps its quorum until the leader leaves last (found by an 8-host benchmark)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from harness.configs import dev_stack_config, lab_hosts
from infra.config import parse_stack_config
from infra.providers.swarm import SwarmInitProvider, SwarmNodeProvider
from lab import config as c
from lab.down import down
from tests.lab.conftest import client_of, init_props, node_props, outs, start_lab

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def managers3() -> Iterator[Any]:
    """A 3-host lab, no swarm, and the dev config grown to 3 managers."""
    base = dev_stack_config().model_dump(mode="json", exclude={"secret_names"})
    base["hosts"] = lab_hosts(base["hosts"][0], 3, managers=3)
    cfg = parse_stack_config(base)
    try:
        start_lab(3, 2, c.DEFAULT_MTU, swarm=False)
        yield cfg
    finally:
        down(c.lab_root())


def test_parallel_delete_of_managers_keeps_quorum(managers3: Any) -> None:
    """Two of three managers deleted at once (as `pulumi destroy` does) are demoted
    first: the leader still answers, removes them, and then leaves the swarm."""
    cfg = managers3
    init = SwarmInitProvider().create(init_props(cfg))
    nodes = {
        h.name: SwarmNodeProvider().create(node_props(cfg, h.name, init.id)) for h in cfg.hosts
    }
    leader = client_of(cfg, cfg.leader)
    managers = [n for n in leader.nodes.list() if n.attrs["Spec"]["Role"] == "manager"]
    assert len(managers) == 3, "the swarm did not form with 3 managers"
    others = [nodes[h.name] for h in cfg.hosts if h is not cfg.leader]
    with ThreadPoolExecutor(len(others)) as pool:
        list(pool.map(lambda n: SwarmNodeProvider().delete(n.id, outs(n)), others))
    names = [n.attrs["Description"]["Hostname"] for n in leader.nodes.list()]
    assert names == ["lab-h1"], f"the leader lost its quorum or kept nodes: {names}"
    SwarmInitProvider().delete(init.id, outs(init))
    for h in cfg.hosts:
        state = client_of(cfg, h).info()["Swarm"]["LocalNodeState"]
        assert state == "inactive", f"{h.name} is still in a swarm ({state})"
