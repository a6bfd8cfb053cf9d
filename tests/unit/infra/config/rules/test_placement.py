"""infra.config.rules.placement: a job judged against the cluster's candidates, the
hosts it names, and the keys only a job has."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse_stack_config
from tests.unit.infra.config.checks import problems
from tests.unit.infra.samples import host, small_config

pytestmark = pytest.mark.unit


def job_raw(**training: Any) -> dict[str, Any]:
    """A job on gpu-01..03 (8 GPUs each, model 'A') and a spare gpu-09, with `training`."""
    raw = small_config()
    raw["hosts"].append({**host(9), "spare": True})
    for h in raw["hosts"]:
        h["gpus"]["model"] = "A"
    raw.update(kind="job", cluster="c1")
    raw["training"] = {"gpus_per_node": 8, "run_name": "exp1", **training}
    return raw


def test_job_the_cluster_can_never_hold_is_refused() -> None:
    """A job asking more hosts with its GPUs than the cluster has is refused, naming the
    job and the shortfall, once (not also per host or as a plain node count)."""
    raw = job_raw(nodes=3)
    raw["hosts"][2]["gpus"]["count"] = 4
    assert problems(raw) == [
        "training.nodes: job 'exp1' needs 3 host(s) with 8 GPU(s); the cluster has 2 "
        "(gpu-01, gpu-02); allowed: at most 2 node(s) or at most 4 GPU(s) per node"
    ]


def test_job_of_a_model_too_few_hosts_have_is_refused() -> None:
    """A model fewer than `nodes` hosts have is a shortfall of the job; a model enough
    hosts have is offered."""
    raw = job_raw(nodes=2, gpu_model="B")
    raw["hosts"][1]["gpus"]["model"] = "B"
    assert problems(raw) == [
        "training.nodes: job 'exp1' needs 2 host(s) with 8 GPU(s) of model 'B'; the cluster "
        "has 1 (gpu-02); allowed: at most 1 node(s) or another model (A: gpu-01, gpu-03)"
    ]


def test_job_is_judged_on_its_own_hosts_only() -> None:
    """A host with fewer GPUs that the job does not train on does not refuse it."""
    raw = job_raw(nodes=2)
    raw["hosts"][2]["gpus"]["count"] = 4
    assert [h.name for h in parse_stack_config(raw).training_hosts] == ["gpu-01", "gpu-02"]


def test_single_stack_still_judges_every_host() -> None:
    """Outside a job, a host with fewer GPUs refuses the stack as before."""
    raw = small_config()
    raw["training"]["nodes"] = 2
    raw["hosts"][2]["gpus"]["count"] = 4
    assert problems(raw) == [
        "training.gpus_per_node: 8 is more than host 'gpu-03' declares "
        "(hosts[2].gpus.count=4); allowed: 0..4"
    ]


def cluster_raw(gpus_per_node: int) -> dict[str, Any]:
    """A cluster stack of gpu-01, gpu-02 (8 GPUs) and gpu-03 (4), its jobs' default
    `gpus_per_node`."""
    raw = small_config()
    raw["hosts"][2]["gpus"]["count"] = 4
    raw["kind"] = "cluster"
    raw["training"]["gpus_per_node"] = gpus_per_node
    return raw


def test_cluster_of_hosts_with_different_counts_is_accepted() -> None:
    """A cluster stack runs no task: its default of 8 GPUs per node stands though a host
    has 4 (its jobs are placed where 8 are)."""
    cfg = parse_stack_config(cluster_raw(8))
    assert [h.gpus.count for h in cfg.hosts] == [8, 8, 4] and cfg.training.gpus_per_node == 8


def test_cluster_default_no_host_has_is_refused() -> None:
    """A default no training host can hold is refused, naming the most there is."""
    assert problems(cluster_raw(16)) == [
        "training.gpus_per_node: 16 (the default of the cluster's jobs) is more than any "
        "training host declares (the most: 8, on gpu-01, gpu-02); allowed: 0..8"
    ]


def test_named_hosts_are_accepted() -> None:
    """A job naming candidate hosts with placement and priority is valid."""
    cfg = parse_stack_config(job_raw(hosts=["gpu-02", "gpu-03"], placement="planned", priority=5))
    t = cfg.training
    assert (t.hosts, t.placement, t.priority) == (["gpu-02", "gpu-03"], "planned", 5)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("gpu-42", "is not a host of the cluster"),
        ("gpu-09", "is a spare (it carries a task only when Swarm moves one there)"),
    ],
)
def test_named_host_not_a_candidate_is_refused(name: str, why: str) -> None:
    """A named host that is not the cluster's, or a spare, is refused naming it."""
    assert problems(job_raw(hosts=["gpu-01", name])) == [
        f"training.hosts: job 'exp1' names {name!r}, which {why}; allowed: the cluster's "
        "hosts that can carry its tasks (gpu-01, gpu-02, gpu-03), each once"
    ]


