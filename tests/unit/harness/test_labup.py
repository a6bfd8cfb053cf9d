"""harness.labup: a lab brought up for a test module (no lab here: the commands are
recorded)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from harness import labup
from harness.labup import lab_up_args, running_lab

pytestmark = pytest.mark.unit


def test_up_args_are_todays_without_per_host_values() -> None:
    """One count, no model: the arguments the test modules have always passed."""
    assert lab_up_args(2) == ["up", "--hosts", "2", "--gpus", "2"]
    assert lab_up_args(9, 8) == ["up", "--hosts", "9", "--gpus", "8"]
    assert lab_up_args(2, 2, swarm=True) == ["up", "--hosts", "2", "--gpus", "2", "--swarm"]


def test_up_args_carry_each_hosts_count_and_model() -> None:
    """Per-host lists become the comma lists `lab up` takes, lab-h1 first."""
    assert lab_up_args(3, [8, 8, 4], ["fake-a", "fake-a", "fake-b"]) == [
        "up", "--hosts", "3", "--gpus", "8,8,4", "--gpu-models", "fake-a,fake-a,fake-b",
    ]  # fmt: skip
    assert lab_up_args(2, 4, "fake-b")[-2:] == ["--gpu-models", "fake-b"]


def test_running_lab_downs_before_and_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any lab before it is downed first (one lab at a time), the status yielded, and
    the lab downed afterwards, also when the test fails."""
    calls: list[tuple[str, ...]] = []

    def cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(labup, "lab_cli", cli)
    monkeypatch.setattr(labup, "lab_status", lambda: {"up": True})
    with pytest.raises(RuntimeError), running_lab(2, [2, 1], ["fake-a", "fake-b"]) as status:
        assert status == {"up": True}
        raise RuntimeError("the test failed")
    up = ("up", "--hosts", "2", "--gpus", "2,1", "--gpu-models", "fake-a,fake-b")
    assert calls == [("down",), up, ("down",)]
