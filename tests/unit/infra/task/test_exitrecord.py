"""infra.task.exitrecord: an attempt's exit record from the launchers' real log shapes
(fixtures/: DeepSpeed 0.17.6 under pdsh and no_ssh, a torchrun failure summary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.task.exitrecord import first_traceback, main, record, root_cause_rank

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_pdsh_failure_names_the_node_that_raised_first() -> None:
    """pdsh: the first traceback's host and exception, not the peer's broken collective."""
    r = record(lines("ds_pdsh_failure.log"), 1, "master", 1700.5)
    assert (r["rc"], r["time"], r["node"], r["host"], r["rank"], r["exception"]) == (
        1,
        1700,
        "master",
        "10.0.1.3",
        None,
        "ValueError: bad batch at step 12",
    )


def test_pdsh_traceback_skips_other_nodes_lines() -> None:
    """Another node's line inside the traceback is left out; the prefix is removed."""
    _, block = first_traceback(lines("ds_pdsh_failure.log"))
    assert block[:3] == [
        "Traceback (most recent call last):",
        '  File "/data/code/dev/da52789e0084/train.py", line 58, in <module>',
        "    main()",
    ], block


def test_error_keeps_the_tracebacks_last_lines() -> None:
    """The record keeps the traceback's last lines, the exception last."""
    r = record(lines("ds_pdsh_failure.log"), 1, "master", 0)
    assert r["error"] == [
        "    main()",
        '  File "/data/code/dev/da52789e0084/train.py", line 51, in main',
        "    loss = step(engine, batch)",
        '  File "/data/code/dev/da52789e0084/train.py", line 33, in step',
        '    raise ValueError("bad batch at step 12")',
        "ValueError: bad batch at step 12",
    ]


def test_no_ssh_failure_has_no_host() -> None:
    """no_ssh: unprefixed lines, no host; the launcher's rank line is not trusted."""
    r = record(lines("ds_no_ssh_failure.log"), 1, "1", 0)
    assert (r["node"], r["host"], r["rank"], r["exception"]) == (
        "1",
        None,
        None,
        "FileNotFoundError: [Errno 2] No such file or directory: 'missing.csv'",
    )


def test_torchrun_root_cause_rank() -> None:
    """torchrun: the summary's root-cause rank, the worker's exception (not torchrun's)."""
    r = record(lines("torchrun_failure.log"), 1, "0", 0)
    assert (r["rank"], r["host"], r["exception"]) == (3, None, "AssertionError: loss is nan")


def test_root_cause_rank_without_a_summary() -> None:
    """A log without torchrun's summary names no rank."""
    assert root_cause_rank(lines("ds_no_ssh_failure.log")) is None


def test_rank_prefix_gives_the_rank() -> None:
    """A `[rankN]: ` prefix names the rank where no summary does."""
    r = record(["[rank2]: Traceback (most recent call last):", "[rank2]: KeyError: 'x'"], 1, "0", 0)
    assert (r["rank"], r["exception"]) == (2, "KeyError: 'x'")


def test_success_has_no_error() -> None:
    """rc 0: no traceback looked for, no rank."""
    r = record(lines("ds_pdsh_finished.log"), 0, "master", 0)
    assert (r["rc"], r["error"], r["exception"], r["rank"]) == (0, [], "", None)


def test_cli_reads_only_this_attempts_lines(tmp_path: Path) -> None:
    """`record LOG START ...` reads after line START and replaces OUT whole."""
    log = tmp_path / "launcher.log"
    log.write_text(
        "Traceback (most recent call last):\nOSError: old attempt\n"
        + (FIXTURES / "ds_no_ssh_failure.log").read_text()
    )
    out = tmp_path / "exit.1.json"
    assert main(["record", str(log), "2", "1", "1", str(out)]) == 0
    assert json.loads(out.read_text())["exception"].startswith("FileNotFoundError")
    assert not (tmp_path / "exit.1.json.new").exists()


def test_cli_usage() -> None:
    """Wrong arguments: usage, exit 2."""
    assert main(["record"]) == 2
