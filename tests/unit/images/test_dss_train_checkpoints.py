"""Checkpoint selection: only complete, intact checkpoints are resumed from."""

from pathlib import Path

import pytest
from dss_train import DssError
from dss_train import checkpoints as ck

pytestmark = pytest.mark.unit


def make_ckpt(root: Path, step: int, complete: bool = True) -> Path:
    d = root / ck.tag_for_step(step)
    (d / "sub").mkdir(parents=True)
    (d / "mp_rank_00_model_states.pt").write_bytes(b"model" * 100 + bytes([step % 256]))
    (d / "sub" / "optim.pt").write_bytes(b"optim" * 50)
    if complete:
        ck.write_manifest(d, step)
    return d


def test_latest_complete_checkpoint_is_selected(tmp_path: Path) -> None:
    """The newest checkpoint with a valid manifest wins."""
    for s in (10, 20, 30):
        make_ckpt(tmp_path, s)
    assert ck.select_latest(tmp_path)[0] == (30, "step_00000030")


def test_half_written_checkpoint_is_skipped(tmp_path: Path) -> None:
    """A newer folder without manifest (still being written) is never picked."""
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20, complete=False)
    chosen, skipped = ck.select_latest(tmp_path)
    assert chosen == (10, "step_00000010")
    assert "incomplete" in skipped[0]


def test_truncated_file_is_skipped(tmp_path: Path) -> None:
    """A checkpoint whose file size differs from its manifest is skipped."""
    make_ckpt(tmp_path, 10)
    d = make_ckpt(tmp_path, 20)
    (d / "sub" / "optim.pt").write_bytes(b"short")
    assert ck.select_latest(tmp_path)[0] == (10, "step_00000010")


def test_same_size_corruption_is_skipped(tmp_path: Path) -> None:
    """A checkpoint with a flipped byte (same size) fails its checksum and is skipped."""
    make_ckpt(tmp_path, 10)
    d = make_ckpt(tmp_path, 20)
    f = d / "mp_rank_00_model_states.pt"
    data = bytearray(f.read_bytes())
    data[0] ^= 0xFF
    f.write_bytes(bytes(data))
    assert ck.select_latest(tmp_path)[0] == (10, "step_00000010")


def test_missing_file_is_skipped(tmp_path: Path) -> None:
    """A checkpoint missing a file listed in its manifest is skipped."""
    make_ckpt(tmp_path, 10)
    d = make_ckpt(tmp_path, 20)
    (d / "sub" / "optim.pt").unlink()
    assert ck.select_latest(tmp_path)[0] == (10, "step_00000010")


def test_garbage_manifest_is_skipped(tmp_path: Path) -> None:
    """An unreadable manifest makes the checkpoint incomplete."""
    make_ckpt(tmp_path, 10)
    d = make_ckpt(tmp_path, 20)
    (d / ck.MANIFEST).write_text("{not json")
    assert ck.select_latest(tmp_path)[0] == (10, "step_00000010")


def test_no_checkpoint_gives_none(tmp_path: Path) -> None:
    """An empty or missing root means a fresh start."""
    assert ck.select_latest(tmp_path / "nope")[0] is None
    assert ck.select_latest(tmp_path)[0] is None


def test_foreign_folders_are_ignored(tmp_path: Path) -> None:
    """Folders not named step_<N> (e.g. DeepSpeed's 'latest' file) are ignored."""
    make_ckpt(tmp_path, 10)
    (tmp_path / "global_step99").mkdir()
    (tmp_path / "latest").write_text("global_step99")
    assert ck.select_latest(tmp_path)[0] == (10, "step_00000010")


def test_steps_sort_numerically(tmp_path: Path) -> None:
    """Step 100 is newer than step 99."""
    make_ckpt(tmp_path, 99)
    make_ckpt(tmp_path, 100)
    assert ck.select_latest(tmp_path)[0] == (100, "step_00000100")


