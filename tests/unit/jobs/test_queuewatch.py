"""jobs.queuewatch: the pass again and again until a signal (real signals, sent to this
process), saying only what changed; the pass itself faked, or the real one over the
faked leader and engine of test_queue.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError
from jobs import command, queuerun, queuewatch
from jobs.queuerun import Pass
from tests.unit.jobs.test_queue import queued

pytestmark = pytest.mark.unit
__all__ = ["queued"]  # the fixture, shared with test_queue.py

WAITS = "job exp1 queued: #2 on c1; ahead of it: exp0"


def standing(manager: str | None = None, **lines: str) -> Pass:
    return Pass((), (), lines, manager)


def signal_self(signum: int = signal.SIGTERM) -> None:
    os.kill(os.getpid(), signum)


class Passes:
    """A fake `queue_pass`: each call gives the next result (an exception is raised),
    and after the last one this process gets SIGTERM, which ends the watch."""

    def __init__(self, *results: Pass | Exception, ways: Sequence[str] = ()) -> None:
        self.results = list(results)
        self.ways = list(ways)
        """Per call, the manager line it says through `way` ("": none)."""
        self.calls = 0
        self.prefers: list[str | None] = []
        """Per call, the manager it was asked to prefer."""
        self.any_revision: list[bool] = []
        """Per call, whether it was told to start jobs from another revision."""

    def __call__(
        self,
        _cluster: str,
        env: Any = None,
        out: Any = print,
        way: Any = None,
        prefer: Any = None,
        any_revision: bool = False,
    ) -> Pass:
        self.prefers.append(prefer)
        self.any_revision.append(any_revision)
        result = self.results[self.calls]
        if self.calls < len(self.ways) and self.ways[self.calls]:
            (way or out)(self.ways[self.calls])
        self.calls += 1
        if self.calls == len(self.results):
            signal_self()
        if isinstance(result, Exception):
            raise result
        return result


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the watch prints; its waits between passes take no time."""
    monkeypatch.setattr(queuewatch, "TICK_S", 0.0)
    yield []


def watched(lines: list[str]) -> list[str]:
    """The lines a watch with no wait between passes prints between its first (what it
    is about to do) and its last (that it ends)."""
    queuewatch.watch("c1", 0.0, out=lines.append, sleep=lambda _s: None)
    return lines[1:-1]


