"""infra.render.code: the bundle of a code dir, and its install and verify scripts run
for real with sh, tar and sha256sum on a scratch directory."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from infra.layout import CODE_MANIFEST, TRAIN_UID
from infra.render.code import bundle, code_path, install_script, verify_script

pytestmark = pytest.mark.unit

EXCLUDE = [".git", "__pycache__", "*.pyc"]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A code dir: a script, a package, and what a checkout also holds."""
    root = tmp_path / "src"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "train.py").write_text("print('v1')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (root / ".git" / "HEAD").write_text("ref: main\n")
    return root


def sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def install(b_root: Path, base: Path, keep: list[str] | None = None) -> str:
    """Install the bundle of `b_root` under `base` as the provider does; its digest."""
    b = bundle(b_root, EXCLUDE)
    base.parent.mkdir(parents=True, exist_ok=True)
    archive = base.parent / f"{b.digest}.tar"
    archive.write_bytes(b.tar(b.digest))
    proc = sh(install_script("r", b.digest, str(archive), keep or [], base=str(base)))
    assert proc.returncode == 0, proc.stderr
    assert not archive.exists(), "the archive is removed after unpacking"
    return b.digest


def test_bundle_leaves_out_excluded_names(src: Path) -> None:
    """.git, __pycache__ and *.pyc are not code: only the script and the package."""
    assert sorted(bundle(src, EXCLUDE).paths()) == ["pkg/model.py", "train.py"]


def test_digest_follows_content_only(src: Path, tmp_path: Path) -> None:
    """The same files elsewhere give the same digest; a one-line change gives another."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(src), str(copy)], check=True)
    assert bundle(copy, EXCLUDE).digest == bundle(src, EXCLUDE).digest
    (copy / "train.py").write_text("print('v2')\n")
    assert bundle(copy, EXCLUDE).digest != bundle(src, EXCLUDE).digest


def test_symlink_out_of_the_code_dir_is_left_out(src: Path, tmp_path: Path) -> None:
    """A link to a file outside the code dir does not carry that file in."""
    (tmp_path / "secret.txt").write_text("not code\n")
    (src / "leak.txt").symlink_to(tmp_path / "secret.txt")
    assert "leak.txt" not in bundle(src, EXCLUDE).paths()


def test_tar_is_owned_by_the_training_uid_and_reproducible(src: Path) -> None:
    """Every member belongs to the tasks' uid, the manifest is inside, and the bytes do
    not depend on when the files were written."""
    b = bundle(src, EXCLUDE)
    data = b.tar("d")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert {m.uid for m in members} == {int(TRAIN_UID)}
    assert sorted(m.name for m in members) == [f"d/{CODE_MANIFEST}", "d/pkg/model.py", "d/train.py"]
    (src / "train.py").touch()
    assert bundle(src, EXCLUDE).tar("d") == data


def test_install_then_verify(src: Path, tmp_path: Path) -> None:
    """An installed version verifies; the files are those of the code dir."""
    base = tmp_path / "data" / "code"
    digest = install(src, base)
    assert (Path(code_path("r", digest, str(base))) / "train.py").read_text() == "print('v1')\n"
    assert sh(verify_script("r", digest, str(base))).returncode == 0


def test_verify_names_an_edited_or_missing_version(src: Path, tmp_path: Path) -> None:
    """An edited file fails with exit 4 naming it; a removed version with exit 3."""
    base = tmp_path / "data" / "code"
    digest = install(src, base)
    where = Path(code_path("r", digest, str(base)))
    (where / "train.py").write_text("print('edited on the host')\n")
    edited = sh(verify_script("r", digest, str(base)))
    assert (edited.returncode, "train.py: FAILED" in edited.stdout) == (4, True), edited
    subprocess.run(["rm", "-rf", str(where)], check=True)
    assert sh(verify_script("r", digest, str(base))).returncode == 3


def test_install_keeps_the_previous_version_and_prunes_older(src: Path, tmp_path: Path) -> None:
    """A new version keeps the one it replaces (its run may still import from it) and
    removes the rest."""
    base = tmp_path / "data" / "code"
    v1 = install(src, base)
    (src / "train.py").write_text("print('v2')\n")
    v2 = install(src, base, keep=[v1])
    (src / "train.py").write_text("print('v3')\n")
    v3 = install(src, base, keep=[v2])
    assert sorted(p.name for p in (base / "r").iterdir()) == sorted([v2, v3])


def test_install_repairs_an_edited_version(src: Path, tmp_path: Path) -> None:
    """Installing over a version whose files were edited restores them."""
    base = tmp_path / "data" / "code"
    digest = install(src, base)
    where = Path(code_path("r", digest, str(base)))
    (where / "train.py").write_text("edited\n")
    install(src, base)
    assert (where / "train.py").read_text() == "print('v1')\n"
