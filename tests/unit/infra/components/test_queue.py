"""infra.components.queue: what a queued job's entry holds (its ask and its data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.components.queue import code_bundle, entry_ask, entry_data
from infra.config import parse_stack_config
from infra.render.code import bundle
from ops.project import ROOT
from tests.unit.infra.config.rules.test_placement import job_raw

pytestmark = pytest.mark.unit


def test_entry_data_holds_the_code_digest_not_its_path(tmp_path: Path) -> None:
    """The data names the code by digest and the revision; the code dir's path (which
    differs between checkouts) and the queued mark are not in it."""
    (tmp_path / "train.py").write_text("print(1)\n")
    code = {"dir": str(tmp_path)}
    raw = job_raw(nodes=2, queued={"revision": "r1"}, code=code, script="train.py")
    cfg = parse_stack_config(raw)
    data = entry_data(cfg, code_bundle(cfg))
    assert data["code_digest"] == bundle(tmp_path, [".git"]).digest
    assert data["revision"] == "r1"
    assert "code" not in data["training"] and "queued" not in data["training"]
    assert data["training"]["nodes"] == 2
    assert "code" not in data, "an absolute dir is a path on the submitter's machine"


def test_entry_data_holds_a_code_dir_inside_the_project() -> None:
    """A code dir relative to the project (the same in every checkout) is in the data,
    with its excludes when not the defaults, so another checkout can find it."""
    code = {"dir": "examples/torchrun-ddp", "exclude": ["*.md"]}
    raw = job_raw(nodes=2, queued={"revision": "r1"}, code=code, script="train.py")
    cfg = parse_stack_config(raw)
    data = entry_data(cfg, code_bundle(cfg))
    assert data["code"] == code
    assert data["code_digest"] == bundle(ROOT / "examples" / "torchrun-ddp", ["*.md"]).digest


def test_entry_ask_is_the_planners() -> None:
    """The ask: nodes, GPUs per node, model and named hosts, as the planner reads them."""
    cfg = parse_stack_config(job_raw(nodes=2, gpu_model="A", queued={}))
    assert entry_ask(cfg) == {"nodes": 2, "gpus_per_node": 8, "gpu_model": "A", "hosts": []}
