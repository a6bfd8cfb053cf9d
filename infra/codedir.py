"""A training code directory on the machine that runs Pulumi (`training.code.dir`):
which of its files are code, and how much code is allowed.

Below both of its users: the config rules judge a code dir from its listing
(infra/config/rules/code.py) and the renderer bundles the same listing
(infra/render/code.py), so neither part imports the other for it. Nothing here reads
a file: paths and names only.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

from infra.layout import CODE_MANIFEST

# Code, not data: a directory past these is a mistake (a dataset, a virtualenv, a
# checkpoint), and every byte of it would travel on each change.
MAX_CODE_BYTES = 64 << 20
MAX_CODE_FILES = 10_000


def excluded(rel: str, patterns: Sequence[str]) -> bool:
    """Whether any component of `rel` (a `/` path) matches one of the glob `patterns`."""
    return any(fnmatch.fnmatchcase(part, p) for part in rel.split("/") for p in patterns)


def listing(root: Path, exclude: Sequence[str]) -> dict[str, Path]:
    """The files of the code dir `root` by their `/` path under it, in path order:
    regular files not under an excluded name (symlinks are followed only to files
    inside `root`, so a link cannot smuggle in the rest of the machine). Nothing is
    read: the config rules judge sizes and the script from this alone."""
    real_root = root.resolve()
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == CODE_MANIFEST or excluded(rel, exclude) or not path.is_file():
            continue
        if path.resolve().is_relative_to(real_root):
            out[rel] = path
    return out
