"""infra.providers.queuecode: a waiting job's code carried as a Swarm config, against a
fake of the leader's configs API (fakeconfigs.py)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from infra.providers import queue, queuecode
from infra.providers.hostops import HostError
from infra.render.code import bundle
from tests.unit.infra.providers.fakeconfigs import Client, FakeConfigs

pytestmark = pytest.mark.unit


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeConfigs:
    fake = FakeConfigs()
    monkeypatch.setattr(queue, "docker_client", lambda _ep, _ssh=None: Client(fake))
    return fake


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A code dir: train.py and an executable helper, and a cache the excludes leave."""
    root = tmp_path / "code"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "pkg" / "run.sh", 0o755)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"\0")
    return root


def props(code: Path, **kw: Any) -> dict[str, Any]:
    digest = bundle(code, ["__pycache__"]).digest
    base = {"leader_endpoint": {"url": "unix:///x.sock"}, "job": "exp-b", "digest": digest,
            "source": str(code), "exclude": ["__pycache__"]}  # fmt: skip
    return {**base, **kw}


def members(api: FakeConfigs) -> dict[str, int]:
    """The carried tar's members and their modes."""
    got = queuecode.code_bytes(api, "exp-b")
    assert got is not None
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(got[1]))) as tar:
        return {m.name: m.mode for m in tar.getmembers()}


def test_create_carries_the_bundle_under_its_digest(api: FakeConfigs, code: Path) -> None:
    """The config `dss-queue-code.<job>`: the bundle's files and manifest under
    `<digest>/` (excludes left out, modes kept), gzipped, its digest labelled."""
    p = props(code)
    queuecode.QueueCodeProvider().create(p)
    d = p["digest"]
    got = queuecode.code_bytes(api, "exp-b")
    assert got is not None and got[0] == d
    assert members(api) == {f"{d}/pkg/run.sh": 0o755, f"{d}/train.py": 0o644,
                            f"{d}/.dss-code.sha256": 0o644}  # fmt: skip


def test_the_same_files_give_the_same_bytes(code: Path) -> None:
    """No time or name in the gzip header: what the config holds depends on the files."""
    assert queuecode.packed(bundle(code, [])) == queuecode.packed(bundle(code, []))


def test_code_changed_after_the_preview_is_refused(api: FakeConfigs, code: Path) -> None:
    """The dir no longer has the digest the program computed: refused, nothing made."""
    p = props(code)
    (code / "train.py").write_text("print('edited')\n")
    with pytest.raises(HostError, match="changed after the preview"):
        queuecode.QueueCodeProvider().create(p)
    assert api.by_id == {}


def test_a_new_digest_remakes_the_config(api: FakeConfigs, code: Path) -> None:
    """An update with another digest replaces the config's data under the same name."""
    p = queuecode.QueueCodeProvider()
    old = props(code)
    p.create(old)
    (code / "train.py").write_text("print('v2')\n")
    new = props(code)
    assert p.diff("x", old, new).changes and not p.diff("x", old, new).replaces
    p.update("x", old, new)
    got = queuecode.code_bytes(api, "exp-b")
    assert got is not None and got[0] == new["digest"] != old["digest"]
    assert len(api.by_id) == 1


def test_another_checkouts_path_is_no_change(code: Path) -> None:
    """`source` and `exclude` are not compared: another checkout's path is no change."""
    p = props(code)
    other = {**p, "source": "/elsewhere/code", "exclude": []}
    assert not queuecode.QueueCodeProvider().diff("x", p, other).changes


def test_read_shows_the_labelled_digest_and_a_gone_config(api: FakeConfigs, code: Path) -> None:
    """A refresh reads the digest the config is labelled with; a config gone reads gone."""
    p = queuecode.QueueCodeProvider()
    made = p.create(props(code))
    assert (p.read(made.id, props(code)).outs or {})["digest"] == props(code)["digest"]
    p.delete(made.id, props(code))
    assert api.by_id == {} and p.read(made.id, props(code)).id is None


def test_large_code_is_not_carried(code: Path) -> None:
    """A bundle whose gzipped tar passes MAX_CARRIED is not carried."""
    assert queuecode.carried(bundle(code, []))
    (code / "weights.bin").write_bytes(os.urandom(queuecode.MAX_CARRIED + 1))
    assert not queuecode.carried(bundle(code, []))
