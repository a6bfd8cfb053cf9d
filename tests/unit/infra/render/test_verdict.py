"""infra.render.verdict: a training.command run's state from its exit records (the
project's train.py runs: tests/unit/infra/render/test_run.py)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.render.run import Probe, RunState, verdict
from infra.render.verdict import exception_of

pytestmark = pytest.mark.unit

NOW = 1_000_000
FAILED = {
    "rc": 1,
    "node": "master",
    "host": "10.0.1.3",
    "rank": None,
    "exception": "ValueError: bad batch at step 12",
}


def ended(**kw: Any) -> Probe:
    """The master's probe of a command run with nothing of it alive."""
    base: dict[str, Any] = dict(
        now=NOW, supervisor=False, procs=0, age_s=0, last_step=0, last_step_time=0.0,
        restarts=0, budget_spent=False, error="", checkpoint="",
    )  # fmt: skip
    base.update(kw)
    return Probe(**base)


def test_every_target_exited_zero_is_finished() -> None:
    """Every launch target's last record rc 0: finished, whatever the step count."""
    master = ended(exits={"0": {"rc": 0}, "1": {"rc": 0}}, ds_step=20, checkpoint="global_step20")
    assert verdict(master, [], 1000, 0, ["0", "1"]) == RunState(
        "finished", "", 20, "global_step20", 0
    )


def test_without_deepspeeds_step_lines_the_checkpoint_tag_is_the_step() -> None:
    """No `[Rank 0] step=` line (DeepSpeed's logger at WARNING) and no metrics file: the
    step is that of DeepSpeed's newest checkpoint tag."""
    master = ended(exits={"master": {"rc": 0}}, checkpoint="global_step40")
    assert verdict(master, [], 1000, 0, ["master"]) == RunState(
        "finished", "", 40, "global_step40", 0
    )


def test_a_metrics_file_step_wins_over_the_checkpoint_tag() -> None:
    """A script's own metrics file says more than its last checkpoint."""
    master = ended(exits={"master": {"rc": 0}}, last_step=47, checkpoint="global_step40")
    assert verdict(master, [], 1000, 0, ["master"]).step == 47


def test_a_non_zero_record_is_failed_naming_node_and_exception() -> None:
    """pdsh: failed, naming the host the traceback came from, the code and exception."""
    master = ended(exits={"master": FAILED}, ds_step=12)
    state = verdict(master, [], 1000, 0, ["master"])
    assert (state.state, state.reason, state.step) == (
        "failed",
        "node 10.0.1.3 exited 1: ValueError: bad batch at step 12",
        12,
    )


def test_torchrun_rank_is_named() -> None:
    """A per-node launch's record with torchrun's rank names node and rank."""
    record = {"rc": 1, "host": None, "rank": 3, "exception": "AssertionError: loss is nan"}
    state = verdict(ended(exits={"0": {"rc": 0}, "1": record}), [], 1000, 0, ["0", "1"])
    assert state.reason == "node 1, rank 3 exited 1: AssertionError: loss is nan"


def test_spent_budget_leads_the_reason() -> None:
    """A spent budget is said before the failing launch."""
    master = ended(exits={"master": FAILED}, budget_spent=True, restarts=3)
    assert verdict(master, [], 1000, 0, ["master"]).reason.startswith(
        "restart budget spent after 3 automatic restarts; node 10.0.1.3 exited 1"
    )


def test_a_target_without_a_record_is_failed() -> None:
    """A launch target that left no record (its supervisor killed) fails the run."""
    state = verdict(ended(exits={"0": {"rc": 0}}), [], 1000, 0, ["0", "1"])
    assert (state.state, state.reason) == (
        "failed",
        "no training process is left and no exit record from node(s) 1 (its supervisor was "
        "killed?)",
    )


def test_no_records_keep_todays_verdict() -> None:
    """A command run that wrote no record yet is judged as before (here: failed)."""
    state = verdict(ended(error="Killed"), [], 1000, 0, ["master"])
    assert state.reason == (
        "no training process is left; last step 0; the launcher log says: Killed"
    )


def test_alive_command_run_is_running_with_records_of_earlier_attempts() -> None:
    """A supervisor about to restart (an attempt's record rc 1) is running."""
    master = ended(supervisor=True, exits={"master": FAILED})
    assert verdict(master, [], 1000, 0, ["master"]).state == "running"


def test_command_without_stall_after_never_stalls() -> None:
    """stall_after 0 (not set for a command): live processes with no step are running."""
    master = ended(supervisor=True, procs=2, age_s=100_000)
    assert verdict(master, [], 1000, 0, ["master"]).state == "running"


def test_command_stall_from_deepspeed_steps() -> None:
    """With stall_after set, DeepSpeed's last step line at the log's time is the progress."""
    master = ended(supervisor=True, procs=2, age_s=5000, ds_step=30, log_time=NOW - 4000)
    state = verdict(master, [], 1000, 900, ["master"])
    assert (state.state, state.reason) == (
        "stalled",
        "no step for 4000s (stall_after 900s); last step 30",
    )


def test_the_earliest_failure_is_named() -> None:
    """Of two failed per-node launches, the one that ended first is the cause."""
    first = {"rc": 1, "time": 100, "exception": "ValueError: boom"}
    later = {"rc": 1, "time": 130, "exception": "RuntimeError: Connection closed by peer"}
    state = verdict(ended(exits={"0": later, "1": first}), [], 1000, 0, ["0", "1"])
    assert state.reason == "node 1 exited 1: ValueError: boom"


def test_exception_of_splits_a_command_failure_reason() -> None:
    """The reason command_end writes splits back into the program's words and the
    script's exception line (what the PR comment shows as code)."""
    record = {"rc": 1, "host": None, "rank": 3, "exception": "KeyError: 'a: b'"}
    reason = verdict(ended(exits={"1": record}), [], 1000, 0, ["1"]).reason
    assert exception_of(reason) == ("node 1, rank 3 exited 1", "KeyError: 'a: b'")


def test_exception_of_a_reason_without_one_is_the_reason() -> None:
    reason = "no training process is left; last step 4"
    assert exception_of(reason) == (reason, "")
