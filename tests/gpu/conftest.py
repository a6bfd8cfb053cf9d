"""The GPU layer: what the lab only fakes (nvidia-smi, NVML, CUDA, NCCL), run on a real
GPU host by `scripts/gpu-check run` (docs/gpu.md). The test command never collects it;
on a host without a GPU it fails, it does not skip.

The host's own python runs the probes (it has torch; the wheels scripts/gpu-check
carries add DeepSpeed and the image's pins), each in a process of its own, so the
tests themselves import nothing beyond the standard library and pytest. What each test
read is written under $DSS_GPU_RECORD for the unit tests' fixtures
(tests/unit/infra/fixtures/gpu-h200/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# NVML's own view of every GPU, the reference the parsed tool output is held to.
# A field the GPU does not support reads as None.
NVML_PROBE = r"""
import json, pynvml as n
def s(v): return v.decode() if isinstance(v, bytes) else str(v)
def q(f, *a):
    try: return f(*a)
    except n.NVMLError: return None
n.nvmlInit()
gpus = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    ecc = q(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            n.NVML_VOLATILE_ECC)
    pend = q(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
    remap = q(n.nvmlDeviceGetRemappedRows, h)  # corrected, uncorrected, pending, failure
    gpus.append({
        "index": i, "uuid": s(n.nvmlDeviceGetUUID(h)), "name": s(n.nvmlDeviceGetName(h)),
        "memory_total": int(n.nvmlDeviceGetMemoryInfo(h).total),
        "ecc_uncorrected_volatile": ecc,
        "retired_pages_pending": None if pend is None else bool(pend),
        "remapped_rows_pending": None if remap is None else bool(remap[2]),
        "remapped_rows_failure": None if remap is None else bool(remap[3]),
    })
print(json.dumps({"driver": s(n.nvmlSystemGetDriverVersion()), "gpus": gpus}))
"""


def probe(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run `code` in the GPU host's python; its stdout (the test fails on a non-zero exit,
    showing stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert proc.returncode == 0, f"probe exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="session")
def record() -> Path:
    """Where the tests write what they read ($DSS_GPU_RECORD, else bench/out/gpu)."""
    path = Path(os.environ.get("DSS_GPU_RECORD") or "bench/out/gpu")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def nvml(record: Path) -> dict[str, Any]:
    """NVML's view of the host's GPUs (at least one, or the layer fails)."""
    try:
        text = probe(NVML_PROBE, timeout=60)
    except AssertionError as e:
        pytest.fail(f"tests/gpu needs a GPU host with NVML (scripts/gpu-check): {e}")
    facts: dict[str, Any] = json.loads(text)
    if not facts["gpus"]:
        pytest.fail("tests/gpu needs a GPU host: NVML counts no GPU")
    (record / "nvml.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts
