"""infra.placement: the planner's tables (best fit, ties, model, spares, never or not
now, named hosts) and its messages."""

from __future__ import annotations

import pytest

from infra.placement import Ask, HostSlot, Placement, Shortfall, candidates, never, plan

pytestmark = pytest.mark.unit


def lab8() -> list[HostSlot]:
    """The plan's lab8: lab-h1..h4 8 x fake-a, lab-h5..h8 4 x fake-b, lab-h9 a spare."""
    hosts = [
        HostSlot(f"lab-h{i}", i - 1, 8 if i <= 4 else 4, "fake-a" if i <= 4 else "fake-b")
        for i in range(1, 9)
    ]
    return [*hosts, HostSlot("lab-h9", 8, 8, "fake-a", spare=True)]


def all_free(hosts: list[HostSlot]) -> dict[str, int]:
    return {h.name: h.gpus for h in hosts}


def placed(result: Placement | Shortfall) -> tuple[str, ...]:
    assert isinstance(result, Placement), f"no placement: {result}"
    return result.hosts


@pytest.mark.parametrize(
    ("free", "ask", "want"),
    [
        # An empty cluster: the 4-GPU hosts leave nothing free, the 8-GPU ones stay whole.
        ({}, Ask("a", 4, 4), ("lab-h5", "lab-h6", "lab-h7", "lab-h8")),
        # A half-used 8-GPU host and an empty 4-GPU one both leave 0: the first in order.
        ({"lab-h1": 4}, Ask("a", 1, 4), ("lab-h1",)),
        # The fullest hosts that still fit win over emptier ones.
        ({"lab-h2": 2, "lab-h3": 6}, Ask("a", 1, 2), ("lab-h2",)),
        ({"lab-h3": 6, "lab-h5": 4}, Ask("a", 2, 4), ("lab-h5", "lab-h6")),
    ],
)
def test_best_fit_leaves_fewest_gpus_free(
    free: dict[str, int], ask: Ask, want: tuple[str, ...]
) -> None:
    """The chosen hosts leave the fewest GPUs free, so whole hosts stay whole."""
    hosts = lab8()
    assert placed(plan(hosts, {**all_free(hosts), **free}, ask)) == want


def test_ties_go_by_hosts_order_master_first() -> None:
    """Hosts that leave as much free are taken in `hosts` order, the first the master."""
    hosts = [HostSlot(f"h{i}", i, 8) for i in (3, 1, 2)]  # listed out of order
    result = plan(hosts, all_free(hosts), Ask("a", 2, 8))
    assert result == Placement(("h1", "h2"), "h1")


def test_chosen_hosts_are_in_hosts_order() -> None:
    """The fit picks the hosts; the placement lists them in `hosts` order, master first."""
    hosts = lab8()
    result = plan(hosts, {**all_free(hosts), "lab-h4": 4}, Ask("a", 2, 4))
    assert result == Placement(("lab-h4", "lab-h5"), "lab-h4")


def test_model_filter_keeps_to_that_model() -> None:
    """A job asking for a model lands only on hosts of it."""
    hosts = lab8()
    assert placed(plan(hosts, all_free(hosts), Ask("b", 4, 4, "fake-a"))) == (
        "lab-h1",
        "lab-h2",
        "lab-h3",
        "lab-h4",
    )


def test_spares_and_drained_hosts_are_no_candidates() -> None:
    """A spare and a drained host are never chosen, however free."""
    hosts = [
        HostSlot("h1", 0, 8, spare=True),
        HostSlot("h2", 1, 8, active=False),
        HostSlot("h3", 2, 8),
    ]
    assert [h.name for h in candidates(hosts, Ask("a", 1, 8))] == ["h3"]


def test_hosts_with_too_few_gpus_are_no_candidates() -> None:
    """A host with fewer GPUs than a node's ask is no candidate."""
    assert [h.name for h in candidates(lab8(), Ask("a", 1, 8))] == [
        f"lab-h{i}" for i in (1, 2, 3, 4)
    ]


def test_never_names_the_job_and_the_shortfall() -> None:
    """Fewer candidates than nodes: never, naming the job, the ask, the hosts it has and
    what the cluster could hold instead."""
    hosts = [h for h in lab8() if h.name not in ("lab-h3", "lab-h4")]
    result = plan(hosts, all_free(hosts), Ask("exp-c", 4, 8, "fake-a"))
    assert result == Shortfall(
        "never",
        "training.nodes: job 'exp-c' needs 4 host(s) with 8 GPU(s) of model 'fake-a'; the "
        "cluster has 2 (lab-h1, lab-h2); allowed: at most 2 node(s)",
    )


