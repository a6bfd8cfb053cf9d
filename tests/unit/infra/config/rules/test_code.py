"""infra.config.rules.code: each rule with its exact message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.config import code_dir, parse_stack_config
from tests.unit.infra.config.checks import problems

pytestmark = pytest.mark.unit


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A code dir with a training script and a package beside it."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("print('step')\n")
    (tmp_path / "pkg" / "model.py").write_text("X = 1\n")
    return tmp_path


def test_synced_code_with_a_relative_script_passes(raw: dict[str, Any], code: Path) -> None:
    """A code dir that holds the relative script is accepted."""
    raw["training"] = {**raw["training"], "code": {"dir": str(code)}, "script": "train.py"}
    assert parse_stack_config(raw).training.code.dir == str(code)


def test_missing_code_dir(raw: dict[str, Any], tmp_path: Path) -> None:
    """A code dir that does not exist is refused, naming it."""
    gone = tmp_path / "gone"
    raw["training"] = {**raw["training"], "code": {"dir": str(gone)}, "script": "train.py"}
    assert problems(raw) == [
        f"training.code.dir: {str(gone)!r} is not a directory ({gone}); allowed: a directory "
        "of training code, relative to the project or absolute"
    ]


def test_image_script_with_synced_code(raw: dict[str, Any], code: Path) -> None:
    """The image's absolute script path with a code dir is refused: it would run the
    image's code, not the synced one."""
    raw["training"] = {**raw["training"], "code": {"dir": str(code)}}
    assert problems(raw) == [
        f"training.script: '/opt/dss/train.py' is a path in the image; allowed: with "
        f"training.code.dir set, a path inside {str(code)!r}, e.g. 'train.py'"
    ]


def test_script_not_in_code_dir(raw: dict[str, Any], code: Path) -> None:
    """A script the code dir does not hold is refused, naming the files it does."""
    raw["training"] = {**raw["training"], "code": {"dir": str(code)}, "script": "main.py"}
    assert problems(raw) == [
        f"training.script: 'main.py' is not a file of training.code.dir {str(code)!r} "
        "(excludes applied); allowed: one of its files, e.g. pkg/model.py, train.py"
    ]


def test_excluded_script(raw: dict[str, Any], code: Path) -> None:
    """A script under an excluded name does not count as part of the code."""
    raw["training"] = {
        **raw["training"],
        "code": {"dir": str(code), "exclude": ["train.py"]},
        "script": "train.py",
    }
    assert [p.split(";")[0] for p in problems(raw)] == [
        f"training.script: 'train.py' is not a file of training.code.dir {str(code)!r} "
        "(excludes applied)"
    ]


def test_code_dir_too_large(
    raw: dict[str, Any], code: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A code dir past the file limit (a dataset, a virtualenv) is refused."""
    monkeypatch.setattr("infra.config.rules.code.MAX_CODE_FILES", 1)
    raw["training"] = {**raw["training"], "code": {"dir": str(code)}, "script": "train.py"}
    assert problems(raw) == [
        f"training.code.dir: {str(code)!r} holds 2 files, 0.0 MiB; allowed: at most 1 files "
        "and 64 MiB of code (datasets belong in training.datasets or the data dir; add what "
        "is not code to training.code.exclude)"
    ]


def test_relative_code_dir_is_the_projects() -> None:
    """A relative code dir is resolved against the project, not the working directory."""
    assert code_dir("images") == Path(__file__).resolve().parents[5] / "images"
