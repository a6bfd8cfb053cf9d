"""Content hashes: names and tags that change exactly when their content does."""

from __future__ import annotations

import hashlib
from pathlib import Path


def content_hash(value: str | bytes, length: int = 12) -> str:
    """Short sha256 of a value, for names and tags that must change with content."""
    data = value.encode() if isinstance(value, str) else value
    return hashlib.sha256(data).hexdigest()[:length]


def tree_hash(root: Path, length: int = 12) -> str:
    """Content hash of a directory (paths and bytes, sorted): the image tag.

    A one-line change anywhere in the build context gives a new tag, and the same
    tree always gives the same tag on every machine.
    """
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:length]
