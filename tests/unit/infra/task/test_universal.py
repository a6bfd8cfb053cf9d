"""infra/task/universal.py: a command's newest DeepSpeed checkpoint made universal before
each start, against a stand-in for DeepSpeed's `ds_to_universal` (a module of that name
on PYTHONPATH that does what the real one does to the folders: an output folder with
the input's mp_rank files and a `zero/` folder, and `latest_universal` beside it naming
it; it fails on an input holding BROKEN). The real converter on a real checkpoint of
the tutorial: tests/image/test_universal.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra.render.template import TASK_DIR
from infra.task import exitrecord, universal

pytestmark = pytest.mark.unit

FAKE = """
import argparse, os, shutil, sys
p = argparse.ArgumentParser()
p.add_argument("--input_folder"); p.add_argument("--output_folder")
p.add_argument("--inject_missing_state", action="store_true")
a = p.parse_args()
with open(os.path.join(os.path.dirname(a.input_folder), "runs.log"), "a") as f:
    f.write(os.path.basename(a.input_folder) + "\\n")
if os.path.exists(os.path.join(a.input_folder, "BROKEN")):
    os.makedirs(a.output_folder, exist_ok=True)  # a partial folder, as a crash leaves
    print("Traceback (most recent call last):", file=sys.stderr)
    print("KeyError: 'param_shapes'", file=sys.stderr)
    sys.exit(1)
os.makedirs(os.path.join(a.output_folder, "zero"))
shutil.copy2(os.path.join(a.input_folder, "mp_rank_00_model_states.pt"), a.output_folder)
root, name = os.path.split(a.output_folder)
with open(os.path.join(root, "latest_universal"), "w") as f:
    f.write(name)
"""


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run's checkpoint dir, and the stand-in converter on PYTHONPATH."""
    pkg = tmp_path / "fake" / "deepspeed" / "checkpoint"
    pkg.mkdir(parents=True)
    for d in (pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "ds_to_universal.py").write_text(FAKE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    return ck


def saved(root: Path, step: int, broken: bool = False) -> str:
    """A checkpoint of step `step`, as DeepSpeed's save_checkpoint leaves it; its tag."""
    tag = f"global_step{step}"
    (root / tag).mkdir()
    (root / tag / "mp_rank_00_model_states.pt").write_text(f"step {step}")
    (root / tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_text("")
    if broken:
        (root / tag / "BROKEN").write_text("")
    (root / "latest").write_text(tag)
    return tag


def runs(root: Path) -> list[str]:
    """The tags the converter was run on, in order."""
    log = root / "runs.log"
    return log.read_text().split() if log.exists() else []


def test_a_first_start_has_nothing_to_convert(root: Path) -> None:
    """No `latest`: nothing run, nothing written."""
    assert universal.prepare(root).endswith("nothing to convert")
    assert sorted(p.name for p in root.iterdir()) == []


def test_the_newest_checkpoint_is_converted_and_named(root: Path) -> None:
    """`latest`'s tag T becomes `T_universal` (the model states in it, the mark beside
    them), and `latest_universal` names it, as DeepSpeed's load reads it; no temporary
    folder is left."""
    tag = saved(root, 20)
    said = universal.prepare(root)
    assert said == f"universal: {tag} converted to {root / 'global_step20_universal'}"
    out = root / "global_step20_universal"
    assert (out / "mp_rank_00_model_states.pt").read_text() == "step 20"
    assert (out / universal.MARK).read_text() == f"{tag}\n"
    assert (root / "latest_universal").read_text() == "global_step20_universal"
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_a_conversion_is_made_once(root: Path) -> None:
    """A start after one that converted T (a restart, a resize before any new save)
    runs no converter: the folder with the mark for T is kept."""
    saved(root, 20)
    universal.prepare(root)
    assert "converted already" in universal.prepare(root)
    assert runs(root) == ["global_step20"]


def test_a_newer_checkpoint_replaces_the_older_conversion(root: Path) -> None:
    """A save since: the new tag is converted and named, the older conversion removed;
    a folder without the mark (the script's own) is left alone."""
    saved(root, 20)
    universal.prepare(root)
    (root / "mine_universal").mkdir()
    saved(root, 30)
    said = universal.prepare(root)
    assert said.endswith("older conversions removed: global_step20_universal")
    assert (root / "latest_universal").read_text() == "global_step30_universal"
    assert not (root / "global_step20_universal").exists()
    assert (root / "mine_universal").is_dir() and (root / "global_step20").is_dir()


def test_a_failed_conversion_leaves_no_pointer_to_an_older_step(root: Path) -> None:
    """The converter fails on the newest checkpoint: ConversionFailed names the folder
    and the converter's last line; `latest_universal` (which named the older step) is
    gone, so the script's load fails rather than resume an older step; no partial
    folder is left."""
    saved(root, 20)
    universal.prepare(root)
    saved(root, 30, broken=True)
    with pytest.raises(universal.ConversionFailed) as e:
        universal.prepare(root)
    assert str(e.value) == (
        f"DeepSpeed's ds_to_universal could not convert {root / 'global_step30'} (exit 1): "
        "KeyError: 'param_shapes'"
    )
    assert not (root / "latest_universal").exists()
    assert not (root / "global_step30_universal").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_latest_naming_no_folder_is_refused(root: Path) -> None:
    """`latest` names a tag that is not there: refused, naming it; nothing run."""
    (root / "latest").write_text("global_step40")
    with pytest.raises(universal.ConversionFailed, match="names 'global_step40', which is not"):
        universal.prepare(root)
    assert runs(root) == []


def test_a_failure_ends_in_a_traceback_the_exit_record_reads(root: Path) -> None:
    """Run as the supervisor runs it: exit 1 and a traceback whose last line is the
    error (infra/task/exitrecord.py keeps that line as the attempt's exception)."""
    saved(root, 20, broken=True)
    proc = subprocess.run(
        [sys.executable, str(TASK_DIR / "universal.py"), str(root)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    got = exitrecord.record(proc.stderr.splitlines(), proc.returncode, "master", 0.0)
    assert got["rc"] == 1
    assert got["exception"].startswith("ConversionFailed: DeepSpeed's ds_to_universal could")
    assert got["exception"].endswith("(exit 1): KeyError: 'param_shapes'")
