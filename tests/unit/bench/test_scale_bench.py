"""bench/scale_bench.py: a smoke run with tiny sizes (the real sizes are in docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def test_scale_bench_smoke() -> None:
    """Two sizes evaluate, each with 3 more resources per extra host, and a table prints."""
    bench = str(ROOT / "bench" / "scale_bench.py")
    proc = subprocess.run(
        [sys.executable, bench, "--hosts", "2", "4", "--runs", "1"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.startswith("| ") and
            line[2].isdigit()]  # fmt: skip
    counts = {int(r[1]): int(r[2]) for r in rows}
    assert set(counts) == {2, 4}, proc.stdout
    assert counts[4] - counts[2] == 6, f"resources per host changed: {counts}"
