"""infra.render.shell: a file replaced whole in a task, alone or beside other writers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra.render.shell import replace_file

pytestmark = pytest.mark.unit


def test_replace_file_writes_the_new_text_whole(tmp_path: Path) -> None:
    """stdin becomes the file; no temporary file is left."""
    path = tmp_path / "d" / "f"
    subprocess.run(["sh", "-c", replace_file(str(path))], input="new\n", text=True, check=True)
    assert path.read_text() == "new\n" and sorted(p.name for p in path.parent.iterdir()) == ["f"]


def test_shared_writers_each_use_a_temporary_file_of_their_own(tmp_path: Path) -> None:
    """Eight writers at once (per-node launches on the shared data dir): every one
    succeeds and the file is one writer's text whole; with one `.new` they raced and a
    `mv` failed ("cannot stat ...new")."""
    path = tmp_path / "ranks.py"
    script = replace_file(str(path), shared=True)
    procs = [
        subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, text=True) for _ in range(8)
    ]
    for i, proc in enumerate(procs):
        assert proc.stdin is not None
        proc.stdin.write(f"writer {i}\n" * 2000)
        proc.stdin.close()
    assert [proc.wait(timeout=30) for proc in procs] == [0] * 8
    lines = set(path.read_text().splitlines())
    assert len(lines) == 1 and lines.pop().startswith("writer "), "a mixed or partial file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks.py"]
