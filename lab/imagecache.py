"""The lab hosts' image stores, kept across `lab down` / `lab up`.

Every engine test module brings a lab up from nothing and deploys on it, and each lab
host's dockerd then pulled the 1.2 GB training image from the lab registry again: about
30 s of one core per host, each module, most of what a module's setup cost. `lab down`
now moves each host's image store (the overlay2 layers and the image and layer
databases) aside, and `lab up` moves it into the new host's data root before dockerd
starts. Everything else of the host is new as before: swarm, containers, volumes,
networks, the engine's id. The containers' own layers (their writable and init layers)
are dropped first, so nothing of a container outlives its lab.

Moves are renames, on the lab root's file system (`<root>-images/`): instant, and
nothing is copied. A host whose store cannot be renamed (another file system, a
store over `MAX_KEEP_BYTES`) starts empty, as before. `DSS_LAB_IMAGE_CACHE=0` turns it off.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PARTS = ("image", "overlay2")
"""What of a data root is the image store (the classic overlay2 graph driver)."""
MAX_KEEP_BYTES = 12 * 1024**3
"""A host's store over this is dropped, not kept: old image versions pile up."""


def enabled() -> bool:
    return os.environ.get("DSS_LAB_IMAGE_CACHE", "1") != "0"


def cache_dir(root: Path) -> Path:
    """Beside the lab root, so that moving a store there is a rename."""
    return root.parent / f"{root.name}-images"


def slot(root: Path, host_dir: Path, data_root: Path) -> Path:
    """Where host `h<i>`'s store for one engine waits: `<cache>/<engine data dir>/h<i>`."""
    return cache_dir(root) / data_root.name / host_dir.name


def drop_container_layers(data_root: Path) -> list[str]:
    """Remove the writable and init layers of every container (all are gone with the
    lab) and their short links; returns the layer ids removed."""
    mounts = data_root / "image" / "overlay2" / "layerdb" / "mounts"
    layers = data_root / "overlay2"
    removed: list[str] = []
    if not mounts.is_dir():
        return removed
    for m in mounts.iterdir():
        for ref in ("mount-id", "init-id"):
            f = m / ref
            if not f.is_file():
                continue
            layer = f.read_text().strip()
            if not layer or "/" in layer or layer.startswith("."):
                continue
            link = layers / layer / "link"
            if link.is_file():
                short = link.read_text().strip()
                if short and "/" not in short:
                    (layers / "l" / short).unlink(missing_ok=True)
            shutil.rmtree(layers / layer, ignore_errors=True)
            removed.append(layer)
        shutil.rmtree(m, ignore_errors=True)
    return removed


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def stash(root: Path, host_dir: Path, data_root: Path) -> str:
    """Move a stopped host's image store out of its data root (before the root is
    removed); returns what was done, for the log."""
    if not enabled() or not all((data_root / p).is_dir() for p in PARTS):
        return "no store"
    drop_container_layers(data_root)
    if _size(data_root / "overlay2") > MAX_KEEP_BYTES:
        return f"store over {MAX_KEEP_BYTES >> 30} GiB dropped"
    dest = slot(root, host_dir, data_root)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        for p in PARTS:
            os.rename(data_root / p, dest / p)
    except OSError as e:  # another file system: start empty next time
        shutil.rmtree(dest, ignore_errors=True)
        return f"not kept ({e.strerror})"
    return "kept"


def restore(root: Path, host_dir: Path, data_root: Path) -> bool:
    """Move a kept store into a new, empty data root (before its dockerd starts)."""
    src = slot(root, host_dir, data_root)
    if not enabled() or not all((src / p).is_dir() for p in PARTS):
        return False
    if any((data_root / p).exists() for p in PARTS):
        return False
    data_root.mkdir(parents=True, exist_ok=True)
    try:
        for p in PARTS:
            os.rename(src / p, data_root / p)
    except OSError:
        for p in PARTS:
            shutil.rmtree(data_root / p, ignore_errors=True)
        return False
    shutil.rmtree(src, ignore_errors=True)
    return True
