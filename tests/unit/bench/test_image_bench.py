"""bench.image_bench: what runs without building (the builds are its own, by hand)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import image_bench

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def test_built_on_reads_the_cpu_build_line() -> None:
    """images/build's `building` line gives the runtime base, then the build-stage base."""
    log = (
        "wheelhouse: downloading x\nbuilding dss-train:cpu on dss-base:trixie-runtime-a "
        "(build stage dss-base:trixie-build-b) with the legacy builder\n"
    )
    assert image_bench.built_on(log) == ["dss-base:trixie-runtime-a", "dss-base:trixie-build-b"]


def test_built_on_takes_the_image_line_after_the_venv_line() -> None:
    """images-cuda/build logs the venv base's build first; the image's line is the last."""
    log = (
        "building dss-base:trixie-cuda-venv-v on dss-base:trixie-build-c with the legacy "
        "builder\nbuilding dss-train:cuda on dss-base:trixie-runtime-r (build stage "
        "dss-base:trixie-cuda-venv-v) with the legacy builder\n"
    )
    want = ["dss-base:trixie-runtime-r", "dss-base:trixie-cuda-venv-v"]
    assert image_bench.built_on(log) == want


def test_help_lists_the_cuda_options() -> None:
    """The bench starts and documents --cuda, --no-train and --compressed (no docker needed)."""
    argv = [sys.executable, "-m", "bench.image_bench", "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60, cwd=ROOT)
    assert all(opt in out.stdout for opt in ("--cuda", "--no-train", "--compressed")), out.stdout
