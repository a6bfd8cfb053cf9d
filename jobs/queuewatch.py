"""`scripts/job queue CLUSTER --watch [--every SECONDS]`: the pass of `--run` (release
ended runs, admit, start: jobs/queuerun.py) again and again, every SECONDS (default
10), until SIGINT or SIGTERM (docs/design/sharing.md, C5).

The interim starter while no runner service exists (C6): a person, a CI schedule or a
systemd unit runs it from the checkout the jobs were submitted from. A signal ends it
between passes: one that comes while a pass runs lets the pass finish (its lock let go
as every pass lets it go), one that comes while it waits ends the wait at once; a
second signal interrupts the pass (KeyboardInterrupt, the lock let go as the pass
unwinds). A pass that fails (the leader does not answer, an `up` fails) is said with
the job or host its error names, and the next pass comes as usual.

What it prints is what changed: each release and start as it happens (and the
engine's lines of their `up`), a job's place or reason when it differs from the last
pass's, a failure when it is not the last pass's, and that passes work again after
one failed; the manager a pass went through when the cluster's first does not answer,
when it is not the last pass's (and when the first answers again). A job that waits as
it waited is not said again.

While the cluster's first manager does not answer, each pass goes straight to the
manager the last one went through, and the first is asked again once a minute
(FIRST_AGAIN_S): a host that is down costs each pass no wait for ssh's ConnectTimeout.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from jobs import command, queuerun
from jobs.table import failure_words

EVERY_S = 10.0
FIRST_AGAIN_S = 60.0
"""While passes go through another manager than the cluster's first, each goes straight
to the one the last pass went through; the first is asked again once this long has
passed since it was last asked (so a first manager back is used again within it)."""
TICK_S = 0.5
"""The longest sleep between two looks at the stop flag while the loop waits."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def clock() -> float:
    """Now, as `Said.prefer` reads it (time.monotonic; a test sets it)."""
    return time.monotonic()


@dataclass
class Stop:
    """The signal handler: the first signal asks the loop to end (`asked`, the signal's
    name in `why`); a second interrupts whatever runs (KeyboardInterrupt)."""

    why: str = ""

    @property
    def asked(self) -> bool:
        return bool(self.why)

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.asked:
            raise KeyboardInterrupt
        self.why = signal.Signals(signum).name


@contextmanager
def handled(stop: Stop) -> Iterator[None]:
    """SIGINT and SIGTERM go to `stop` while inside; the handlers before are put back."""
    before = {s: signal.signal(s, stop) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@dataclass
class Said:
    """What the loop printed last: each job's standing line, and the last failure."""

    standing: dict[str, str] = field(default_factory=dict)
    failure: str = ""
    way: str = ""
    """The manager line of the last pass that went through another manager than the
    cluster's first (jobs/leader.py `reached`), "" once a pass went through the first."""
    via: str | None = None
    """The manager the last pass went through (None: the cluster's first)."""
    first_asked: float = float("-inf")
    """When (`clock`) a pass last asked the cluster's first manager first."""

    def prefer(self) -> str | None:
        """The manager the next pass asks first: the last pass's, while the cluster's
        first was asked less than FIRST_AGAIN_S ago; else None (the first is asked),
        noted as asked now."""
        now = clock()
        if self.via is not None and now - self.first_asked < FIRST_AGAIN_S:
            return self.via
        self.first_asked = now
        return None

    def news(self, standing: Mapping[str, str]) -> list[str]:
        """The lines of `standing` that differ from the last pass's (kept for the next)."""
        lines = [line for job, line in standing.items() if self.standing.get(job) != line]
        self.standing = dict(standing)
        return lines


def wait(stop: Stop, seconds: float, sleep: Callable[[float], object]) -> None:
    """Sleep `seconds`, ending early once `stop` is asked."""
    end = time.monotonic() + seconds
    while not stop.asked and (left := end - time.monotonic()) > 0:
        sleep(min(left, TICK_S))


def one_pass(cluster: str, said: Said, out: command.Printer, any_revision: bool = False) -> None:
    """One pass, saying what changed (module doc); a failure said, never raised.
    `any_revision`: the pass's (jobs/queuerun.py)."""

    def way(line: str) -> None:
        if line != said.way:
            out(line)
        said.way = line

    try:
        done = queuerun.queue_pass(
            cluster, out=out, way=way, prefer=said.prefer(), any_revision=any_revision
        )
    except Exception as err:  # any failure of one pass: said, and the next pass tries again
        line = f"cluster {cluster}: the pass failed: {failure_words(err)}"
        if line != said.failure:
            out(line)
        said.failure = line
        return
    said.via = done.manager
    if done.manager is None and said.way:
        out(f"cluster {cluster}: through its first manager again")
        said.way = ""
    if said.failure:
        out(f"cluster {cluster}: the pass works again")
        said.failure = ""
    for line in said.news(done.standing):
        out(line)


def say(line: str) -> None:
    """Print `line` at once: a watch's output goes to a log or a pipe (a systemd unit, a
    CI job), where print would hold lines until its buffer fills."""
    print(line, flush=True)


def watch(
    cluster: str,
    every: float = EVERY_S,
    out: command.Printer = say,
    sleep: Callable[[float], object] = time.sleep,
    any_revision: bool = False,
) -> int:
    """Make the pass over cluster `cluster` every `every` seconds until a signal (module
    doc); the number of passes made. `any_revision`: each pass's (jobs/queuerun.py)."""
    stop, said, passes = Stop(), Said(), 0
    out(f"cluster {cluster}: a pass every {every:g}s until interrupted (SIGINT or SIGTERM)")
    with handled(stop):
        while not stop.asked:
            one_pass(cluster, said, out, any_revision)
            passes += 1
            wait(stop, every, sleep)
    out(f"cluster {cluster}: {stop.why}; the watch ends after {passes} pass(es)")
    return passes
