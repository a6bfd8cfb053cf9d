"""A training rank on a real GPU: the GPU it names (the metrics' gpu_uuid label, joined
with DCGM's series), NVML as the rank's metrics read it, and train.py itself on CUDA
with NCCL: steps, a checkpoint, and a resume from it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import probe

pytestmark = pytest.mark.gpu

TRAIN = Path("images/train.py")
CUDA = {"DS_ACCELERATOR": "cuda"}


def test_rank_names_its_gpu_as_nvidia_smi_does(nvml: dict[str, Any]) -> None:
    """dss_train's rank GPU UUID (from CUDA) is NVML's UUID of that GPU, GPU-prefix and all."""
    code = (
        "from deepspeed.accelerator import get_accelerator\n"
        "from dss_train.main import _rank_gpu_uuid\n"
        "print(_rank_gpu_uuid(get_accelerator(), 0))\n"
    )
    assert probe(code, env=CUDA).strip().splitlines()[-1] == nvml["gpus"][0]["uuid"]


def test_rank_metrics_read_the_gpu_through_nvml(nvml: dict[str, Any]) -> None:
    """metrics.Nvml finds the GPU by NVIDIA_VISIBLE_DEVICES' UUID and by index, and reads it."""
    code = (
        "import json, sys\n"
        "from dss_train.metrics import Nvml\n"
        "a, b = Nvml(sys.argv[1], 0), Nvml('', 0)\n"
        "print(json.dumps({'by_uuid': a.available, 'read': a.read(), 'index_uuid': b.uuid}))\n"
    )
    got = json.loads(probe(code, nvml["gpus"][0]["uuid"]).strip().splitlines()[-1])
    assert got["by_uuid"] is True
    util, used, total = got["read"]
    assert 0.0 <= util <= 1.0 and 0 <= used <= total == nvml["gpus"][0]["memory_total"]
    assert got["index_uuid"] == nvml["gpus"][0]["uuid"]


def _train(data: Path, steps: int, record: Path, name: str) -> str:
    env = {**os.environ, **CUDA, "DSS_CKPT_EVERY": "10", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, str(TRAIN), "--run", "gpu", "--steps", str(steps)]
    proc = subprocess.run(
        [*argv, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    (record / f"train-{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_train_runs_on_cuda_and_resumes(nvml: dict[str, Any], tmp_path: Path, record: Path) -> None:
    """train.py trains on the GPU with NCCL, checkpoints, and resumes from step 21."""
    first = _train(tmp_path, 20, record, "first")
    assert "device cuda, starting at step 1" in first
    second = _train(tmp_path, 30, record, "resumed")
    assert "next step 21" in second
    rows = [json.loads(x) for x in (tmp_path / "logs/gpu/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert sum(r["loss"] for r in rows[-5:]) < sum(r["loss"] for r in rows[:5])
