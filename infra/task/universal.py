"""A command's newest DeepSpeed checkpoint in its universal form, before each start:
what lets a user's script resume at another world size (`scripts/job resize`) with
its own `engine.load_checkpoint(dir)`, unchanged.

    universal.py CHECKPOINT_DIR

Run by the run's supervisor (infra/task/supervisor.sh, its `universal` part) with the
image's python before each attempt, only for a `training.command` whose DeepSpeed
config partitions the optimizer state (ZeRO stage 1-3) and says
`"checkpoint": {"load_universal": true}`, and only by the supervisor that starts rank 0
(the others' ranks wait for it in their rendezvous). With that key, DeepSpeed 0.17's
`load_checkpoint(dir)` reads the tag to load from `dir/latest_universal`, not from
`dir/latest`, and loads it as a universal checkpoint, which holds each parameter's
optimizer state whole and so loads at any data-parallel size; a ZeRO checkpoint
loads only at the size it was saved at.

The script saves as it always does (`save_checkpoint(dir)`: the tag in `dir/latest`).
Here `dir/latest`'s tag T is converted by DeepSpeed's own `ds_to_universal` into
`dir/T_universal`, under a temporary name renamed when done, and `dir/latest_universal`
is written to name it (replaced, never edited in place). Nothing is converted twice:
a folder with this program's mark for T is kept. Only the newest conversion is kept
(older folders with the mark are removed; nothing else in the dir is touched).

No `dir/latest` (a first start): nothing to do. A conversion that fails leaves no
`latest_universal`, so the script's load can never pick an older step, and raises
here: the supervisor counts the attempt as failed, and its exit record names this
error (infra/task/exitrecord.py reads the traceback's last line).

Stdlib only, but for the `ds_to_universal` it runs as `python -m`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

LATEST = "latest"
LATEST_UNIVERSAL = "latest_universal"
SUFFIX = "_universal"
MARK = ".dss-universal"
"""In a finished conversion: the tag it was converted from (one line)."""


class ConversionFailed(Exception):
    """The newest checkpoint could not be made universal: why, naming it."""


def universal_name(tag: str) -> str:
    return f"{tag}{SUFFIX}"


def converted(root: Path, tag: str) -> bool:
    """Whether `root/<tag>_universal` is a finished conversion of `tag`."""
    mark = root / universal_name(tag) / MARK
    return mark.is_file() and mark.read_text().strip() == tag


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole through a temporary file: a reader sees the old or the new."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text)
    os.replace(tmp, path)


def convert(root: Path, tag: str) -> None:
    """`root/<tag>` into `root/<tag>_universal` by DeepSpeed's `ds_to_universal` (module
    doc). ConversionFailed: why (no partial folder is left)."""
    src, tmp = root / tag, root / f".{universal_name(tag)}.tmp"
    if not src.is_dir():
        raise ConversionFailed(f"{root / LATEST} names {tag!r}, which is not a folder of {root}")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
           "--input_folder", str(src), "--output_folder", str(tmp),
           # A script's own checkpoint has no universal_checkpoint_info of Megatron's:
           # the converter then injects what it needs.
           "--inject_missing_state"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        last = lines[-1] if lines else f"exit {proc.returncode}"
        raise ConversionFailed(
            f"DeepSpeed's ds_to_universal could not convert {src} (exit {proc.returncode}): {last}"
        )
    (tmp / MARK).write_text(tag + "\n")
    out = root / universal_name(tag)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def prune(root: Path, keep: str) -> list[str]:
    """Remove the conversions (folders with the mark) other than `keep`; their names."""
    gone = []
    for path in sorted(root.iterdir()):
        if path.name != keep and path.is_dir() and (path / MARK).is_file():
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path.name)
    return gone


def prepare(root: Path) -> str:
    """Make `root/latest_universal` name the universal form of `root/latest`'s tag,
    converting it when no earlier start did (module doc); the line that says what was
    done. ConversionFailed: why, `latest_universal` removed."""
    latest = root / LATEST
    if not latest.is_file():
        return f"universal: no {latest} yet; nothing to convert"
    tag = latest.read_text().strip()
    name = universal_name(tag)
    pointer = root / LATEST_UNIVERSAL
    if converted(root, tag):
        said = f"universal: {tag} converted already ({root / name})"
    else:
        # Gone first: the converter writes its own pointer (to its temporary folder),
        # and a failure must leave none that names an older step.
        pointer.unlink(missing_ok=True)
        try:
            convert(root, tag)
        except ConversionFailed:
            pointer.unlink(missing_ok=True)
            raise
        said = f"universal: {tag} converted to {root / name}"
    replace_text(pointer, name)
    gone = prune(root, name)
    return said + (f"; older conversions removed: {', '.join(gone)}" if gone else "")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: universal.py CHECKPOINT_DIR", file=sys.stderr)
        return 2
    print(prepare(Path(argv[0])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
