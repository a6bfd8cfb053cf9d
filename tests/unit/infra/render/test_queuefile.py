"""infra.render.queuefile: the queue's metrics as a Prometheus text file."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infra.render.queuefile import METRICS, Waiter, file_name, queue_metrics

pytestmark = pytest.mark.unit


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each sample of the text as Prometheus' own parser reads it."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_waiting_jobs_by_state_each_wait_and_the_head() -> None:
    """Two jobs wait: counted by state, each one's wait since its first submit, the
    head's (position 1, though not the oldest) wait, and the pass's time."""
    waiters = [Waiter("exp-a", "queued", 2, 100.0), Waiter("exp-b", "reserved", 1, 400.0)]
    got = samples(queue_metrics("lab", waiters, 1000.0))
    assert got == {
        ("dss_queue_jobs", (("cluster", "lab"), ("state", "queued"))): 1.0,
        ("dss_queue_jobs", (("cluster", "lab"), ("state", "reserved"))): 1.0,
        ("dss_queue_wait_seconds", (("cluster", "lab"), ("run", "exp-a"), ("state", "queued"))):
            900.0,
        ("dss_queue_wait_seconds", (("cluster", "lab"), ("run", "exp-b"), ("state", "reserved"))):
            600.0,
        ("dss_queue_head_wait_seconds", (("cluster", "lab"),)): 600.0,
        ("dss_queue_pass_timestamp_seconds", (("cluster", "lab"),)): 1000.0,
    }  # fmt: skip


def test_an_empty_queue_says_zero() -> None:
    """No job waits: both states at 0, no wait series, the head's wait 0."""
    got = samples(queue_metrics("lab", [], 50.0))
    assert got[("dss_queue_jobs", (("cluster", "lab"), ("state", "queued")))] == 0.0
    assert got[("dss_queue_head_wait_seconds", (("cluster", "lab"),))] == 0.0
    assert not [k for k in got if k[0] == "dss_queue_wait_seconds"]


def test_the_head_is_the_oldest_where_none_is_placed() -> None:
    """Entries not placed by a pass yet: the oldest is taken as the head."""
    waiters = [Waiter("a", "queued", None, 300.0), Waiter("b", "queued", None, 200.0)]
    got = samples(queue_metrics("lab", waiters, 500.0))
    assert got[("dss_queue_head_wait_seconds", (("cluster", "lab"),))] == 300.0


def test_label_values_are_escaped() -> None:
    """A quote or backslash in a name cannot break the file."""
    got = samples(queue_metrics('c"1\\', [Waiter("j", "queued", 1, 0.0)], 1.0))
    assert got[("dss_queue_pass_timestamp_seconds", (("cluster", 'c"1\\'),))] == 1.0


def test_every_metric_is_described_once() -> None:
    """Each metric the module names has its HELP and TYPE."""
    text = queue_metrics("lab", [Waiter("j", "queued", 1, 0.0)], 1.0)
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families == dict.fromkeys(METRICS, "gauge")


def test_one_file_per_cluster() -> None:
    """Each cluster its own file, read by the textfile collector (`*.prom`)."""
    assert file_name("lab") == "dss-queue-lab.prom" != file_name("prod")
