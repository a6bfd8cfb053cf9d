"""infra.admission: one pass's order, whole-or-nothing admission, the head's reservation,
backfill around it, never-placeable jobs and priority, and its reasons."""

from __future__ import annotations

import pytest

from infra.admission import (
    Admission,
    Reservation,
    Running,
    Verdict,
    Waiting,
    admit,
    queue_order,
    reserve_hosts,
)
from infra.placement import Ask, HostSlot, Placement

pytestmark = pytest.mark.unit

A, B = "fake-a", "fake-b"


def cluster() -> list[HostSlot]:
    """lab-h1..h4 with 8 GPUs of fake-a, lab-h5..h8 with 4 of fake-b (the plan's lab8)."""
    return [
        HostSlot(f"lab-h{i}", i - 1, 8 if i <= 4 else 4, A if i <= 4 else B) for i in range(1, 9)
    ]


def hosts(*numbers: int) -> tuple[str, ...]:
    return tuple(f"lab-h{i}" for i in numbers)


def job(
    name: str,
    nodes: int,
    gpus: int,
    model: str | None = A,
    *,
    priority: int = 0,
    since: float = 0.0,
    named: tuple[str, ...] = (),
) -> Waiting:
    return Waiting(Ask(name, nodes, gpus, model, named), priority, since)


def states(result: Admission) -> dict[str, str]:
    return {v.job: v.state for v in result.verdicts}


def test_order_is_priority_then_since_then_name() -> None:
    """Higher priority first; within one, the earlier first submit; then the name."""
    waiting = [
        job("c", 1, 1, since=1.0),
        job("b", 1, 1, since=1.0),
        job("a", 1, 1, since=2.0),
        job("z", 1, 1, priority=1, since=9.0),
    ]
    assert [w.name for w in queue_order(waiting)] == ["z", "b", "c", "a"]


def test_admits_in_order_while_gpus_last() -> None:
    """Jobs are admitted in order; their placements are the planner's best fit."""
    result = admit(cluster(), [], [job("b", 2, 8, since=2.0), job("a", 2, 8, since=1.0)])
    assert result.admitted == {
        "a": Placement(hosts(1, 2), "lab-h1"),
        "b": Placement(hosts(3, 4), "lab-h3"),
    }
    assert result.reservation is None


def test_whole_or_nothing() -> None:
    """A job that fits only in part gets nothing: no host of it is placed."""
    running = [Running("x", hosts(1, 2), 8)]
    result = admit(cluster(), running, [job("big", 3, 8)])
    assert result.admitted == {}
    assert states(result) == {"big": "reserved"}


def test_no_gpu_promised_twice_in_a_pass() -> None:
    """A job admitted earlier in the pass holds its GPUs for the jobs after it."""
    result = admit(cluster(), [], [job("a", 3, 8, since=1.0), job("b", 2, 8, since=2.0)])
    assert result.admitted == {"a": Placement(hosts(1, 2, 3), "lab-h1")}
    assert states(result)["b"] == "reserved"


def test_head_reserved_where_least_of_its_need_is_held() -> None:
    """H: the candidates that lack the least of the head's need, ties by hosts order."""
    free = {"lab-h1": 2, "lab-h2": 0, "lab-h3": 6, "lab-h4": 0}
    assert reserve_hosts(cluster(), free, Ask("x", 2, 8, A)) == hosts(1, 3)
    assert reserve_hosts(cluster(), {**free, "lab-h1": 0}, Ask("x", 2, 8, A)) == hosts(1, 3)


def test_down_hosts_are_reserved_last() -> None:
    """A host the leader does not report counts after every host that is up."""
    free = {"lab-h2": 0, "lab-h3": 0, "lab-h4": 0}
    assert reserve_hosts(cluster(), free, Ask("x", 2, 8, A)) == hosts(2, 3)


def test_named_head_is_reserved_on_its_hosts() -> None:
    """A head that names its hosts is reserved on them, as named."""
    running = [Running("x", hosts(1), 8)]
    result = admit(cluster(), running, [job("n", 2, 8, named=hosts(3, 1))])
    assert result.reservation == Reservation("n", hosts(3, 1), frozenset({"x"}))


