"""jobs.table: a released job's row, a row not read now, and a failure said in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult

from infra.config import ConfigError
from jobs import command
from jobs.table import RELEASED_WORDS, JobRow, failure_words, list_lines, released_row, unread_row
from tests.unit.jobs.conftest import spec

pytestmark = pytest.mark.unit


def test_a_released_finished_run_says_so_under_the_table(project: Path) -> None:
    """A finished run has no reason of its own; released, its line under the table
    says so, and its row keeps `finished` and its last step."""
    command.write_job(spec(project, extra={"released": {"state": "finished", "step": 100}}))
    cfg = command.job_settings("exp1")
    assert cfg.training.released is not None
    row = released_row("exp1", cfg, cfg.training.released)
    assert row.line().split()[2:4] == ["finished", "100"]
    assert list_lines([row])[-1] == f"exp1 finished: {RELEASED_WORDS}"


def test_failure_words_of_a_config_error_are_its_problems() -> None:
    err = ConfigError(["the cluster's GPUs could not be read: ssh 10.0.0.1: no answer", "x"])
    assert failure_words(err) == "the cluster's GPUs could not be read: ssh 10.0.0.1: no answer; x"


def test_failure_words_of_a_failed_up_are_its_error_lines() -> None:
    """The engine's error: its stderr's `error:` lines, not its whole output."""
    stderr = "warning: slow\nerror: update failed\nerror: lab-h2: no suitable node\n"
    err = auto.CommandError(CommandResult("Updating (exp1)\n...\n", stderr, 255))
    assert failure_words(err) == "error: update failed; error: lab-h2: no suitable node"


def test_failure_words_of_another_error_is_its_last_line() -> None:
    assert failure_words(OSError("connect\nssh 10.0.0.1: connection refused")) == (
        "ssh 10.0.0.1: connection refused"
    )


def test_a_row_not_read_now_is_unknown_and_keeps_what_was_last_read() -> None:
    """A job whose refresh failed: `unknown`, its reason why and its record's state and
    reason as last read; its step and GPUs as they were."""
    row = JobRow("exp1", "c1", "failed", 7, None, "2 x 1 cpu", "node 1 exited 1")
    unread = unread_row(row, "not read now (through manager lab-h1): error: no route")
    assert (unread.state, unread.step, unread.gpus, unread.unread) == (
        "unknown", 7, "2 x 1 cpu", True
    )  # fmt: skip
    assert unread.reason == (
        "not read now (through manager lab-h1): error: no route; as last read: failed: "
        "node 1 exited 1"
    )
