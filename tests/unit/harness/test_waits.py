"""harness.waits: polling until a probe says yes, retrying until an action succeeds,
ending a process a test started."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harness.waits import reap, retry, wait_for

pytestmark = pytest.mark.unit


def test_wait_for_returns_the_first_truthy_answer() -> None:
    """The probe's first truthy value is returned, after the falsy ones."""
    answers: Iterator[str | None] = iter([None, "", "ready"])
    assert wait_for("ready", lambda: next(answers), timeout=5, interval=0) == "ready"


def test_wait_for_names_what_and_the_last_value() -> None:
    """After the timeout the failure names what was awaited and the last answer."""
    with pytest.raises(AssertionError, match=r"the service: not within 0 s; last: \[\]"):
        wait_for("the service", lambda: [], timeout=0, interval=0)


def test_wait_for_polls_on_through_ignored_errors() -> None:
    """An ignored exception counts as a falsy answer; another one is raised at once."""
    calls: Iterator[OSError | int] = iter([OSError("refused"), OSError("refused"), 7])

    def probe() -> int:
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    assert wait_for("port", probe, timeout=5, interval=0, ignore=(OSError,)) == 7
    missing: dict[str, int] = {}
    with pytest.raises(KeyError):
        wait_for("key", lambda: missing["x"], timeout=5, interval=0, ignore=(OSError,))


def test_retry_raises_the_last_error_after_the_timeout() -> None:
    """An action that keeps failing raises its error once the time is up."""

    def refuse() -> None:
        raise ValueError("in use")

    with pytest.raises(ValueError, match="in use"):
        retry(refuse, timeout=0, interval=0, on=(ValueError,))


def test_retry_returns_once_the_action_succeeds() -> None:
    """Failures of the named kinds are retried until the action returns."""
    tries: Iterator[ValueError | str] = iter([ValueError("busy"), "removed"])

    def remove() -> str:
        got = next(tries)
        if isinstance(got, Exception):
            raise got
        return got

    assert retry(remove, timeout=5, interval=0, on=(ValueError,)) == "removed"


def test_reap_ends_a_process_with_sigterm_first() -> None:
    """A watch ends on SIGTERM (letting a pass under way finish): so `reap` asks it."""
    proc = subprocess.Popen(["sleep", "60"], text=True)
    reap(proc)
    assert proc.returncode == -signal.SIGTERM


def test_reap_kills_a_process_that_outlives_its_grace() -> None:
    """A process still running `grace` seconds after SIGTERM is killed."""
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
              "print('ready', flush=True); time.sleep(60)"  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", ignores], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    reap(proc, grace=0.5)
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()
