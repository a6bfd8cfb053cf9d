"""ops.recover: reading a checkpoint's pending operations and what the swarm holds."""

from __future__ import annotations

from typing import Any

import pytest

from ops import recover
from ops.recover import Pending, Report

pytestmark = pytest.mark.unit

LEADER = {"url": "unix:///h1/docker.sock", "tls": None}


def _res(urn_name: str, type_: str, id_: str = "", **outputs: Any) -> dict[str, Any]:
    urn = f"urn:pulumi:s::deepspeed-swarm::x${type_}::{urn_name}"
    return {"urn": urn, "type": type_, "id": id_, "inputs": dict(outputs), "outputs": outputs}


DYNAMIC = "pulumi-python:dynamic:Resource"
CHECKPOINT: dict[str, Any] = {
    "resources": [
        _res("s-swarm-init", DYNAMIC, "swarm1", endpoint=LEADER, host="lab-h1"),
        _res(
            "s-swarm-node-lab-h2",
            DYNAMIC,
            "node2",
            node_id="node2",
            host="lab-h2",
            leader_endpoint=LEADER,
        ),
        _res("s-net-overlay", recover.NETWORK, "net1", name="ds-net-abc123"),
    ],
    "pending_operations": [
        {"type": "creating", "resource": _res("s-train-master", recover.SERVICE, name="ds-master")},
        {"type": "deleting", "resource": _res("s-secrets-key", recover.SECRET, "sec1", name="k-1")},
    ],
}


def test_pending_operations_name_resource_and_object() -> None:
    """Each pending operation carries its URN's name, its type and the object's name."""
    got = recover.pending_operations(CHECKPOINT)
    assert [(p.resource, p.operation, p.name) for p in got] == [
        ("s-train-master", "creating", "ds-master"),
        ("s-secrets-key", "deleting", "k-1"),
    ]


def test_leader_endpoint_from_node_resources() -> None:
    """The leader's endpoint is read from what the swarm resources recorded."""
    assert recover.leader_endpoint(CHECKPOINT) == LEADER


def test_leader_endpoint_from_swarm_init_alone() -> None:
    """Right after the swarm's init (no node resource yet) the init's endpoint serves."""
    only_init = {"resources": CHECKPOINT["resources"][:1]}
    assert recover.leader_endpoint(only_init) == LEADER


def test_no_leader_without_swarm_resources() -> None:
    """An empty stack (destroyed, or killed before the swarm) has no leader to ask."""
    assert recover.leader_endpoint({"resources": []}) is None


def test_known_ids_include_node_ids() -> None:
    """Object ids and swarm node ids of the state both count as known."""
    assert recover.known_ids(CHECKPOINT) == {"swarm1", "node2", "net1"}


def test_declared_hosts_cover_pending_resources() -> None:
    """Hosts named by resources, pending ones included, are the stack's to adopt."""
    pending_join = {
        "resources": [],
        "pending_operations": [
            {"type": "creating", "resource": _res("s-swarm-node-lab-h3", DYNAMIC, host="lab-h3")}
        ],
    }
    assert recover.declared_hosts(CHECKPOINT) == {"lab-h1", "lab-h2"}
    assert recover.declared_hosts(pending_join) == {"lab-h3"}


def test_nodes_to_adopt_are_settled_but_not_clean() -> None:
    """A node left for the next `up` to adopt is fine after a repair, not after an `up`."""
    report = Report(adopting=["lab-h1"])
    assert report.settled and not report.clean


def test_orphans_and_pending_are_neither() -> None:
    """An orphan or a pending operation needs an operator."""
    orphan = Report(orphans=[("secret", "stray", "id1")])
    pending = Report(pending=[Pending("urn::s-x", recover.SERVICE, "creating", "ds-x")])
    assert not orphan.settled and not pending.settled


