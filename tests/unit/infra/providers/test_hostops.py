"""infra.providers.hostops.each: every host asked at once, answers in order."""

from __future__ import annotations

import threading
import time

import pytest

from infra.providers.hostops import each

pytestmark = pytest.mark.unit


def test_each_keeps_the_items_order() -> None:
    """The results come in the items' order, whichever answers first."""

    def late(delay: float) -> float:
        time.sleep(delay)
        return delay

    assert each([0.05, 0.0, 0.02], late) == [0.05, 0.0, 0.02]


def test_each_asks_all_at_once() -> None:
    """Nine items meet at one barrier: asked in turn, the first would wait alone."""
    together = threading.Barrier(9, timeout=10)
    assert each(list(range(9)), lambda i: (together.wait(), i)[1]) == list(range(9))


def test_each_raises_the_first_error_in_order() -> None:
    """An item's error is raised: the first in the items' order."""

    def fail(i: int) -> int:
        if i:
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 1"):
        each([0, 1, 2], fail)