def test_prune_keeps_newest_complete(tmp_path: Path) -> None:
    """Pruning keeps the newest N complete checkpoints and a newer in-progress one."""
    for s in (10, 20, 30, 40):
        make_ckpt(tmp_path, s)
    make_ckpt(tmp_path, 50, complete=False)
    removed = ck.prune(tmp_path, keep=2)
    assert sorted(removed) == ["step_00000010", "step_00000020"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000030",
        "step_00000040",
        "step_00000050",
    ]


def test_manifest_is_not_left_as_temp(tmp_path: Path) -> None:
    """Writing a manifest leaves no temp file behind."""
    d = make_ckpt(tmp_path, 10)
    assert not (d / f"{ck.MANIFEST}.tmp").exists()
    assert ck.verify(d) is None


def test_saved_world_size_from_the_manifest(tmp_path: Path) -> None:
    """The manifest records the world size a checkpoint was saved with."""
    path = make_ckpt(tmp_path, 10, complete=False)
    ck.write_manifest(path, 10, {"world_size": 8})
    assert ck.saved_world_size(path) == 8


def test_saved_world_size_unknown_without_it(tmp_path: Path) -> None:
    """An older manifest without a world size (or none at all) says nothing."""
    path = make_ckpt(tmp_path, 10, complete=False)
    assert ck.saved_world_size(path) is None
    ck.write_manifest(path, 10)
    assert ck.saved_world_size(path) is None


def fake_converter(tmp_path: Path, fail: bool = False) -> Path:
    """An interpreter stand-in for `python -m deepspeed.checkpoint.ds_to_universal`:
    writes a `zero/` folder into --output_folder and `latest_universal` beside it (as
    DeepSpeed's does), counting its calls; or fails with DeepSpeed's kind of message."""
    script = tmp_path / "python"
    body = (
        'echo "AssertionError: no optimizer files" >&2; exit 1'
        if fail
        else 'while [ $# -gt 0 ]; do [ "$1" = --output_folder ] && out=$2; shift; done\n'
        'mkdir -p "$out/zero/w"; echo t > "$out/zero/w/fp32.pt"\n'
        'echo x > "$(dirname "$out")/latest_universal"; echo call >> "' + str(tmp_path) + '/calls"'
    )
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_universal_conversion_lands_whole_under_its_tag(tmp_path: Path) -> None:
    """The conversion is renamed into universal/<tag>, the only one kept, with no
    temporary folder or converter file left beside it."""
    root = tmp_path / "ckpt"
    make_ckpt(root, 10)
    make_ckpt(root, 20)
    python = fake_converter(tmp_path)
    ck.to_universal(root, "step_00000010", str(python))
    assert ck.to_universal(root, "step_00000020", str(python)) == root / ck.UNIVERSAL
    assert sorted(p.name for p in (root / ck.UNIVERSAL).iterdir()) == ["step_00000020"]
    assert (root / ck.UNIVERSAL / "step_00000020" / "zero" / "w" / "fp32.pt").is_file()
    assert ck.select_latest(root)[0] == (20, "step_00000020")


def test_universal_conversion_is_reused(tmp_path: Path) -> None:
    """A second start with the same world size change loads the finished conversion
    instead of converting again."""
    root = tmp_path / "ckpt"
    make_ckpt(root, 10)
    python = fake_converter(tmp_path)
    ck.to_universal(root, "step_00000010", str(python))
    ck.to_universal(root, "step_00000010", str(python))
    assert (tmp_path / "calls").read_text().splitlines() == ["call"]


def test_failed_universal_conversion_names_the_checkpoint(tmp_path: Path) -> None:
    """A converter that fails raises an error with the checkpoint and its last line,
    and leaves no half-written folder to be loaded."""
    root = tmp_path / "ckpt"
    make_ckpt(root, 10)
    with pytest.raises(DssError, match=r"step_00000010: AssertionError: no optimizer files"):
        ck.to_universal(root, "step_00000010", str(fake_converter(tmp_path, fail=True)))
    assert list((root / ck.UNIVERSAL).iterdir()) == []
