"""infra.task.commandranks: a command's ranks (a module's too), which its stop signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.task import commandranks

pytestmark = pytest.mark.unit

PY = "/opt/venv/bin/python"
MODULE = "mypkg.train"


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "-u", "-m", MODULE, "--local_rank=0"],  # DeepSpeed's per-node launcher's rank
        [PY, "-S", "/data/.dss/run/bin/python", "-u", "-m", MODULE],  # fork server's client
        [PY, "-u", f"-m{MODULE}"],
        ["python3", "-m", MODULE],
    ],
    ids=["deepspeed-rank", "forked-rank", "attached", "plain"],
)
def test_a_process_running_the_module_is_a_rank(argv: list[str]) -> None:
    assert commandranks.is_module_rank(argv, MODULE)


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "-u", "-m", "deepspeed.launcher.launch", "--module", MODULE],
        [PY, "/opt/venv/bin/deepspeed", "--hostfile=h", "--module", MODULE],
        [PY, "/opt/venv/bin/torchrun", "--nnodes=2", "-m", MODULE],
        [PY, "-m", "mypkg.train2"],
        [PY, "-m"],
    ],
    ids=["per-node-launcher", "runner", "torchrun", "other-module", "bare-m"],
)
def test_a_launcher_naming_the_module_is_not_a_rank(argv: list[str]) -> None:
    assert not commandranks.is_module_rank(argv, MODULE)


def fake_proc(tmp_path: Path, table: dict[int, list[str]]) -> str:
    """A /proc holding `table`'s command lines (NUL-separated, as the kernel's)."""
    for pid, argv in table.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv))
    return str(tmp_path)


def test_find_reads_the_module_from_the_environment(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {7: [PY, "-m", MODULE], 8: [PY, "-m", "other"]})
    assert commandranks.find({commandranks.MODULE_ENV: MODULE}, proc) == [7]


def test_find_reads_a_script_as_ranks_py_does(tmp_path: Path) -> None:
    launcher = [PY, "/opt/venv/bin/deepspeed", "/c/train.py"]
    proc = fake_proc(tmp_path, {7: [PY, "-u", "/c/train.py"], 8: launcher})
    assert commandranks.find({"DSS_STOP_SCRIPT": "/c/train.py"}, proc) == [7]


def test_find_without_a_target_is_none(tmp_path: Path) -> None:
    assert commandranks.find({}, str(tmp_path)) is None


def test_main_without_a_target_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    os.environ.pop(commandranks.MODULE_ENV, None)
    os.environ.pop("DSS_STOP_SCRIPT", None)
    assert commandranks.main(["term"]) == 2
    assert "DSS_STOP_MODULE=<module>" in capsys.readouterr().err


def test_kill_sends_sigkill_and_count_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kill` SIGKILLs each rank (the stop's end under pdsh); `count` only counts."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(commandranks, "find", lambda env, proc="/proc": [7, 9])
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert commandranks.main(["count"]) == 0 and sent == []
    assert commandranks.main(["kill"]) == 0
    assert sent == [(7, signal.SIGKILL), (9, signal.SIGKILL)]


def test_term_as_a_file_beside_ranks_py_signals_a_module_rank(tmp_path: Path) -> None:
    """Run as the stop runs it (a file beside ranks.py, `python -S -E`): a process
    running `-m <module>` gets SIGTERM and the count is printed."""
    task = Path(commandranks.__file__).parent
    for name in ("commandranks.py", "ranks.py"):
        (tmp_path / name).write_text((task / name).read_text())
    pkg = tmp_path / "pkg_dss_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sleeper.py").write_text("import time\ntime.sleep(60)\n")
    rank = subprocess.Popen([sys.executable, "-m", "pkg_dss_test.sleeper"], cwd=tmp_path)
    try:
        time.sleep(0.5)
        env = {**os.environ, commandranks.MODULE_ENV: "pkg_dss_test.sleeper"}
        out = subprocess.run(
            [sys.executable, "-S", "-E", str(tmp_path / "commandranks.py"), "term"],
            env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "1"
        assert rank.wait(timeout=10) == -signal.SIGTERM
    finally:
        rank.kill()
        rank.wait()
