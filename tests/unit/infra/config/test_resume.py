"""infra.config.resume: whether a command job's run resumes at another world size,
from the DeepSpeed config file its command names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import parse_stack_config, resumes_universal, world_size_problems
from tests.unit.infra.config.rules.test_command import GOOD_DS, with_command

pytestmark = pytest.mark.unit


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A code dir in the tutorial's shape (its ds_config.json written by each test)."""
    (tmp_path / "train.py").write_text("print('step')\n")
    return tmp_path


def zero_config(code: Path, **ds: Any) -> None:
    """The code dir's ds_config.json: GOOD_DS with ZeRO stage 2 and the keys `ds`."""
    (code / "ds_config.json").write_text(
        json.dumps({**GOOD_DS, "zero_optimization": {"stage": 2}, **ds})
    )


def test_a_zero_checkpoint_at_another_world_size_is_refused(
    raw: dict[str, Any], code: Path
) -> None:
    """ZeRO partitions the optimizer state by rank and DeepSpeed loads it only at the
    world size it was saved at: another size is refused, naming the file, the key and
    the ways out."""
    zero_config(code)
    t = parse_stack_config(with_command(raw, code)).training
    assert world_size_problems(t, 24, 16) == [
        f"{code}/ds_config.json (--deepspeed_config 'ds_config.json' of training.command) "
        "key zero_optimization.stage: 2 partitions the optimizer state by rank, and "
        "DeepSpeed loads its checkpoints only at the world size they were saved at (24), "
        "so at 16 the script's load_checkpoint would fail at its next start; nothing was "
        'changed; allowed: "checkpoint": {"load_universal": true} in that file, then '
        "`scripts/job submit` the job again as it is (each start then resumes from its "
        'newest checkpoint made universal, at any world size: docs/jobs.md, "Resizing a '
        'job"), a world size of 24, or another --name (a new run)'
    ]
    assert world_size_problems(t, 24, 24) == []
    assert not resumes_universal(t)


def test_universal_checkpoints_resume_at_any_world_size(raw: dict[str, Any], code: Path) -> None:
    """With checkpoint.load_universal the run resumes at any size: its starts make the
    newest checkpoint universal first."""
    zero_config(code, checkpoint={"load_universal": True})
    t = parse_stack_config(with_command(raw, code)).training
    assert resumes_universal(t) and world_size_problems(t, 24, 16) == []


def test_without_zero_any_world_size_loads(raw: dict[str, Any], code: Path) -> None:
    """ZeRO off: the optimizer state is whole in each checkpoint; no conversion either
    (universal loading is for partitioned state)."""
    zero_config(code, zero_optimization={"stage": 0}, checkpoint={"load_universal": True})
    t = parse_stack_config(with_command(raw, code)).training
    assert world_size_problems(t, 24, 16) == [] and not resumes_universal(t)


def test_a_script_with_no_config_file_here_is_its_own_business(
    raw: dict[str, Any], code: Path
) -> None:
    """No `--deepspeed_config` in the code dir (torchrun DDP, an image path): nothing
    is judged or converted."""
    for command in ("torchrun train.py", "deepspeed train.py --deepspeed_config /opt/x.json"):
        t = parse_stack_config(with_command(raw, code, command)).training
        assert world_size_problems(t, 24, 16) == [] and not resumes_universal(t)
