"""infra.providers.hostops.each: every host asked at once, answers in order."""

from __future__ import annotations

import threading
import time

import pytest

from infra.providers.hostops import each, ssh_argv

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


def test_ssh_argv_of_an_older_target_is_unchanged() -> None:
    """A target with no newer SSH key renders exactly as before the SSH model."""
    target = {"user": "root", "address": "10.0.0.1", "port": 22, "key_file": "/k",
              "known_hosts": "/kh"}  # fmt: skip
    assert ssh_argv(target) == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
        "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=/kh",
        "-o", "LogLevel=ERROR", "-p", "22", "-i", "/k", "-o", "IdentitiesOnly=yes",
        "root@10.0.0.1", "sh", "-s",
    ]  # fmt: skip


def test_ssh_argv_of_a_model_target_joins_the_master() -> None:
    """A target the SSH model wrote (`mux`) is rendered by it: -F none, the master."""
    argv = ssh_argv({"user": "root", "address": "h", "port": 22, "known_hosts": "/kh",
                     "mux": True})  # fmt: skip
    assert argv[:3] == ["ssh", "-F", "none"] and "ControlPath=~/.ssh/dss-%C" in argv
