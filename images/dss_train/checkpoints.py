"""Checkpoint bookkeeping (pure Python, no torch).

A checkpoint is the folder <root>/step_<NNNNNNNN>/ written by DeepSpeed's
save_checkpoint. It counts as complete only once rank 0 has written
MANIFEST.json into it (atomically: temp file, fsync, rename) after all ranks
finished writing; the manifest lists every file with its size and sha256. On
start the newest checkpoint whose manifest exists and matches the files is
chosen, so a half-written or corrupted checkpoint is never picked up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from . import DssError

MANIFEST = "MANIFEST.json"
UNIVERSAL = "universal"
"""The folder under a run's checkpoint root that holds universal conversions (not a
step_* name, so selection and pruning never see it)."""
_CONVERTED = "CONVERTED"
_TAG = re.compile(r"^step_(\d{8,})$")


def tag_for_step(step: int) -> str:
    return f"step_{step:08d}"


def step_of_tag(tag: str) -> int | None:
    m = _TAG.match(tag)
    return int(m.group(1)) if m else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(ckpt: Path) -> list[Path]:
    return sorted(p for p in ckpt.rglob("*") if p.is_file() and p.name != MANIFEST
                  and not p.name.startswith(MANIFEST))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(ckpt: Path, step: int, extra: dict[str, Any] | None = None) -> Path:
    """Mark a fully written checkpoint folder complete (call once, on one rank)."""
    files = {str(p.relative_to(ckpt)): {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in _files(ckpt)}
    if not files:
        raise ValueError(f"checkpoint {ckpt} has no files")
    body = {"step": step, "files": files, **(extra or {})}
    tmp = ckpt / f"{MANIFEST}.tmp"
    with tmp.open("w") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt / MANIFEST)
    _fsync_dir(ckpt)
    return ckpt / MANIFEST


def saved_world_size(ckpt: Path) -> int | None:
    """The world size a complete checkpoint was saved with (its manifest's
    `world_size`), or None when the manifest does not say."""
    try:
        value = json.loads((ckpt / MANIFEST).read_text()).get("world_size")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def verify(ckpt: Path, hashes: bool = True) -> str | None:
    """None when ckpt is complete and intact, else the reason it is not."""
    mpath = ckpt / MANIFEST
    if not mpath.is_file():
        return "no manifest (incomplete)"
    try:
        body = json.loads(mpath.read_text())
        files = body["files"]
        step = body["step"]
    except (ValueError, KeyError, TypeError):
        return "unreadable manifest"
    if step != step_of_tag(ckpt.name):
        return f"manifest step {step} does not match folder name"
    for rel, meta in files.items():
        p = ckpt / rel
        if not p.is_file():
            return f"missing file {rel}"
        if p.stat().st_size != meta.get("size"):
            return f"size mismatch in {rel}"
        if hashes and _sha256(p) != meta.get("sha256"):
            return f"checksum mismatch in {rel}"
    return None


def candidates(root: Path) -> list[tuple[int, Path]]:
    """All step_* folders under root, newest first (complete or not)."""
    if not root.is_dir():
        return []
    out = [(s, p) for p in root.iterdir() if p.is_dir() and (s := step_of_tag(p.name)) is not None]
    return sorted(out, reverse=True)


def select_latest(root: Path, hashes: bool = True) -> tuple[tuple[int, str] | None, list[str]]:
    """(step, tag) of the newest complete checkpoint (or None) and notes on skipped ones."""
    skipped: list[str] = []
    for step, path in candidates(root):
        reason = verify(path, hashes=hashes)
        if reason is None:
            return (step, path.name), skipped
        skipped.append(f"{path.name}: {reason}")
    return None, skipped


def prune(root: Path, keep: int) -> list[str]:
    """Delete complete checkpoints beyond the newest `keep`, and incomplete ones older
    than the newest complete one. Returns the removed tags."""
    removed: list[str] = []
    complete_seen = 0
    for _step, path in candidates(root):
        ok = (path / MANIFEST).is_file()
        if ok:
            complete_seen += 1
            if complete_seen <= keep:
                continue
        elif complete_seen == 0:
            continue  # may still be being written by a live run: leave it
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    return removed


def to_universal(root: Path, tag: str, python: str) -> Path:
    """The universal form of the complete checkpoint <root>/<tag>, converted by
    DeepSpeed's `ds_to_universal` with `python` unless an earlier start already did;
    returns the folder that holds it (load it with tag=`tag` and load_universal).

    Written under a temporary name and renamed, so a conversion cut short is never
    loaded; only the newest conversion is kept.
    """
    parent = root / UNIVERSAL
    out = parent / tag
    if (out / _CONVERTED).is_file():
        return parent
    parent.mkdir(exist_ok=True)
    tmp = parent / f".{tag}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [python, "-m", "deepspeed.checkpoint.ds_to_universal",
           "--input_folder", str(root / tag), "--output_folder", str(tmp),
           # The step is in our manifest, not in DeepSpeed's universal info.
           "--inject_missing_state", "--num_extract_workers", "1", "--num_merge_workers", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise DssError(f"ds_to_universal could not convert {root / tag}: "
                       f"{lines[-1] if lines else f'exit {proc.returncode}'}")
    (tmp / _CONVERTED).write_text(tag + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    _fsync_dir(parent)
    for old in parent.iterdir():  # older conversions, and the converter's `latest_universal`
        if old.name == tag:
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    return parent
