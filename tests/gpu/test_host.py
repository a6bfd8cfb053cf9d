"""The host script the providers send (HostFacts: facts, GPU health, NIC, DCGM) against
the real nvidia-smi, beside NVML's view of the same GPUs. The parsing is held to these
readings by tests/unit/infra/providers/test_gpu_record.py, from the recorded output."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

# The project's nvidia-smi queries, as the host script and the lab's fake make them.
QUERIES = {
    "uuid-driver": ["--query-gpu=uuid,driver_version"],
    "ecc": ["--query-gpu=uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending"],
    "remap": ["--query-gpu=uuid,remapped_rows.pending,remapped_rows.failure"],
}
CSV = ["--format=csv,noheader,nounits"]


def _host_script() -> str:
    path = Path(os.environ.get("DSS_GPU_HOST_SCRIPT") or ".gpu/host-script.sh")
    assert path.is_file(), f"{path}: run `scripts/gpu-check prepare` on the project's machine"
    return path.read_text()


def test_host_script_reads_every_gpu_and_the_driver(nvml: dict[str, Any], record: Path) -> None:
    """The facts lines name each GPU NVML counts, and NVML's driver version."""
    proc = subprocess.run(
        ["sh"], input=_host_script(), capture_output=True, text=True, timeout=120, check=False
    )
    (record / "host-script.out").write_text(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sorted(x[4:] for x in lines if x.startswith("gpu=")) == sorted(
        g["uuid"] for g in nvml["gpus"]
    )
    assert {x[7:] for x in lines if x.startswith("driver=")} == {nvml["driver"]}


def test_host_script_health_queries_answer_on_this_driver(
    nvml: dict[str, Any], record: Path
) -> None:
    """Both health queries print one line per GPU (the driver knows every field)."""
    text = (record / "host-script.out").read_text()
    for tag in ("ecc", "remap"):
        uuids = [line.split("|", 1)[1].split(",")[0] for line in text.splitlines()
                 if line.startswith(f"{tag}|")]  # fmt: skip
        assert sorted(uuids) == sorted(g["uuid"] for g in nvml["gpus"]), tag


@pytest.mark.parametrize("name", [*QUERIES, "list"])
def test_nvidia_smi_query_exits_zero(name: str, nvml: dict[str, Any], record: Path) -> None:
    """Each query the project makes exits 0 and prints a line per GPU (recorded as is)."""
    argv = ["nvidia-smi", *(QUERIES[name] + CSV if name in QUERIES else ["-L"])]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    (record / f"nvidia-smi-{name}.txt").write_text(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == len(nvml["gpus"])
