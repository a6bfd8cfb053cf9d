"""Rules about synced training code (`training.code`): the directory, its size, the
script inside it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from infra.codedir import MAX_CODE_BYTES, MAX_CODE_FILES, listing
from infra.config.rules.image import PROJECT_DIR

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig


def code_dir(dir_: str) -> Path:
    """`training.code.dir` on this machine: relative paths are the project's."""
    path = Path(dir_)
    return path if path.is_absolute() else PROJECT_DIR / path


def code(cfg: StackConfig) -> list[str]:
    t = cfg.training
    if t.code.dir is None:
        return []
    root = code_dir(t.code.dir)
    if not root.is_dir():
        return [
            f"training.code.dir: {t.code.dir!r} is not a directory ({root}); allowed: a "
            "directory of training code, relative to the project or absolute"
        ]
    # Paths and sizes only: the program reads and hashes the files once, later
    # (infra/components/code.py).
    files = listing(root, t.code.exclude)
    size = sum(p.stat().st_size for p in files.values())
    out = []
    if len(files) > MAX_CODE_FILES or size > MAX_CODE_BYTES:
        out.append(
            f"training.code.dir: {t.code.dir!r} holds {len(files)} files, "
            f"{size / (1 << 20):.1f} MiB; allowed: at most {MAX_CODE_FILES} files and "
            f"{MAX_CODE_BYTES >> 20} MiB of code (datasets belong in training.datasets or "
            "the data dir; add what is not code to training.code.exclude)"
        )
    if t.command is not None:
        return out  # the command's script: infra/config/rules/command.py
    script = PurePosixPath(t.script)
    if script.is_absolute() or ".." in script.parts:
        out.append(
            f"training.script: {t.script!r} is a path in the image; allowed: with "
            f"training.code.dir set, a path inside {t.code.dir!r}, e.g. 'train.py'"
        )
    elif script.as_posix() not in files:
        out.append(
            f"training.script: {t.script!r} is not a file of training.code.dir "
            f"{t.code.dir!r} (excludes applied); allowed: one of its files, e.g. "
            f"{', '.join(sorted(p for p in files if p.endswith('.py'))[:5]) or 'train.py'}"
        )
    return out