def test_backfill_allowed_where_it_leaves_the_heads_need() -> None:
    """On a reserved host, a later job may take what the head's need leaves of the count;
    what was held there before the reservation does not count against that margin."""
    running = [Running("x", hosts(1), 8), Running("y", hosts(2, 3, 4), 2)]
    waiting = [job("head", 4, 4, since=1.0), job("small", 1, 4, since=2.0)]
    result = admit(cluster(), running, waiting)
    assert result.reservation == Reservation("head", hosts(1, 2, 3, 4), frozenset({"x", "y"}))
    assert result.admitted == {"small": Placement(hosts(2), "lab-h2")}


def test_backfill_refused_where_it_would_cut_into_the_head() -> None:
    """GPUs free on a reserved host but needed by the head go to no later job."""
    running = [Running("x", hosts(1), 8)]
    waiting = [job("head", 4, 4, since=1.0), job("wide", 1, 8, since=2.0)]
    result = admit(cluster(), running, waiting)
    assert result.admitted == {}
    assert result.verdict("wide") == Verdict(
        "wide",
        "queued",
        2,
        "needs 1 host(s) with 8 GPU(s) of model 'fake-a'; 3 host(s) free with 8 GPU(s) "
        "(lab-h2, lab-h3, lab-h4); "
        "ahead of it: head (reserved lab-h1, lab-h2, lab-h3, lab-h4)",
    )


def test_backfill_counts_jobs_admitted_after_the_reservation() -> None:
    """What jobs admitted after the reservation hold on H counts against the head's
    margin in later passes; what was held before it does not."""
    res = Reservation("head", hosts(1, 2, 3, 4), frozenset({"x"}))
    running = [Running("x", hosts(1), 8), Running("small", hosts(2), 4)]
    waiting = [job("head", 4, 4, since=1.0), job("more", 1, 4, since=2.0)]
    result = admit(cluster(), running, waiting, res)
    assert result.admitted == {"more": Placement(hosts(3), "lab-h3")}
    assert result.reservation == res


def test_other_model_passes_the_head() -> None:
    """A head of one model leaves the other model's hosts to the jobs behind it."""
    running = [Running("x", hosts(1), 8)]
    waiting = [job("head", 4, 8, since=1.0), job("b", 4, 4, B, since=2.0)]
    result = admit(cluster(), running, waiting)
    assert result.reservation is not None and result.reservation.hosts == hosts(1, 2, 3, 4)
    assert result.admitted == {"b": Placement(hosts(5, 6, 7, 8), "lab-h5")}


def test_never_placeable_job_is_refused_and_skipped() -> None:
    """A job the cluster can never hold is refused with the planner's reason and is no
    head: the job behind it is admitted, nothing is reserved."""
    result = admit(cluster(), [], [job("huge", 5, 8, since=1.0), job("ok", 1, 8, since=2.0)])
    assert result.reservation is None
    assert result.admitted == {"ok": Placement(hosts(1), "lab-h1")}
    verdict = result.verdict("huge")
    assert verdict.state == "refused" and verdict.position is None
    assert verdict.reason == (
        "training.nodes: job 'huge' needs 5 host(s) with 8 GPU(s) of model 'fake-a'; the "
        "cluster has 4 (lab-h1, lab-h2, lab-h3, lab-h4); allowed: at most 4 node(s)"
    )


def test_priority_makes_a_new_head() -> None:
    """A higher priority that does not fit becomes the head; the old head waits behind."""
    old = Reservation("old", hosts(1, 2, 3, 4), frozenset({"x"}))
    running = [Running("x", hosts(1, 5), 4)]
    waiting = [job("old", 4, 8, since=1.0), job("urgent", 4, 4, B, priority=1, since=5.0)]
    result = admit(cluster(), running, waiting, old)
    assert result.reservation == Reservation("urgent", hosts(5, 6, 7, 8), frozenset({"x"}))
    assert [(v.job, v.state, v.position) for v in result.verdicts] == [
        ("urgent", "reserved", 1),
        ("old", "queued", 2),
    ]