def test_named_drained_host_is_refused() -> None:
    """A named host that is drained is refused naming it."""
    raw = job_raw(hosts=["gpu-01", "gpu-03"])
    raw["hosts"][2]["availability"] = "drain"
    assert problems(raw) == [
        "training.hosts: job 'exp1' names 'gpu-03', which is drained; allowed: the cluster's "
        "hosts that can carry its tasks (gpu-01, gpu-02), each once"
    ]


def test_named_host_with_too_few_gpus_is_refused_once() -> None:
    """A named host short of GPUs is refused naming it, not also by the GPU count rule."""
    raw = job_raw(hosts=["gpu-01", "gpu-03"])
    raw["hosts"][2]["gpus"]["count"] = 4
    assert problems(raw) == [
        "training.hosts: job 'exp1' names 'gpu-03', which has 4 GPU(s), fewer than 8; "
        "allowed: the cluster's hosts that can carry its tasks (gpu-01, gpu-02), each once"
    ]


def test_named_host_twice_is_refused() -> None:
    """A host named twice is refused."""
    assert problems(job_raw(hosts=["gpu-01", "gpu-01"])) == [
        "training.hosts: job 'exp1' names 'gpu-01', which is named twice; allowed: the "
        "cluster's hosts that can carry its tasks (gpu-01, gpu-02, gpu-03), each once"
    ]


def test_named_hosts_other_than_nodes_are_refused() -> None:
    """Named hosts of another number than `nodes` are refused naming both."""
    assert problems(job_raw(hosts=["gpu-01", "gpu-02"], nodes=3)) == [
        "training.hosts: job 'exp1' names 2 host(s) but training.nodes is 3; allowed: 3 "
        "host(s), or nodes unset"
    ]


def test_hosts_outside_a_job_are_refused() -> None:
    """`training.hosts` in a single stack is refused: only a job names its hosts."""
    raw = small_config()
    raw["training"]["hosts"] = ["gpu-01", "gpu-02"]
    assert problems(raw) == [
        "training.hosts: ['gpu-01', 'gpu-02'] in a stack of kind 'single'; allowed: only in a job "
        "stack (a single or cluster stack trains on its hosts in `hosts` order)"
    ]


def test_empty_hosts_are_refused() -> None:
    """An empty host list is refused."""
    assert problems(job_raw(hosts=[])) == [
        "training.hosts: []; allowed: one or more of the cluster's hosts, or unset"
    ]


def test_placement_without_hosts_is_refused() -> None:
    """`placement` says how `hosts` were chosen: without them it is refused."""
    assert problems(job_raw(placement="planned")) == [
        "training.placement: 'planned' without training.hosts; allowed: with "
        "training.hosts, or unset"
    ]


def test_queued_is_only_a_jobs() -> None:
    """`training.queued` outside a job stack is refused, naming the kind; in a job it is
    the queued form, with the revision it was submitted from."""
    raw = small_config()
    raw["training"] = {**raw.get("training", {}), "queued": {"revision": "r1"}}
    assert problems(raw) == [
        "training.queued: set in a stack of kind 'single'; allowed: only in a job stack "
        "(scripts/job submit writes it for a job that waits for GPUs)"
    ]
    cfg = parse_stack_config(job_raw(queued={"revision": "r1"}))
    assert cfg.queued and cfg.training.queued is not None
    assert cfg.training.queued.revision == "r1"
    assert not parse_stack_config(job_raw()).queued


def test_released_outside_a_job_is_refused() -> None:
    """`training.released` in a single stack is refused, naming the kind."""
    raw = small_config()
    raw["training"] = {**raw.get("training", {}), "released": {"state": "finished"}}
    assert problems(raw) == [
        "training.released: set in a stack of kind 'single'; allowed: only in a job stack "
        "(scripts/job queue CLUSTER --run writes it for a job whose run ended)"
    ]


def test_released_beside_queued_is_refused() -> None:
    """A job cannot both wait and have ended: the two marks together are refused."""
    raw = job_raw(queued={"revision": "r1"}, released={"state": "failed", "step": 3})
    assert problems(raw) == [
        "training.released: 'failed' beside training.queued; allowed: one of them (a "
        "released run ended, a queued job has not started)"
    ]


def test_released_job_is_the_released_form_with_its_verdict() -> None:
    """In a job, `released` is the released form, holding the run's verdict."""
    raw = job_raw(released={"state": "failed", "step": 3, "reason": "boom"})
    cfg = parse_stack_config(raw)
    assert cfg.released and not cfg.queued and cfg.training.released is not None
    assert cfg.training.released.model_dump() == {"state": "failed", "step": 3, "reason": "boom"}
    assert not parse_stack_config(job_raw()).released


def test_released_state_is_finished_or_failed() -> None:
    """A state the verdict does not end with (`running`) is refused, naming what is allowed."""
    with pytest.raises(ConfigError, match=r"training\.released\.state.*'finished' or 'failed'"):
        parse_stack_config(job_raw(released={"state": "running"}))
