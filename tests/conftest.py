"""Session start for every suite: the images that the collected tests need are built
once, before the first test, by scripts/prebuild, with a limit of their own.

A build charged to the first test that asks for it ran inside that test's timeout: on
a new machine pytest-timeout killed the build 600 s into `tests/image`'s first test, and
the cached fixture error failed every image test after it. Here a failing or timed-out
build ends the run at once with the build's own error, and a timed-out build leaves no
process behind (its whole process group is killed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PREBUILD = ROOT / "scripts" / "prebuild"
PREBUILD_TIMEOUT_S = float(os.environ.get("DSS_PREBUILD_TIMEOUT", "3000"))
"""A cold build (bases debootstrapped, torch and DeepSpeed installed from the wheelhouse,
DeepSpeed's CPU ops compiled) takes 10-20 min on two cores; this bounds a hung one."""

NEEDS_IMAGE = ("image", "engine", "acceptance")
"""Markers of the suites that run the training image (the engine's stacks build the same
content, so the prebuilt layers make their builds cache hits)."""
NEEDS_MONITORING = ("engine", "acceptance")
"""Markers of the suites whose stacks may build the monitoring image."""


def prebuild_args(markers: set[str]) -> list[str] | None:
    """scripts/prebuild's arguments for the collected tests' markers; None: no image needed."""
    if not markers & set(NEEDS_IMAGE):
        return None
    return ["--monitoring"] if markers & set(NEEDS_MONITORING) else []


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL, to `proc`'s whole process group; waits for `proc`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=30)
            break
        except subprocess.TimeoutExpired:
            continue


def run_bounded(
    cmd: list[str], timeout_s: float, log: Path, env: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """Run `cmd` in a process group of its own, stdout returned, stderr to `log`.
    Returns (exit code, stdout), or (None, "") when it outlived `timeout_s`; then, as on
    Ctrl-C, the whole group is killed: docker CLIs, debootstrap, the shells between."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True, env=env
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return None, ""
        except BaseException:
            kill_group(proc)
            raise
        return proc.returncode, out


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or os.environ.get("DSS_TEST_IMAGE"):
        return
    markers = {m.name for item in session.items for m in item.iter_markers()}
    args = prebuild_args(markers)
    if args is None:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    logs = Path(tempfile.mkdtemp(prefix="dss-prebuild-"))
    env_log = logs / "prebuild.log"
    env = os.environ | {"DSS_PREBUILD_LOG": str(logs)}  # the steps' logs, for the child only
    t0 = time.monotonic()
    rc, out = run_bounded([str(PREBUILD), *args], PREBUILD_TIMEOUT_S, env_log, env)
    took = time.monotonic() - t0
    _prebuild_s.append(took)
    text = env_log.read_text()
    if reporter is not None:
        for line in text.splitlines():
            if line.startswith("prebuild: "):
                reporter.write_line(line)
        reporter.write_line(f"prebuild: {took:.0f} s in all")
    if rc is None:
        pytest.exit(
            f"scripts/prebuild did not finish in {PREBUILD_TIMEOUT_S:.0f} s "
            f"(DSS_PREBUILD_TIMEOUT); stopped with every process it started. "
            f"Its log, {env_log}, ends:\n{text[-4000:]}",
            returncode=1,
        )
    if rc != 0:
        pytest.exit(
            f"scripts/prebuild failed (exit {rc}); no test ran. It said:\n{text[-4000:]}",
            returncode=1,
        )
    # The image tests' `image` fixture and anything else that runs the CPU image.
    os.environ["DSS_TEST_IMAGE"] = out.strip().splitlines()[-1]


# Where the run's time goes: each test's setup, call and teardown, and the prebuild, as
# JSON at DSS_DURATIONS_FILE (scripts/test sets it); `python -m bench.test_durations`
# turns it into the tables in docs/benchmarks.md.
_durations: list[dict[str, object]] = []
_prebuild_s: list[float] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations.append(
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "s": round(report.duration, 3),
            "outcome": report.outcome,
        }
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("DSS_DURATIONS_FILE")
    if not path:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"prebuild_s": sum(_prebuild_s), "reports": _durations}, indent=0) + "\n"
    )