def test_higher_priority_that_fits_passes_the_head() -> None:
    """A higher priority is ahead of the head, so the reservation does not bind it."""
    old = Reservation("old", hosts(1, 2, 3, 4), frozenset({"x"}))
    running = [Running("x", hosts(1), 8)]
    waiting = [job("old", 4, 8, since=1.0), job("urgent", 1, 8, priority=1, since=5.0)]
    result = admit(cluster(), running, waiting, old)
    assert result.admitted == {"urgent": Placement(hosts(2), "lab-h2")}
    assert result.reservation == old


def test_reservation_is_kept_while_the_head_waits() -> None:
    """The same head keeps its hosts and the jobs it waits for from pass to pass."""
    res = Reservation("head", hosts(1, 2), frozenset({"x", "y"}))
    # lab-h3 and lab-h4 lack less of the need now, but moving would reset the wait.
    running = [Running("x", hosts(1), 8), Running("y", hosts(2), 8), Running("z", hosts(3, 4), 4)]
    result = admit(cluster(), running, [job("head", 2, 8)], res)
    assert result.reservation == res


def test_ended_jobs_leave_the_reservations_before() -> None:
    """A job that held GPUs before the reservation and ended is dropped from it, so a
    job of that name admitted later counts as after it."""
    res = Reservation("head", hosts(1, 2), frozenset({"x", "gone"}))
    running = [Running("x", hosts(1, 2, 3, 4), 8)]
    result = admit(cluster(), running, [job("head", 2, 8)], res)
    assert result.reservation == Reservation("head", hosts(1, 2), frozenset({"x"}))


def test_lost_reserved_host_is_planned_again() -> None:
    """A reserved host that is down no longer serves the head: its hosts are chosen
    afresh among the hosts up."""
    res = Reservation("head", hosts(1, 2), frozenset({"x"}))
    running = [Running("x", hosts(1, 2, 3), 8)]
    result = admit(cluster(), running, [job("head", 2, 8)], res, down={"lab-h2"})
    assert result.reservation == Reservation("head", hosts(1, 4), frozenset({"x"}))


def test_head_admitted_when_its_before_jobs_end() -> None:
    """Once the jobs held before the reservation end, the head fits whatever backfill
    came after it."""
    res = Reservation("head", hosts(1, 2, 3, 4), frozenset({"x"}))
    running = [Running("small", hosts(2), 4), Running("more", hosts(3), 4)]
    result = admit(cluster(), running, [job("head", 4, 4)], res)
    assert result.admitted == {"head": Placement(hosts(1, 2, 3, 4), "lab-h1")}
    assert result.reservation is None


def test_reasons_name_the_ask_the_free_hosts_and_the_head() -> None:
    """The head's reason names its reserved hosts and their holders; a job behind it
    names the head ahead of it; an admitted one its hosts."""
    running = [Running("x", hosts(1, 2), 8)]
    waiting = [
        job("exp-a", 4, 8, since=1.0),
        job("exp-b", 4, 4, None, since=2.0),
        job("exp-c", 4, 4, None, since=3.0),
    ]
    result = admit(cluster(), running, waiting)
    assert [(v.state, v.position, v.reason) for v in result.verdicts] == [
        (
            "reserved",
            1,
            "needs 4 host(s) with 8 GPU(s) of model 'fake-a'; 2 host(s) free with 8 GPU(s) "
            "(lab-h3, lab-h4); reserved lab-h1, lab-h2, lab-h3, lab-h4, held now by x",
        ),
        ("admitted", None, "admitted on lab-h5, lab-h6, lab-h7, lab-h8 (master lab-h5)"),
        (
            "queued",
            2,
            "needs 4 host(s) with 4 GPU(s); 2 host(s) free with 4 GPU(s) (lab-h3, lab-h4); "
            "ahead of it: exp-a (reserved lab-h1, lab-h2, lab-h3, lab-h4)",
        ),
    ]
