"""harness.lab: the lab as tests and benchmarks reach it (no lab needed here)."""

from __future__ import annotations

import pytest
from dss_train.checkpoints import tag_for_step

from harness.lab import (
    LAB_ROOT,
    Resume,
    check_resumed_after_the_stop,
    docker_argv,
    host_index,
    resumes_in,
    run_log,
    shared,
    socket,
    stop_checkpoint_step,
)

pytestmark = pytest.mark.unit


def test_docker_argv_targets_the_hosts_own_socket() -> None:
    """`docker -H unix://<lab root>/h<i>/docker.sock`, as lab/config.py lays hosts out."""
    assert socket(3) == LAB_ROOT / "h3" / "docker.sock"
    assert docker_argv(3) == ["docker", "-H", f"unix://{LAB_ROOT}/h3/docker.sock"]


def test_host_index_reads_the_lab_name() -> None:
    """lab-h7 is host 7."""
    assert host_index("lab-h7") == 7


def test_run_logs_live_on_the_shared_data() -> None:
    """A run's logs are under the shared /data the lab stacks mount."""
    assert run_log("demo", "metrics.jsonl") == shared("logs", "demo", "metrics.jsonl")
    assert shared("logs") == LAB_ROOT / "shared" / "logs"


def test_resumes_are_read_from_rank_zeros_lines() -> None:
    """Each `resumed from <checkpoint>, next step N` line, in order, with the
    checkpoint's step read from the image's own folder name."""
    text = (
        "[dss-train] joined\n"
        f"[dss-train] resumed from /data/checkpoints/r/{tag_for_step(10)}, next step 11\n"
        "[rank1] noise\n"
        f"[dss-train] resumed from /data/checkpoints/r/{tag_for_step(45)}, next step 46\n"
    )
    found = resumes_in(text)
    assert [r.next_step for r in found] == [11, 46]
    assert [r.checkpoint_step for r in found] == [10, 45]


def test_a_checkpoint_folder_without_a_step_has_none() -> None:
    """A folder not named `step_<N>` gives no checkpoint step, not a wrong one."""
    assert Resume("/data/checkpoints/r/latest", 3).checkpoint_step is None
    assert resumes_in("no resume here") == []


STOP_LOG = (
    "10.0.1.2: step 80/100000 loss 1.2\n"
    "10.0.1.2: [dss-train] stopped by signal after step 80; checkpoint saved\n"
)


def test_the_stops_checkpoint_is_read_from_rank_zeros_line() -> None:
    """`stopped by signal after step N` gives N; a log without it, None."""
    assert stop_checkpoint_step(STOP_LOG) == 80
    assert stop_checkpoint_step("10.0.1.2: step 80/100000 loss 1.2\n") is None


def test_a_resume_after_the_stop_is_checked_against_its_step() -> None:
    """The step after the stop's checkpoint, past the last logged one, passes; a resume
    from an older checkpoint, or no stop line, fails naming the steps."""
    assert check_resumed_after_the_stop(STOP_LOG, 81, 66) == 80
    with pytest.raises(AssertionError, match="resumed at 76; the stop saved step 80"):
        check_resumed_after_the_stop(STOP_LOG, 76, 66)
    with pytest.raises(AssertionError, match="no 'stopped by signal' line"):
        check_resumed_after_the_stop("", 81, 66)