def test_never_offers_another_model_and_fewer_gpus() -> None:
    """The message offers fewer GPUs per node, or a model with enough hosts."""
    hosts = [h for h in lab8() if h.name not in ("lab-h3", "lab-h4")]
    shortfall = never(hosts, Ask("exp-c", 4, 8))
    assert shortfall is not None and shortfall.message == (
        "training.nodes: job 'exp-c' needs 4 host(s) with 8 GPU(s); the cluster has 2 "
        "(lab-h1, lab-h2); allowed: at most 2 node(s) or at most 4 GPU(s) per node"
    )
    shortfall = never(hosts, Ask("exp-d", 4, 4, "fake-a"))
    assert shortfall is not None and shortfall.message.endswith(
        "allowed: at most 2 node(s) or another model (fake-b: lab-h5, lab-h6, lab-h7, lab-h8)"
    )


def test_never_with_no_candidate_at_all() -> None:
    """No host can carry a task and nothing smaller would do: the cluster has none."""
    shortfall = never(lab8(), Ask("big", 1, 16, "fake-z"))
    assert shortfall is not None and shortfall.message == (
        "training.nodes: job 'big' needs 1 host(s) with 16 GPU(s) of model 'fake-z'; the "
        "cluster has none; "
        "allowed: a cluster with such hosts"
    )


def test_not_now_when_too_few_are_free() -> None:
    """Enough candidates but too few with the GPUs free now: not now, naming what is free."""
    hosts = lab8()
    free = {**all_free(hosts), "lab-h3": 0, "lab-h4": 4}
    result = plan(hosts, free, Ask("exp-c", 4, 8, "fake-a"))
    assert result == Shortfall(
        "not_now",
        "training.nodes: job 'exp-c' needs 4 host(s) with 8 GPU(s) of model 'fake-a'; the "
        "cluster has 2 (lab-h1: 8 of 8, lab-h2: 8 of 8) free now; allowed: at most the GPUs "
        "free now (scripts/job gpus), or wait until a job that holds them ends",
    )
    assert not result.never


def test_host_missing_from_free_is_not_available() -> None:
    """A host the leader does not report (down) is not chosen now."""
    hosts = [HostSlot("h1", 0, 8), HostSlot("h2", 1, 8)]
    result = plan(hosts, {"h1": 8}, Ask("a", 2, 8))
    assert isinstance(result, Shortfall) and result.kind == "not_now"


def test_cpu_ask_fits_any_active_host() -> None:
    """An ask of 0 GPUs per node fits every active, non-spare host."""
    hosts = [HostSlot("h1", 0, 0), HostSlot("h2", 1, 0)]
    assert plan(hosts, {"h1": 0, "h2": 0}, Ask("cpu", 2, 0)) == Placement(("h1", "h2"), "h1")


def test_named_hosts_are_kept_in_their_order() -> None:
    """Named hosts that are free are the placement as named, the first the master."""
    hosts = lab8()
    result = plan(hosts, all_free(hosts), Ask("n", 2, 4, hosts=("lab-h6", "lab-h2")))
    assert result == Placement(("lab-h6", "lab-h2"), "lab-h6")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("lab-h42", "is not a host of the cluster"),
        ("lab-h9", "is a spare (it carries a task only when Swarm moves one there)"),
        ("lab-h5", "has 4 GPU(s), fewer than 8"),
    ],
)
def test_named_host_that_cannot_carry_is_never(name: str, why: str) -> None:
    """A named host that is not a cluster host, a spare or too small is refused by name."""
    hosts = lab8()
    result = plan(hosts, all_free(hosts), Ask("n", 1, 8, hosts=(name,)))
    assert result == Shortfall(
        "never",
        f"training.hosts: job 'n' names {name!r}, which {why}; allowed: the cluster's hosts "
        "that can carry its tasks (lab-h1, lab-h2, lab-h3, lab-h4), each once",
    )


def test_named_host_of_another_model_is_never() -> None:
    """A named host of another model than the job asks for is refused by name."""
    hosts = lab8()
    result = plan(hosts, all_free(hosts), Ask("n", 1, 4, "fake-a", hosts=("lab-h5",)))
    assert isinstance(result, Shortfall) and result.never
    assert "names 'lab-h5', which has GPU model 'fake-b', not 'fake-a'" in result.message


def test_named_hosts_not_free_are_not_now() -> None:
    """Named hosts without the GPUs free now: not now, naming the host short."""
    hosts = lab8()
    free = {**all_free(hosts), "lab-h2": 2}
    result = plan(hosts, free, Ask("n", 2, 4, hosts=("lab-h1", "lab-h2")))
    assert result == Shortfall(
        "not_now",
        "training.hosts: job 'n' needs 4 GPU(s) free on each of lab-h1, lab-h2; lab-h2 has 2 "
        "free; allowed: at most the GPUs free now (scripts/job gpus), or wait until a job "
        "that holds them ends",
    )


def test_named_hosts_count_must_be_nodes() -> None:
    """Named hosts of another number than `nodes` are refused, naming both."""
    hosts = lab8()
    result = plan(hosts, all_free(hosts), Ask("n", 3, 4, hosts=("lab-h1", "lab-h2")))
    assert result == Shortfall(
        "never",
        "training.hosts: job 'n' names 2 host(s) but training.nodes is 3; allowed: 3 host(s), "
        "or nodes unset",
    )
