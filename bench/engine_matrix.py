"""The engine matrix: the engine suite (and optionally the acceptance suite) once per lab
Docker engine, side by side in one table.

    python -m bench.engine_matrix [--engines 20.10 28] [--suites tests/engine ...] [-k EXPR]

Each row runs `pytest <suites>` with DSS_LAB_ENGINE=<engine>, so every `lab up` of that
run (the engine suite's fixtures, the acceptance suite's 9-host lab) starts that engine,
and reads the outcome of every test from pytest's JUnit XML. The columns a reviewer
looks for are named tests of tests/engine: the first `up` (its time includes `pulumi up`
from nothing, the fixture's setup), the no-op checks, the drift cases, the upgrade from
the previous commit, and the service update that must restart no task. A second table
gives, per engine, the training tasks and processes each change of
tests/acceptance/test_restarts.py restarted (its `restarts.<change>` test-suite
properties). The default suites are the engine suite and that module.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from harness import ROOT
from lab import engines

# Tests whose outcome is a column of its own (test function names in tests/engine).
FIRST_UP = "test_up_forms_swarm_with_labels"
NO_OPS = (
    "test_second_preview_has_no_changes",
    "test_refresh_finds_no_drift",
    "test_refresh_preview_only_finds_no_drift",
)
DRIFT_PREFIX = "test_drift_"
UPGRADE = ("test_preview_after_upgrade_is_a_no_op", "test_up_after_upgrade_restarts_nothing")
NO_RESTART = ("test_label_update_keeps_the_tasks", "test_change_restarts_no_training")
RESTARTS_PREFIX = "restarts."
SUITES = ("tests/engine", "tests/acceptance/test_restarts.py")


SEVERITY = ("passed", "skipped", "failed", "error")


@dataclass
class Row:
    engine: str
    seconds: float = 0.0
    outcomes: dict[str, tuple[str, float]] = field(default_factory=dict)
    """test name (without parameters) -> (passed|failed|skipped|error, seconds)."""
    restarts: dict[str, tuple[int, int]] = field(default_factory=dict)
    """change -> (training tasks replaced, containers whose training processes restarted)."""

    def count(self, outcome: str) -> int:
        return sum(o == outcome for o, _ in self.outcomes.values())

    def verdict(self, *names: str) -> str:
        seen = [self.outcomes[n][0] for n in names if n in self.outcomes]
        if not seen:
            return "not run"
        if any(o in ("failed", "error") for o in seen):
            return "FAIL"
        return "pass" if all(o == "passed" for o in seen) else "skipped"

    def drift(self) -> str:
        cases = [o for n, (o, _) in self.outcomes.items() if n.startswith(DRIFT_PREFIX)]
        return f"{sum(o == 'passed' for o in cases)}/{len(cases)}" if cases else "not run"

    def first_up(self) -> str:
        outcome = self.outcomes.get(FIRST_UP)
        return f"{outcome[1]:.0f}" if outcome and outcome[0] == "passed" else "-"


def outcomes(junit: Path) -> dict[str, tuple[str, float]]:
    """Each test case of a JUnit XML report: its outcome and its total seconds."""
    out: dict[str, tuple[str, float]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        kinds = {child.tag for child in case}
        outcome = (
            "failed"
            if "failure" in kinds
            else "error"
            if "error" in kinds
            else "skipped"
            if "skipped" in kinds
            else "passed"
        )
        # A parametrised test's cases fold into one: the worst outcome, the summed time.
        base = name.split("[", 1)[0]
        seconds = float(case.get("time", "0"))
        if base in out:
            worst = max(out[base][0], outcome, key=SEVERITY.index)
            out[base] = (worst, out[base][1] + seconds)
        else:
            out[base] = (outcome, seconds)
    return out


def restart_counts(junit: Path) -> dict[str, tuple[int, int]]:
    """The `restarts.<change>` test-suite properties of a JUnit XML report."""
    out: dict[str, tuple[int, int]] = {}
    for prop in ET.parse(junit).getroot().iter("property"):
        name = prop.get("name", "")
        if name.startswith(RESTARTS_PREFIX):
            value = json.loads(prop.get("value", "{}"))
            out[name.removeprefix(RESTARTS_PREFIX)] = (value["tasks"], value["processes"])
    return out


def run_row(engine: str, suites: list[str], extra: list[str]) -> Row:
    """The suites on one engine, as the test command runs them."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, engines.ENGINE_ENV: engine}
        argv = [sys.executable, "-m", "pytest", *suites, *extra, f"--junitxml={junit}", "-q"]
        t0 = time.monotonic()
        subprocess.run(argv, cwd=ROOT, env=env, check=False)
        row = Row(engine, time.monotonic() - t0)
        if junit.exists():
            row.outcomes = outcomes(junit)
            row.restarts = restart_counts(junit)
    return row


def table(rows: list[Row]) -> str:
    head = (
        "| engine | daemon | passed | failed | skipped | wall (s) | first `up` (s) "
        "| no-op preview/refresh | drift cases | upgrade no-op | service update, no restart |"
    )
    lines = [head, "|" + " --- |" * 11]
    for r in rows:
        lines.append(
            f"| {r.engine} | {engines.get(r.engine).version} | {r.count('passed')} "
            f"| {r.count('failed') + r.count('error')} | {r.count('skipped')} "
            f"| {r.seconds:.0f} | {r.first_up()} | {r.verdict(*NO_OPS)} | {r.drift()} "
            f"| {r.verdict(*UPGRADE)} | {r.verdict(*NO_RESTART)} |"
        )
    changes = list(dict.fromkeys(c for r in rows for c in r.restarts))
    if changes:
        lines += [
            "",
            "Training tasks replaced / containers whose training processes restarted:",
            "",
            "| engine | " + " | ".join(changes) + " |",
            "|" + " --- |" * (len(changes) + 1),
        ]
        for r in rows:
            cells = ["/".join(map(str, r.restarts[c])) if c in r.restarts else "-" for c in changes]
            lines.append(f"| {r.engine} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engine_matrix", description=__doc__)
    ap.add_argument("--engines", nargs="+", default=[engines.SYSTEM, engines.CURRENT])
    ap.add_argument("--suites", nargs="+", default=list(SUITES))
    ap.add_argument("-k", dest="keyword", help="pytest -k expression for every row")
    args = ap.parse_args(argv)
    for name in args.engines:
        engines.get(name)  # an unknown engine fails here, before any row runs
    extra = ["-k", args.keyword] if args.keyword else []
    rows = [run_row(name, args.suites, extra) for name in args.engines]
    cmd = shlex.join(["python", "-m", "bench.engine_matrix", *(argv or sys.argv[1:])])
    print(f"\n`{cmd}`\n\n{table(rows)}")
    return 0 if all(r.count("failed") + r.count("error") == 0 and r.outcomes for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
