"""infra.render.stop for a training.command: its ranks found by commandranks.py (a
module's too), under pdsh on every hostfile host at once (golden files, and the pdsh
stop run against a fake `docker`). The stop of a run without a command is
tests/unit/infra/test_render.py's (its golden stop.sh unchanged)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra.render.stop import CommandRanks, stop_script

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parents[1] / "golden"
SCRIPT = "/data/code/run/abc123/train.py"


def golden(name: str, text: str) -> None:
    """Compare with golden/<name>; DSS_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get("DSS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file (DSS_UPDATE_GOLDEN=1)"


def command_stop(ranks: CommandRanks, grace: int = 120, service: str = "ds-master") -> str:
    return stop_script(service=service, grace_seconds=grace, pattern=SCRIPT, run_name="run",
                       command=ranks)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "ranks", "service"),
    [
        ("pdsh", CommandRanks(SCRIPT, ssh_port=2222), "ds-master"),
        ("no_ssh", CommandRanks(SCRIPT), "ds-worker"),
        ("torchrun_module", CommandRanks("mypkg.train", module=True), "ds-worker"),
    ],
)
def test_command_stop_script_golden(name: str, ranks: CommandRanks, service: str) -> None:
    """A command run's stop matches golden/stop_command_<mode>.sh."""
    golden(f"stop_command_{name}.sh", command_stop(ranks, service=service))


def test_without_a_command_the_stop_is_as_before() -> None:
    """No command: the stop names the script to ranks.py from stdin, no commandranks.py."""
    stop = stop_script(service="ds-master", grace_seconds=5, pattern=SCRIPT, run_name="run")
    assert "commandranks.py" not in stop and "DSS_RANKS" in stop


def test_module_stop_names_the_module_not_a_script() -> None:
    stop = command_stop(CommandRanks("mypkg.train", module=True))
    assert "DSS_STOP_MODULE=mypkg.train" in stop and "DSS_STOP_SCRIPT" not in stop


FAKE_DOCKER = """#!/bin/sh
[ "$1" = ps ] && {{ echo c1; exit 0; }}
echo "$*" >>{log}
for a in "$@"; do
  case "$a" in
    cat) printf '10.0.1.3 slots=2\\n10.0.1.4 slots=2\\n\\n'; exit 0 ;;
    pdsh) printf '{answer}'; exit 0 ;;
    pgrep) exit 1 ;;
  esac
done
exit 0
"""


def run_stop(tmp_path: Path, answer: str) -> tuple[str, str]:
    """The pdsh stop of a module run against a fake docker whose pdsh prints `answer`;
    (the stop's output, the docker calls it made)."""
    log = tmp_path / "calls"
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(FAKE_DOCKER.format(log=log, answer=answer))
    docker.chmod(0o755)
    stop = tmp_path / "stop.sh"
    stop.write_text(command_stop(CommandRanks("mypkg.train", module=True, ssh_port=2222), 3))
    env = {**os.environ, "PATH": f"{docker.parent}:{os.environ['PATH']}"}
    proc = subprocess.run(["sh", str(stop)], env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr, log.read_text()


def test_pdsh_stop_signals_the_ranks_on_every_hostfile_host(tmp_path: Path) -> None:
    """Under pdsh the master's stop runs commandranks.py on every hostfile host, as the
    training user through the launcher's sshd port, and sums the hosts' counts."""
    out, calls = run_stop(tmp_path, "10.0.1.3: 2\\n10.0.1.4: 1\\n")
    assert "SIGTERM to 3 rank(s)" in out
    pdsh = next(line for line in calls.splitlines() if " pdsh " in line)
    assert "-u 1000 -e PDSH_SSH_ARGS_APPEND=-p 2222 c1 pdsh" in pdsh
    assert "-w 10.0.1.3,10.0.1.4 " in pdsh
    assert pdsh.endswith("DSS_STOP_MODULE=mypkg.train /opt/venv/bin/python -S -E "
                         "/data/.dss/run/commandranks.py term")  # fmt: skip


def test_pdsh_stop_with_no_host_answering_signals_the_training_here(tmp_path: Path) -> None:
    """No host's count read back (pdsh failed everywhere): SIGTERM to all of the
    training on the master, as a run without a command does."""
    out, calls = run_stop(tmp_path, "10.0.1.4: ssh: connect to host refused\\n")
    assert "cannot tell the ranks apart (?)" in out
    assert "pkill -TERM -f" in calls
