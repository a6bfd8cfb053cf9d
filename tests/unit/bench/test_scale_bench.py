"""bench.scale_bench: a smoke run with tiny sizes (the real sizes are in docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def test_scale_bench_smoke() -> None:
    """Two sizes evaluate, each with 3 more resources per extra host, and a table prints."""
    argv = [sys.executable, "-m", "bench.scale_bench", "--hosts", "2", "4", "--runs", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300, cwd=ROOT)
    lines = proc.stdout.splitlines()
    rows = [line.split("|") for line in lines if line.startswith("| ") and line[2].isdigit()]
    counts = {int(r[1]): int(r[2]) for r in rows}
    assert set(counts) == {2, 4}, proc.stdout
    assert counts[4] - counts[2] == 6, f"resources per host changed: {counts}"
