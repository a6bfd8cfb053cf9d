"""Fork safety on a real GPU, which a warm-parent rank start (issue 22's zygote) rests
on. CUDA cannot be used in a child forked after its parent initialised CUDA. Read on
an H200: `import torch` (and torch._dynamo) leaves CUDA alone, and a child forked after
it trains on the GPU; `import deepspeed` (0.17.6, with triton installed, as in the CUDA
image) initialises CUDA (ds_transformer asks `is_triton_supported()`, which reads the
device's capability), so no child forked after it can use the GPU, and the parent can
tell (torch.cuda.is_initialized()). The same probe times both: bench/fork_bench.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.fork_bench import PROBE
from tests.gpu.conftest import probe

pytestmark = pytest.mark.gpu


def _fork(warm: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        probe(PROBE, "fork", warm, env={"DS_ACCELERATOR": "cuda"}).strip().splitlines()[-1]
    )
    return out


def test_fork_after_torch_import_uses_cuda(nvml: dict[str, Any]) -> None:
    """A parent that imported torch leaves CUDA alone; its child imports DeepSpeed and runs."""
    got = _fork("torch")
    assert got["device"] == "cuda"
    assert got["parent_cuda_initialized"] is False
    assert got["child"]["ok"] is True, got["child"]


def test_import_deepspeed_initialises_cuda_and_no_fork_can_use_it(nvml: dict[str, Any]) -> None:
    """After `import deepspeed` the parent says CUDA is initialised; its child cannot use it."""
    got = _fork("deepspeed")
    assert got["parent_cuda_initialized"] is True
    assert got["child"]["ok"] is False
    assert "forked subprocess" in got["child"]["error"]
