"""Where the test command's time goes: per layer (tests/<layer>) the seconds spent in
setup, call and teardown, and the slowest modules, from the JSON that tests/conftest.py
writes (scripts/test writes it to bench/out/test-durations.json). Several files give
the layers side by side (a cold run and a warm run, say). Prints markdown tables and
the command that produced them.

    python -m bench.test_durations bench/out/cold.json bench/out/warm.json [--modules 15]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PHASES = ("setup", "call", "teardown")


def layer_of(nodeid: str) -> str:
    """`tests/engine/test_run.py::test_x` -> `engine`; anything else -> `other`."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def by_layer(reports: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{layer: {phase: seconds, "tests": count of calls}}."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in reports:
        row = out[layer_of(r["nodeid"])]
        row[r["when"]] += float(r["s"])
        if r["when"] == "call":
            row["tests"] += 1
    return out


def by_module(reports: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in reports:
        out[module_of(r["nodeid"])] += float(r["s"])
    return out


def fmt(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.0f} s"


def layer_table(runs: dict[str, dict[str, Any]]) -> str:
    names = list(runs)
    layers = sorted({layer for run in runs.values() for layer in by_layer(run["reports"])})
    head = ["layer"] + [f"{n}: {p}" for n in names for p in (*PHASES, "total")]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    totals = {n: dict.fromkeys((*PHASES, "total"), 0.0) for n in names}
    for layer in layers:
        cells = [layer]
        for n in names:
            row = by_layer(runs[n]["reports"]).get(layer, {})
            total = sum(row.get(p, 0.0) for p in PHASES)
            for p in PHASES:
                totals[n][p] += row.get(p, 0.0)
                cells.append(fmt(row.get(p, 0.0)))
            totals[n]["total"] += total
            cells.append(fmt(total))
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["all tests"]
    for n in names:
        cells += [fmt(totals[n][p]) for p in (*PHASES, "total")]
    lines.append("| " + " | ".join(cells) + " |")
    cells = ["prebuild (before the first test)"]
    for n in names:
        cells += ["", "", "", fmt(float(runs[n].get("prebuild_s", 0.0)))]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def module_table(runs: dict[str, dict[str, Any]], top: int) -> str:
    names = list(runs)
    first = by_module(runs[names[0]]["reports"])
    mods = sorted(first, key=lambda m: -first[m])[:top]
    lines = ["| module | " + " | ".join(names) + " |", "|" + " --- |" * (len(names) + 1)]
    for m in mods:
        cells = [fmt(by_module(runs[n]["reports"]).get(m, 0.0)) for n in names]
        lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="JSON written by tests/conftest.py")
    ap.add_argument("--modules", type=int, default=15, help="how many slowest modules to list")
    a = ap.parse_args(argv)
    runs = {f.stem: json.loads(f.read_text()) for f in a.files}
    print(f"`python -m bench.test_durations {shlex.join(str(f) for f in a.files)}`\n")
    print(layer_table(runs))
    print()
    print(module_table(runs, a.modules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
