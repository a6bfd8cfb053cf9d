"""lab.imagecache: a host's image store kept across `lab down` / `lab up`, its
containers' layers dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import imagecache

pytestmark = pytest.mark.unit


def _store(data: Path, layers: list[str], containers: dict[str, tuple[str, str]]) -> None:
    """A data root as dockerd leaves it: image layers and containers' rw/init layers,
    each with its short link under overlay2/l, and the layer db's mounts."""
    (data / "overlay2" / "l").mkdir(parents=True)
    for layer in [*layers, *(x for pair in containers.values() for x in pair)]:
        (data / "overlay2" / layer / "diff").mkdir(parents=True)
        (data / "overlay2" / layer / "link").write_text(f"S{layer}")
        (data / "overlay2" / "l" / f"S{layer}").symlink_to(f"../{layer}/diff")
    mounts = data / "image" / "overlay2" / "layerdb" / "mounts"
    mounts.mkdir(parents=True)
    for cid, (rw, init) in containers.items():
        (mounts / cid).mkdir()
        (mounts / cid / "mount-id").write_text(rw)
        (mounts / cid / "init-id").write_text(init)
    (data / "swarm").mkdir()
    (data / "containers").mkdir()


def test_container_layers_and_their_links_are_dropped(tmp_path: Path) -> None:
    data = tmp_path / "h1" / "data-28"
    _store(data, ["base", "top"], {"c1": ("rw1", "rw1-init")})
    assert sorted(imagecache.drop_container_layers(data)) == ["rw1", "rw1-init"]
    assert sorted(p.name for p in (data / "overlay2").iterdir()) == ["base", "l", "top"]
    assert sorted(p.name for p in (data / "overlay2" / "l").iterdir()) == ["Sbase", "Stop"]
    assert not any((data / "image" / "overlay2" / "layerdb" / "mounts").iterdir())


def test_a_store_moves_aside_at_down_and_back_at_up(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    data = root / "h1" / "data-28"
    _store(data, ["base"], {"c1": ("rw1", "rw1-init")})
    assert imagecache.stash(root, data.parent, data) == "kept"
    kept = tmp_path / "lab-images" / "data-28" / "h1"
    assert (kept / "overlay2" / "base").is_dir() and not (data / "overlay2").exists()
    # Only the image store leaves: the swarm and containers stay, to go with the root.
    assert (data / "swarm").is_dir() and (data / "containers").is_dir()
    new = tmp_path / "lab" / "h1" / "data-28"
    import shutil

    shutil.rmtree(root)
    assert imagecache.restore(root, new.parent, new)
    assert (new / "overlay2" / "base" / "diff").is_dir()
    assert (new / "image" / "overlay2" / "layerdb").is_dir()
    assert not (new / "swarm").exists()
    assert not kept.exists()


def test_another_engines_store_is_not_restored(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    data = root / "h1" / "data-28"
    _store(data, ["base"], {})
    imagecache.stash(root, data.parent, data)
    other = root / "h1" / "data-20.10"
    assert not imagecache.restore(root, other.parent, other)
    assert not other.exists()


def test_a_store_is_never_merged_into_a_data_root_that_has_one(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    data = root / "h1" / "data-28"
    _store(data, ["base"], {})
    imagecache.stash(root, data.parent, data)
    (data / "overlay2").mkdir()
    assert not imagecache.restore(root, data.parent, data)
    assert (tmp_path / "lab-images" / "data-28" / "h1" / "overlay2" / "base").is_dir()


def test_turned_off_nothing_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSS_LAB_IMAGE_CACHE", "0")
    root = tmp_path / "lab"
    data = root / "h1" / "data-28"
    _store(data, ["base"], {})
    assert imagecache.stash(root, data.parent, data) == "no store"
    assert (data / "overlay2" / "base").is_dir()
    assert not (tmp_path / "lab-images").exists()