def test_a_waiting_job_is_said_again_only_when_its_line_changes(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """The same waiting line two passes running is said once; a new place is said."""
    reserved = "job exp1 reserved: #1 on c1; reserved lab-h1, lab-h2"
    passes = Passes(standing(exp1=WAITS), standing(exp1=WAITS), standing(exp1=reserved))
    monkeypatch.setattr(queuerun, "queue_pass", passes)
    assert watched(lines) == [WAITS, reserved]
    assert passes.calls == 3


def test_every_pass_of_a_watch_told_any_revision_is_told_it(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """`--watch --any-revision`: each pass may start a job from another revision."""
    passes = Passes(standing(exp1=WAITS), standing(exp1=WAITS))
    monkeypatch.setattr(queuerun, "queue_pass", passes)
    queuewatch.watch("c1", 0.0, out=lines.append, sleep=lambda _s: None, any_revision=True)
    assert passes.any_revision == [True, True]


def test_a_failed_pass_is_said_once_and_the_watch_goes_on(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """The leader does not answer twice (said once, naming the host), then answers."""
    down = ConfigError(["the cluster's GPUs could not be read: ssh 10.0.0.1: no answer"])
    passes = Passes(down, down, standing(exp1=WAITS))
    monkeypatch.setattr(queuerun, "queue_pass", passes)
    assert watched(lines) == [
        "cluster c1: the pass failed: the cluster's GPUs could not be read: ssh 10.0.0.1: "
        "no answer",
        "cluster c1: the pass works again",
        WAITS,
    ]


def test_the_manager_a_pass_goes_through_is_said_when_it_changes(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """Two passes through lab-h2 (the first manager lost) say it once; a pass through
    the first manager again says so."""
    through = "cluster c1: through manager lab-h2 (lab-h1 (ssh://root@lab-h1) does not answer: x)"
    monkeypatch.setattr(queuewatch, "FIRST_AGAIN_S", 0.0)  # every pass asks the first
    passes = Passes(
        standing("lab-h2", exp1=WAITS), standing("lab-h2", exp1=WAITS), standing(exp1=WAITS),
        ways=[through, through, ""],
    )  # fmt: skip
    monkeypatch.setattr(queuerun, "queue_pass", passes)
    assert watched(lines) == [through, WAITS, "cluster c1: through its first manager again"]
    assert passes.prefers == [None, None, None]


def test_passes_go_straight_to_the_last_passs_manager_until_the_first_is_asked_again(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """The first pass goes through lab-h2 (lab-h1 lost): the passes after it prefer
    lab-h2, saying nothing new, until FIRST_AGAIN_S has passed; the pass after that asks
    lab-h1 first again, which answers."""
    clock = iter([0.0, 10.0, 20.0, 70.0])
    monkeypatch.setattr(queuewatch, "clock", lambda: next(clock))
    through = "cluster c1: through manager lab-h2 (lab-h1 (ssh://root@lab-h1) does not answer: x)"
    passes = Passes(
        standing("lab-h2", exp1=WAITS), standing("lab-h2", exp1=WAITS),
        standing("lab-h2", exp1=WAITS), standing(exp1=WAITS),
        ways=[through],
    )  # fmt: skip
    monkeypatch.setattr(queuerun, "queue_pass", passes)
    assert watched(lines) == [through, WAITS, "cluster c1: through its first manager again"]
    assert passes.prefers == [None, "lab-h2", "lab-h2", None]


def test_a_signal_while_it_waits_ends_the_wait_at_once(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """SIGINT in the wait between passes (an hour): the watch ends, one pass made."""
    calls: list[float] = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        signal_self(signal.SIGINT)

    monkeypatch.setattr(queuerun, "queue_pass", lambda *_a, **_k: standing())
    monkeypatch.setattr(queuewatch, "TICK_S", 0.5)
    assert queuewatch.watch("c1", 3600.0, out=lines.append, sleep=sleep) == 1
    assert calls == [0.5]
    assert lines[-1] == "cluster c1: SIGINT; the watch ends after 1 pass(es)"


def test_a_second_signal_interrupts_the_pass_and_the_handlers_are_put_back(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """Two SIGTERMs during one pass: KeyboardInterrupt out of the pass; the handlers
    from before the watch are in place again."""
    before = signal.getsignal(signal.SIGTERM)

    def twice(*_a: Any, **_k: Any) -> Pass:
        signal_self()
        signal_self()
        return standing()

    monkeypatch.setattr(queuerun, "queue_pass", twice)
    with pytest.raises(KeyboardInterrupt):
        queuewatch.watch("c1", 0.0, out=lines.append, sleep=lambda _s: None)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_during_a_real_pass_lets_it_finish_and_let_go_of_the_lock(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """SIGTERM while the pass holds the submit lock (during exp1's `up`): exp1 is
    started, the lock let go, and no further pass is made."""
    held: list[str] = []

    class Lock:
        def __enter__(self) -> None:
            held.append("taken")

        def __exit__(self, *_exc: object) -> None:
            held.append("let go")

    monkeypatch.setattr(command, "submit_lock", lambda *_a, **_k: Lock())
    stack = queued["ran"].stack

    def signalled(name: str, env: Any = None) -> Any:
        signal_self()
        return stack(name, env)

    monkeypatch.setattr(command, "workspace_stack", signalled)
    assert queuewatch.watch("c1", 0.0, out=lines.append, sleep=lambda _s: None) == 1
    assert queued["ran"].ups == ["exp1"] and held == ["taken", "let go"]
    assert lines[-1] == "cluster c1: SIGTERM; the watch ends after 1 pass(es)"
