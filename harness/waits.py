"""Polling: wait until a probe says yes, and fail naming what was awaited."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    interval: float = 2.0,
    ignore: tuple[type[Exception], ...] = (),
) -> T:
    """Call `probe` every `interval` s until it returns something truthy, and return
    that; after `timeout` s fail naming `what` and the last value. Exceptions of the
    `ignore` types count as a falsy answer (a service not listening yet)."""
    deadline = time.monotonic() + timeout
    last: T | Exception | None = None
    while True:
        try:
            value = probe()
        except ignore as e:
            last = e
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s; last: {last!r}")
        time.sleep(interval)


def retry(
    action: Callable[[], T],
    timeout: float,
    interval: float = 2.0,
    on: tuple[type[Exception], ...] = (Exception,),
) -> T:
    """Run `action` until it does not raise one of `on`; after `timeout` s the last
    error is raised (Docker refuses to remove what is still in use for a while)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except on:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)


def reap(proc: subprocess.Popen[str], grace: float = 300) -> None:
    """`proc` ended and waited for if it still runs (a test's cleanup after a failure:
    a process it started must not outlive it). SIGTERM first, as a watch is ended: the
    pass under way finishes its `pulumi up` within `grace` seconds. Killed at once, the
    watch would leave that `up` running on its own, holding the job stack's lock, and
    the cleanup's destroy that follows would fail on the lock. Killed after `grace`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def stamp_lines(proc: subprocess.Popen[str], into: list[tuple[float, str]]) -> threading.Thread:
    """A thread (started, a daemon) that appends each line `proc` prints to `into`, with
    the time it came, until `proc` closes its output."""

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            into.append((time.time(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader
