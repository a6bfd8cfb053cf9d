"""bench.fork_bench: the table from the probe's JSON, failures named rather than timed."""

from __future__ import annotations

from typing import Any

import pytest

from bench import fork_bench as fb

pytestmark = pytest.mark.unit


def _rows(ds_forks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "fresh": [{"ok": True, "seconds": s} for s in (5.0, 4.0, 6.0)],
        "device": "cuda",
        "torch": {"seconds": 2.0, "parent_cuda_initialized": False,
                  "forks": [{"ok": True, "seconds": s} for s in (1.0, 1.5, 1.2)]},
        "deepspeed": {"seconds": 1.0, "parent_cuda_initialized": True, "forks": ds_forks},
        "torch_version": "2.11.0", "deepspeed_version": "0.17.6",
    }  # fmt: skip


def test_table_gives_median_and_spread_of_each_way() -> None:
    """Each way's row is its median with min-max, beside the command that produced it."""
    out = fb.table(_rows([{"ok": True, "seconds": 0.04}]), "python3 -m bench.fork_bench")
    assert out.startswith("`python3 -m bench.fork_bench` (torch 2.11.0, DeepSpeed 0.17.6")
    assert (
        "| new process (every import, the accelerator, the op): today | 5.00 s (4.00-6.00) |" in out
    )
    assert "(child imports DeepSpeed) | 1.20 s (1.00-1.50) |" in out
    assert "2.00 s, CUDA initialised: no (1.00 s, CUDA initialised: yes)" in out


def test_table_names_the_failure_when_every_fork_failed() -> None:
    """Forks that could not use the device are reported with their error, not a time."""
    failed = [{"ok": False, "seconds": 0.1, "error": "RuntimeError: Cannot re-initialize CUDA"}]
    out = fb.table(_rows(failed * 3), "cmd")
    assert "| fork of a parent that imported DeepSpeed too | all 3 failed: RuntimeError: " in out


def test_probe_runs_the_first_operation_on_the_accelerator_named() -> None:
    """The probe's device follows DS_ACCELERATOR, as the training image's does."""
    assert 'DEV = "cuda" if os.environ.get("DS_ACCELERATOR") == "cuda" else "cpu"' in fb.PROBE
