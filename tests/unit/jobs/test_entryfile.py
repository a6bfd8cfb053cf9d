"""jobs.entryfile: a waiting job's stack file written from its queue entry by a pass
run from a checkout that lacks it, and each reason it is not (the leader's configs
faked; the code dir is the project's examples/torchrun-ddp, relative to the project)."""

from __future__ import annotations

import contextlib
import gzip
import json
import types
from pathlib import Path
from typing import Any

import pytest

from infra.components.queue import code_bundle, entry_ask, entry_data
from infra.config import StackConfig
from infra.providers import queuecode
from infra.providers.fit import SwarmGpus
from infra.providers.queue import LABEL, ask_label, entry_name
from infra.render.code import bundle, tar_bytes
from jobs import command, entryfile, jobfile, queuerun, teardown
from ops.project import ROOT
from tests.unit.infra.providers.fakeconfigs import FakeConfigs
from tests.unit.jobs.conftest import Stateless
from tests.unit.jobs.test_queue import Ran

pytestmark = pytest.mark.unit

CODE = "examples/torchrun-ddp"
REV = "1f2e3d4c5b6a798877665544332211ffeeddccbb"


def submitted(training: dict[str, Any] | None = None) -> StackConfig:
    """exp1 as its submitter's checkout wrote it (queued at REV, code inside the
    project), parsed; its file then removed, as another checkout has none."""
    t = {"code": {"dir": CODE}, "script": "train.py", "nodes": 2, "gpus_per_node": 2,
         "queued": {"revision": REV}, **(training or {})}  # fmt: skip
    command.write_values("exp1", command.job_values("c1", t))
    cfg = command.job_settings("exp1")
    command.stack_file("exp1").unlink()
    return cfg


def put_entry(api: Any, cfg: StackConfig, **data: Any) -> None:
    """exp1's entry as its queued form's `up` made it from `cfg`, with `data` over it."""
    labels = {"state": "reserved", "priority": "0", "since": "1.000", "position": "1",
              "ask": ask_label(entry_ask(cfg)), "hosts": "lab-h1,lab-h2"}  # fmt: skip
    body = {**entry_data(cfg, code_bundle(cfg)), **data}
    api.create_config(
        entry_name("exp1"), _json(body), labels={LABEL + k: v for k, v in labels.items()}
    )


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True).encode()


@pytest.fixture
def leader(project: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The leader's configs (the `project` fixture's fake) and this checkout at REV."""
    monkeypatch.setattr(entryfile, "revision", lambda _root: REV)
    api = FakeConfigs()
    monkeypatch.setattr(command, "leader_api", lambda _cfg: api)
    return api


@pytest.fixture
def ran(leader: Any, monkeypatch: pytest.MonkeyPatch) -> Ran:
    """A pass's engine: the lock free, both hosts' GPUs free, each `up` kept."""
    engine = Ran()
    monkeypatch.setattr(command, "read_swarm", lambda *_a: SwarmGpus({"lab-h1": 2, "lab-h2": 2}))
    monkeypatch.setattr(command, "submit_lock", lambda *_a, **_k: contextlib.nullcontext())
    monkeypatch.setattr(command, "workspace_stack", engine.stack)
    return engine


def test_the_file_written_from_the_entry_is_the_job_submitted(leader: Any) -> None:
    """Same revision, same code here: the file is written in the queued form, and it
    parses to the config the submitter's file gave."""
    cfg = submitted({"steps": 40, "priority": 3})
    put_entry(leader, cfg)
    line = entryfile.write_from_entry("exp1", "c1", leader)
    digest = bundle(ROOT / CODE, [".git"]).digest
    assert line == f"job exp1: Pulumi.exp1.yaml written from its queue entry (revision " \
                   f"{REV[:12]}, code {digest})"  # fmt: skip
    assert command.job_settings("exp1") == cfg


@pytest.mark.parametrize(
    ("here", "said"),
    [
        ("0" * 40, f"submitted from revision {REV[:12]} while this checkout is at 000000000000"),
        ("", f"submitted from revision {REV[:12]} while this checkout is at none"),
    ],
)
def test_another_revision_is_refused(
    leader: Any, monkeypatch: pytest.MonkeyPatch, here: str, said: str
) -> None:
    """This checkout at another revision, or not a git checkout: refused, nothing written."""
    put_entry(leader, submitted())
    monkeypatch.setattr(entryfile, "revision", lambda _root: here)
    with pytest.raises(entryfile.CannotStart, match=said):
        entryfile.write_from_entry("exp1", "c1", leader)
    assert not command.stack_file("exp1").exists()