def test_render_lists_every_finding() -> None:
    """The report names pending resources, orphans with ids, nodes to adopt and repairs."""
    report = Report(
        pending=[Pending("urn:pulumi:s::p::t::s-train-master", recover.SERVICE, "creating", "m")],
        orphans=[("secret", "stray", "id1")],
        adopting=["lab-h1"],
        done=["s-train-master: removed ds-master (svc1)"],
    )
    text = report.render("s")
    assert text.splitlines()[0] == (
        "stack s: 1 pending operation(s), 1 object(s) on the swarm unknown to the state"
    )
    needles = ("creating  s-train-master", "stray  (id1)", "node      lab-h1", "removed ds-master")
    for needle in needles:
        assert needle in text, f"report lacks {needle!r}:\n{text}"


class _Listing:
    """A docker-py collection: .list() of objects with name and id."""

    def __init__(self, *objects: Any) -> None:
        self.objects = list(objects)

    def list(self, **_filters: Any) -> list[Any]:
        return self.objects


def _obj(name: str, id_: str, **attrs: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(name=name, id=id_, attrs=attrs)


def test_swarm_configs_are_surveyed() -> None:
    """Swarm configs (Prometheus' config and rules) are listed with the other swarm objects,
    so a half-created one is found, and one the state does not know is an orphan."""
    from types import SimpleNamespace

    leader = SimpleNamespace(
        nodes=_Listing(),
        services=_Listing(_obj("ds-prometheus", "svc1")),
        secrets=_Listing(),
        configs=_Listing(_obj("ds-prometheus-config-0123456789ab", "cfg1")),
        networks=_Listing(),
    )
    assert recover.swarm_objects(leader) == [
        ("service", "ds-prometheus", "svc1"),
        ("config", "ds-prometheus-config-0123456789ab", "cfg1"),
    ]
    assert recover.KINDS["config"] == recover.CONFIG
    assert recover.REMOVABLE.index(recover.SERVICE) < recover.REMOVABLE.index(recover.CONFIG)


def test_a_jobs_service_is_no_orphan_of_its_cluster() -> None:
    """A job stack's service (labelled `dss.job`) is the job's business: the cluster's
    survey passes over it, and the job's survey over all but its own services."""
    from types import SimpleNamespace

    leader = SimpleNamespace(
        services=_Listing(
            _obj("exp-a-master", "s1", Spec={"Labels": {"dss.job": "exp-a"}}),
            _obj("exp-b-master", "s2", Spec={"Labels": {"dss.job": "exp-b"}}),
            _obj("ds-net-warmup", "s3", Spec={"Labels": {}}),
        )
    )
    jobs = recover.job_services(leader)
    assert jobs == {"s1": "exp-a", "s2": "exp-b"}
    # The cluster's survey: the jobs' services are elsewhere, its own are not.
    assert [recover.elsewhere("service", i, jobs, None) for i in ("s1", "s2", "s3")] == [
        True,
        True,
        False,
    ]
    # exp-a's survey: only its own service is its business.
    assert [recover.elsewhere("service", i, jobs, "exp-a") for i in ("s1", "s2", "s3")] == [
        False,
        True,
        True,
    ]
    assert recover.elsewhere("network", "n1", jobs, "exp-a")


def test_a_job_stack_is_told_by_its_cluster_ref() -> None:
    """A state holding a ClusterRef is a job stack's, named after its stack."""
    job = {"resources": [{"type": "deepspeed-swarm:clusterref:ClusterRef"}]}
    assert recover.stack_job(job, "exp-a") == "exp-a"
    assert recover.stack_job({"resources": [{"type": "pulumi:pulumi:Stack"}]}, "dev") is None


def test_the_leaders_ssh_settings_come_from_the_state() -> None:
    """scripts/recover reaches the leader with the stack's key, known_hosts and jump."""
    url = "ssh://root@h1"
    settings = {"address": "h1", "known_hosts": "~/kh", "mux": True}
    state = {
        "resources": [
            _res(
                "s-swarm-init", DYNAMIC, "swarm1", endpoint={"url": url}, ssh_hosts={url: settings}
            )
        ]
    }
    assert recover.leader_ssh(state, {"url": url}) == settings


def test_a_state_without_ssh_settings_gives_none() -> None:
    assert recover.leader_ssh(CHECKPOINT, LEADER) is None
