"""infra.codedir: which files of a code dir are code, on a scratch directory."""

from __future__ import annotations

from pathlib import Path

import pytest

import infra.render.code
from infra.codedir import MAX_CODE_BYTES, MAX_CODE_FILES, excluded, listing
from infra.layout import CODE_MANIFEST

pytestmark = pytest.mark.unit

EXCLUDE = [".git", "__pycache__", "*.pyc"]


def test_excluded_matches_any_path_component() -> None:
    """A pattern excludes a name anywhere in the path, not only at the top."""
    assert excluded("a/__pycache__/b.py", EXCLUDE)
    assert not excluded("a/cache/b.py", EXCLUDE)


def test_listing_keeps_code_files_inside_the_dir(tmp_path: Path) -> None:
    """Regular files by `/` path, in order; excluded names, the manifest and links out
    of the dir left out."""
    root = tmp_path / "src"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "train.py").write_text("print('v1')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (root / CODE_MANIFEST).write_text("old\n")
    (tmp_path / "secret.txt").write_text("no\n")
    (root / "outside.txt").symlink_to(tmp_path / "secret.txt")
    (root / "inside.py").symlink_to(root / "train.py")
    assert list(listing(root, EXCLUDE)) == ["inside.py", "pkg/model.py", "train.py"]


def test_the_renderer_names_the_same_pieces() -> None:
    """infra.render.code still offers the listing and the limits under their old names."""
    assert infra.render.code.listing is listing and infra.render.code.excluded is excluded
    assert (infra.render.code.MAX_CODE_BYTES, infra.render.code.MAX_CODE_FILES) == (
        MAX_CODE_BYTES,
        MAX_CODE_FILES,
    )