def test_another_revision_is_written_when_told(
    leader: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--any-revision`: this checkout at another revision writes the file all the same,
    the mark keeping the revision it was submitted from, the line naming both."""
    cfg = submitted({"steps": 40})
    put_entry(leader, cfg)
    monkeypatch.setattr(entryfile, "revision", lambda _root: "0" * 40)
    line = entryfile.write_from_entry("exp1", "c1", leader, any_revision=True)
    assert line.startswith(
        f"job exp1: Pulumi.exp1.yaml written from its queue entry (submitted from revision "
        f"{REV[:12]}, started with this checkout's program at 000000000000: --any-revision, "
        "code "
    ), line
    assert command.job_settings("exp1") == cfg


def test_a_file_refused_here_is_not_written_even_when_told(
    leader: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--any-revision` starts only what validates here: an entry whose training this
    program refuses is named with why, and nothing is written."""
    put_entry(leader, submitted(), training={"nodes": 2, "gpus_per_node": 2, "no_such_key": 1})
    monkeypatch.setattr(entryfile, "revision", lambda _root: "0" * 40)
    with pytest.raises(entryfile.CannotStart, match="its file written from its entry is refused"):
        entryfile.write_from_entry("exp1", "c1", leader, any_revision=True)
    assert not command.stack_file("exp1").exists()


def test_a_job_submitted_from_no_git_checkout_is_refused(leader: Any) -> None:
    """No revision in the entry: the program it was submitted with cannot be told."""
    put_entry(leader, submitted(), revision="")
    with pytest.raises(entryfile.CannotStart, match=r"revision none \(not a git checkout\)"):
        entryfile.write_from_entry("exp1", "c1", leader)


def test_other_code_here_is_refused_naming_both_digests(leader: Any) -> None:
    """The dir here hashes to another digest than the one submitted, and the queue carries
    no code: refused, both digests named."""
    put_entry(leader, submitted(), code_digest="0123456789ab")
    here = bundle(ROOT / CODE, [".git"]).digest
    with pytest.raises(entryfile.CannotStart, match=f"{CODE} here is {here}, submitted as 0123"):
        entryfile.write_from_entry("exp1", "c1", leader)


def test_a_missing_code_dir_is_refused(leader: Any) -> None:
    """The entry's dir is not in this checkout."""
    put_entry(leader, submitted(), code={"dir": "examples/not-here"})
    with pytest.raises(entryfile.CannotStart, match="examples/not-here here is missing"):
        entryfile.write_from_entry("exp1", "c1", leader)


def test_an_entry_gone_is_refused(leader: Any) -> None:
    with pytest.raises(entryfile.CannotStart, match=r"its entry dss-queue\.exp1 is gone"):
        entryfile.write_from_entry("exp1", "c1", leader)


def test_a_pass_from_a_checkout_without_the_file_starts_the_job(leader: Any, ran: Ran) -> None:
    """GPUs free: the pass writes exp1's file from its entry, then its full form, and
    runs its `up`; what it did is said in that order."""
    put_entry(leader, submitted())
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == ["exp1"]
    assert ran.ups == ["exp1"]
    t = command.job_settings("exp1").training
    assert t.queued is None and t.hosts == ["lab-h1", "lab-h2"] and t.code.dir == CODE
    wrote = next(i for i, ln in enumerate(lines) if "written from its queue entry" in ln)
    assert lines[wrote + 1] == "job exp1: admitted on lab-h1, lab-h2; pulumi up"


def test_a_pass_names_a_job_it_cannot_write_and_leaves_it_waiting(
    leader: Any, ran: Ran, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another revision: the pass runs no `up`, writes no file, and says why."""
    put_entry(leader, submitted())
    monkeypatch.setattr(entryfile, "revision", lambda _root: "0" * 40)
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == []
    assert ran.ups == [] and not command.stack_file("exp1").exists()
    assert any(ln.startswith("job exp1: Pulumi.exp1.yaml is not in this checkout") for ln in lines)


def test_a_file_holding_only_the_salt_is_written_from_the_entry(leader: Any, ran: Ran) -> None:
    """A file with only `encryptionsalt` here is no job file: the pass writes it from the
    entry, the salt kept, and starts the job."""
    put_entry(leader, submitted())
    command.stack_file("exp1").write_text("encryptionsalt: v1:abc\n")
    assert queuerun.run_queue("c1", out=lambda _l: None) == ["exp1"]
    assert "encryptionsalt: v1:abc" in command.stack_file("exp1").read_text()
    assert command.job_settings("exp1").training.code.dir == CODE


def carry(api: Any, root: Path, label: str | None = None, packed: bytes | None = None) -> str:
    """exp1's code config as its queued form makes it from code dir `root`: its digest."""
    b = bundle(root, [])
    data = packed if packed is not None else queuecode.packed(b)
    api.create_config(queuecode.code_name("exp1"), data,
                      labels={queuecode.DIGEST_LABEL: label or b.digest})  # fmt: skip
    return b.digest


@pytest.fixture
def outside(project: Path) -> StackConfig:
    """exp1 submitted with its code dir outside the project (the fixture's, beside it),
    its file gone from this checkout."""
    return submitted({"code": {"dir": str(project.parent / "code")}})


def test_code_the_queue_carries_is_unpacked_into_the_checkout(
    leader: Any, outside: StackConfig, project: Path
) -> None:
    """The code dir was outside the submitter's project: the carried code is unpacked
    under the checkout's CARRIED_DIR, checked, and the file points there."""
    put_entry(leader, outside)
    digest = carry(leader, project.parent / "code")
    line = entryfile.write_from_entry("exp1", "c1", leader)
    assert line.endswith(f"code {digest} carried by the queue)"), line
    code = command.job_settings("exp1").training.code
    where = project / jobfile.CARRIED_DIR / "exp1" / digest
    assert (code.dir, code.exclude) == (str(where), [])
    assert (where / "train.py").read_text() == "print('hello')\n"
    assert bundle(where, []).digest == digest


def test_an_older_version_unpacked_is_removed(
    leader: Any, outside: StackConfig, project: Path
) -> None:
    """Another digest of the job's code left in CARRIED_DIR goes when a new one lands."""
    old = project / jobfile.CARRIED_DIR / "exp1" / "0123456789ab"
    old.mkdir(parents=True)
    put_entry(leader, outside)
    digest = carry(leader, project.parent / "code")
    entryfile.write_from_entry("exp1", "c1", leader)
    assert sorted(p.name for p in old.parent.iterdir()) == [digest]


def test_carried_code_of_another_digest_is_refused(leader: Any, outside: StackConfig) -> None:
    """The config is labelled with another digest than the entry's: refused."""
    put_entry(leader, outside)
    carry(leader, command.stack_file("exp1").parent.parent / "code", label="0123456789ab")
    with pytest.raises(entryfile.CannotStart, match="carries is 0123456789ab, submitted as"):
        entryfile.write_from_entry("exp1", "c1", leader)
    assert not command.stack_file("exp1").exists()


def test_carried_code_that_lacks_its_digest_is_refused(
    leader: Any, outside: StackConfig, project: Path
) -> None:
    """Files that do not hash to the labelled digest: refused, nothing left in place."""
    put_entry(leader, outside)
    digest = bundle(project.parent / "code", []).digest
    other = project.parent / "other"
    other.mkdir()
    (other / "train.py").write_text("print('not it')\n")
    tar = bundle(other, []).tar(digest)  # another's files under the right name
    carry(leader, other, label=digest, packed=gzip.compress(tar, mtime=0))
    with pytest.raises(entryfile.CannotStart, match=f"does not have its digest {digest}"):
        entryfile.write_from_entry("exp1", "c1", leader)
    assert not (project / jobfile.CARRIED_DIR / "exp1" / digest).exists()


def test_carried_code_outside_its_digest_dir_is_refused(
    leader: Any, outside: StackConfig, project: Path
) -> None:
    """A member outside `<digest>/` (or not a plain file): refused, nothing written out."""
    put_entry(leader, outside)
    digest = bundle(project.parent / "code", []).digest
    tar = tar_bytes([(f"{digest}/../../escape.py", b"x", 0o644)])
    carry(leader, project.parent / "code", packed=gzip.compress(tar, mtime=0))
    with pytest.raises(entryfile.CannotStart, match="allowed: plain files under"):
        entryfile.write_from_entry("exp1", "c1", leader)
    assert not (project / "escape.py").exists() and not (project.parent / "escape.py").exists()


def test_code_neither_here_nor_carried_is_refused(leader: Any, outside: StackConfig) -> None:
    """No code config (too large to carry) and no code here: refused, saying both."""
    put_entry(leader, outside)
    with pytest.raises(entryfile.CannotStart, match="the queue does not carry its code"):
        entryfile.write_from_entry("exp1", "c1", leader)


def test_remove_takes_the_carried_code_unpacked_here(
    leader: Any, outside: StackConfig, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job remove` of a job started from carried code removes its unpacked copy too."""
    put_entry(leader, outside)
    carry(leader, project.parent / "code")
    entryfile.write_from_entry("exp1", "c1", leader)
    removed: list[str] = []

    class Stack(Stateless):
        workspace = types.SimpleNamespace(remove_stack=removed.append)

        def destroy(self, **_kw: Any) -> None:
            removed.append("destroyed")

    monkeypatch.setattr(command, "workspace_stack", lambda _n, _e=None: Stack())
    teardown.remove("exp1", out=lambda _l: None)
    assert removed == ["destroyed", "exp1"]
    assert not command.stack_file("exp1").exists()
    assert not jobfile.carried_code("exp1").parent.exists(), "no copy of any job is left"
