"""infra.render.stop for a training.command: its ranks found by commandranks.py (a
module's too), under pdsh on every hostfile host at once (golden files, and the pdsh
stop run against a fake `docker`). The stop of a run without a command is
tests/unit/infra/test_render.py's (its golden stop.sh unchanged)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.command import split_command
from infra.layout import IMAGE_PYTHON, LAUNCH_DIR
from infra.render.command import rank_pattern
from infra.render.runfiles import follow_program
from infra.render.stop import CommandRanks, stop_script
from tests.unit.golden import check_golden

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parents[1] / "golden"
SCRIPT = "/data/code/run/abc123/train.py"


def golden(name: str, text: str) -> None:
    """Compare with golden/<name>; DSS_UPDATE_GOLDEN=1 rewrites it."""
    check_golden(GOLDEN / name, text)


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


def test_a_command_stop_without_its_run_name_is_refused() -> None:
    """commandranks.py lives in the run's dir: no run name, no path to it."""
    with pytest.raises(ValueError, match="run_name"):
        stop_script(service="s", grace_seconds=5, pattern=SCRIPT, command=CommandRanks(SCRIPT))


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
    pgrep) exit {pgrep_rc} ;;
  esac
done
exit 0
"""


def run_stop(tmp_path: Path, answer: str, alive: bool = False) -> tuple[str, str]:
    """The pdsh stop of a module run against a fake docker whose pdsh prints `answer`
    (`alive`: the training never exits); (the stop's output, the docker calls it made)."""
    log = tmp_path / "calls"
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(FAKE_DOCKER.format(log=log, answer=answer, pgrep_rc=0 if alive else 1))
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


def test_pdsh_stop_after_the_grace_kills_the_ranks_on_every_host(tmp_path: Path) -> None:
    """Still running after the grace (a rank blocked on a lost peer): SIGKILL to the
    ranks on every hostfile host through pdsh, then to what is left on the master."""
    out, calls = run_stop(tmp_path, "10.0.1.3: 1\\n10.0.1.4: 1\\n", alive=True)
    assert "SIGKILL" in out
    lines = calls.splitlines()
    kills = [i for i, line in enumerate(lines) if line.endswith("commandranks.py kill")]
    pkill = [i for i, line in enumerate(lines) if "pkill -KILL" in line]
    assert kills and pkill and kills[0] < pkill[0], calls


def test_pdsh_stop_with_no_host_answering_signals_the_training_here(tmp_path: Path) -> None:
    """No host's count read back (pdsh failed everywhere): SIGTERM to all of the
    training on the master, as a run without a command does."""
    out, calls = run_stop(tmp_path, "10.0.1.4: ssh: connect to host refused\\n")
    assert "cannot tell the ranks apart (?)" in out
    assert "pkill -TERM -f" in calls


LOCAL_DOCKER = """#!/bin/sh
# `docker` run here: `ps` names c1; `exec [-i] [-u U] [-e K=V] c1 CMD...` runs CMD here,
# the image's python as this one and the run's dir as {tmp}.
[ "$1" = ps ] && {{ echo c1; exit 0; }}
shift
while :; do
  case "$1" in
    -i|-d) shift ;;
    -u) shift 2 ;;
    -e) export "$2"; shift 2 ;;
    *) break ;;
  esac
done
shift
[ "$1" = touch ] && exit 0  # the stop marker: not on this machine's /data
if [ "$1" = {image_python} ]; then
  shift
  set -- $(echo "$@" | sed "s#{run_dir}#{tmp}#g")
  exec {python} "$@"
fi
exec "$@"
"""

SAVER = """import pathlib, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
pathlib.Path("started").touch()
while not stop:
    time.sleep(0.05)
pathlib.Path("saved").write_text("saved")
"""


def test_command_stop_lets_a_module_rank_save(tmp_path: Path) -> None:
    """A command run of `-m <module>` (per-node launch): the stop finds the module's rank
    with commandranks.py, its SIGTERM lets it save, and the stop sees it exit."""
    for name in ("commandranks.py", "ranks.py"):
        (tmp_path / name).write_text(follow_program(name))
    (tmp_path / "dss_saver_mod.py").write_text(SAVER)
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(LOCAL_DOCKER.format(image_python=IMAGE_PYTHON, python=sys.executable,
                                          run_dir=f"{LAUNCH_DIR}/run", tmp=tmp_path))  # fmt: skip
    docker.chmod(0o755)
    rank = subprocess.Popen([sys.executable, "-m", "dss_saver_mod"], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pattern = rank_pattern(split_command("python -m dss_saver_mod"), None)
        stop = tmp_path / "stop.sh"
        ranks = CommandRanks("dss_saver_mod", module=True)
        stop.write_text(stop_script(service="ds-worker", grace_seconds=20, pattern=pattern,
                                    run_name="run", command=ranks))  # fmt: skip
        env = {**os.environ, "PATH": f"{docker.parent}:{os.environ['PATH']}"}
        proc = subprocess.run(["sh", str(stop)], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "SIGTERM to 1 rank(s)" in proc.stdout and "training exited" in proc.stdout
        assert (tmp_path / "saved").read_text() == "saved"
        assert rank.wait(timeout=10) == 0
    finally:
        rank.kill()
        rank.wait()
