"""tests/conftest.py: which suites get the images built up front, and a timed-out build
that leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import prebuild_args, run_bounded

pytestmark = pytest.mark.unit


def test_unit_toolchain_and_lab_tests_need_no_image() -> None:
    assert prebuild_args({"unit", "toolchain", "lab", "timeout"}) is None


def test_image_tests_need_the_image_without_the_monitoring_base() -> None:
    assert prebuild_args({"unit", "image"}) == []


@pytest.mark.parametrize("marker", ["engine", "acceptance"])
def test_engine_and_acceptance_tests_need_the_monitoring_base_too(marker: str) -> None:
    assert prebuild_args({marker}) == ["--monitoring"]


def test_a_finished_build_returns_its_exit_code_and_stdout(tmp_path: Path) -> None:
    rc, out = run_bounded(["sh", "-c", "echo built; echo oops >&2; exit 3"], 30, tmp_path / "l")
    assert (rc, out) == (3, "built\n")
    assert (tmp_path / "l").read_text() == "oops\n"


def test_a_timed_out_build_leaves_no_process_of_its_group(tmp_path: Path) -> None:
    # A shell that starts a grandchild, as images/build starts docker: killing the shell
    # alone would leave the grandchild running (what the old fixture's timeout did).
    pidfile = tmp_path / "pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    rc, _ = run_bounded(["sh", "-c", script], 1, tmp_path / "l")
    assert rc is None
    assert time.monotonic() - t0 < 30
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.1)
    assert not _alive(grandchild), f"pid {grandchild} (the build's child) still runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie reaped by init is gone; one not yet reaped counts as ended.
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return bool(state.stdout.strip()) and not state.stdout.strip().startswith("Z")
