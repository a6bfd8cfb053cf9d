"""infra.task.ranks: the ranks among a task's processes, which a stop signals first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.task import ranks

pytestmark = pytest.mark.unit

SCRIPT = "/data/code/run/abc123/train.py"
CLIENT = "/data/.dss/run/bin/python"
"""The fork server's client, in python's place. The kernel runs it through its `#!`
line, so a process's command line names the image's python first, then the client."""


@pytest.mark.parametrize(
    "argv",
    [
        ["/opt/venv/bin/python", "-u", SCRIPT, "--local_rank=0", "--steps", "10"],
        ["/opt/venv/bin/python", "-S", CLIENT, "-u", SCRIPT, "--local_rank=3"],
        ["/opt/venv/bin/python", "-u", SCRIPT, "--run", "r"],  # a torchrun worker
        ["python", SCRIPT],
    ],
    ids=["deepspeed-rank", "forked-rank", "torchrun-worker", "plain"],
)
def test_a_process_running_the_script_is_a_rank(argv: list[str]) -> None:
    """The script as the interpreter's program, after its options: a rank."""
    assert ranks.is_rank(argv, SCRIPT)


@pytest.mark.parametrize(
    "argv",
    [
        ["/opt/venv/bin/python", "/opt/venv/bin/deepspeed", "--hostfile", "h", SCRIPT],
        ["/opt/venv/bin/python", "-S", CLIENT, "-u", "-m", "deepspeed.launcher.runner", SCRIPT],
        [
            "/opt/venv/bin/python",
            "-u",
            "-m",
            "deepspeed.launcher.launch",
            "--world_info=e30=",
            "--node_rank=0",
            SCRIPT,
            "--steps",
            "10",
        ],
        ["pdsh", "-S", "-f", "1024", "-w", "a,b", "export X=1; cd /opt/dss;", "python", SCRIPT],
        ["ssh", "-p", "2222", "10.0.0.2", f"cd /opt/dss; python -u -m x {SCRIPT}"],
        ["bash", "-c", f"cd /opt/dss; python -u -m deepspeed.launcher.launch {SCRIPT}"],
        ["/opt/venv/bin/python", "/opt/venv/bin/torchrun", "--nnodes=2", SCRIPT],
        ["sh", "/data/.dss/run/supervise.sh"],
        ["/opt/venv/bin/python", "-I", "-S", "-", "count"],  # ranks.py itself, from stdin
        [],
    ],
    ids=[
        "runner",
        "forked-runner",
        "launch",
        "pdsh",
        "ssh",
        "remote-shell",
        "torchrun",
        "supervisor",
        "self",
        "zombie",
    ],
)
def test_a_launcher_naming_the_script_is_not_a_rank(argv: list[str]) -> None:
    """A launcher, pdsh and its SSH sessions name the script later: not ranks."""
    assert not ranks.is_rank(argv, SCRIPT)


def fake_proc(root: Path, table: dict[int, list[str]]) -> str:
    """A /proc with one `cmdline` per pid (NUL-separated, as the kernel writes it)."""
    for pid, argv in table.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (root / "self").mkdir()
    return str(root)


def test_rank_pids_reads_the_process_table(tmp_path: Path) -> None:
    """Only the ranks' pids, in order; entries that are not processes are skipped."""
    proc = fake_proc(tmp_path, {
        40: ["python", "-u", "-m", "deepspeed.launcher.launch", SCRIPT],
        12: ["python", "-u", SCRIPT, "--local_rank=1"],
        11: ["python", "-u", SCRIPT, "--local_rank=0"],
        13: ["python", "-u", "/other/train.py"],
    })  # fmt: skip
    assert ranks.rank_pids(SCRIPT, proc) == [11, 12]


def test_main_needs_the_script_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the script, or with another verb, it refuses with its usage (exit 2)."""
    monkeypatch.delenv(ranks.SCRIPT_ENV, raising=False)
    assert ranks.main(["count"]) == 2
    monkeypatch.setenv(ranks.SCRIPT_ENV, SCRIPT)
    assert ranks.main(["kill"]) == 2


@pytest.mark.parametrize("through_client", [False, True], ids=["python", "forked-client"])
def test_term_signals_the_ranks_alone(tmp_path: Path, through_client: bool) -> None:
    """`term` run from stdin (as the stop script runs it) sends SIGTERM to the live rank
    (run by python, or by a `#!` client named python as the fork server's is) and not
    to a launcher naming the same script; it prints how many."""
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(60)\n")
    python = sys.executable
    if through_client:
        client = tmp_path / "bin" / "python"
        client.parent.mkdir()
        client.write_text(f"#!{sys.executable} -S\nimport time\ntime.sleep(60)\n")
        client.chmod(0o755)
        python = str(client)
    rank = subprocess.Popen([python, "-u", str(script), "--local_rank=0"])
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 str(script)])  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not ranks.rank_pids(str(script)) and time.monotonic() < deadline:
            time.sleep(0.05)  # the client's command line is the kernel's once it execs
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-", "term"],
            input=Path(ranks.__file__).read_text(), capture_output=True, text=True, timeout=30,
            env={**os.environ, ranks.SCRIPT_ENV: str(script)},
        )  # fmt: skip
        assert (out.returncode, out.stdout.strip()) == (0, "1"), out.stderr
        assert rank.wait(timeout=10) == -signal.SIGTERM
        assert launcher.poll() is None, "the launcher was signalled"
    finally:
        for p in (rank, launcher):
            p.kill()
            p.wait()
