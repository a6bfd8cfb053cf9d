"""The fork server (training.fork_server, infra/task/forkserver.py) on a real GPU: its
default preload on a CUDA torch is torch alone (DeepSpeed would initialise CUDA, see
test_fork.py), the server keeps CUDA uninitialised, and a served rank imports
DeepSpeed and computes on the GPU. Only the lab's CPU image is proven under the real
engine (tests/acceptance/test_fork_server.py); this is the GPU half. The client is written
as the launch writes it, for the host's python (harness.forkserver: standard library
only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.forkserver import stop_server, write_client

pytestmark = pytest.mark.gpu

SCRIPT = """\
import json, os, sys, time
t = time.monotonic()
pre = {m: m in sys.modules for m in ("torch", "deepspeed")}
import torch, deepspeed
x = torch.randn(1024, 1024, device="cuda")
(x @ x).sum().item()
print(json.dumps({"preloaded": pre, "device": str(x.device),
                  "start_s": time.monotonic() - t}), flush=True)
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Path]:
    """The client for this python (a server of its own), stopped afterwards."""
    path = write_client(tmp_path / "bin" / "python", sys.executable, f"gpu {tmp_path.name}")
    yield path
    stop_server(path, sys.executable)


def served(client: Path, tmp_path: Path) -> tuple[dict[str, Any], float]:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "DSS_FORK_PRELOAD"}
    env["DS_ACCELERATOR"] = "cuda"
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(client), "-u", str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, took


def test_a_served_rank_imports_deepspeed_and_uses_the_gpu(
    client: Path, tmp_path: Path, nvml: dict[str, Any]
) -> None:
    """First and second served start: torch preloaded, DeepSpeed not, the matmul on the
    GPU; printed: each start's wall time (the first includes the server's preload)."""
    first, cold = served(client, tmp_path)
    second, warm = served(client, tmp_path)
    print(f"served rank start to its first GPU matmul: first {cold:.2f} s, then {warm:.2f} s")
    for got in (first, second):
        assert got["preloaded"] == {"torch": True, "deepspeed": False}, got
        assert got["device"].startswith("cuda"), got
