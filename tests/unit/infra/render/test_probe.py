"""infra.render.probe: what a training.command run's probe reads (the project's train.py
runs: tests/unit/infra/render/test_run.py), run as the task runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra.render import run
from infra.render.run import parse_probe, verdict
from infra.render.runfiles import exitrecord_path, follow_program

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parents[1] / "task" / "fixtures"


def _local(script: str, tmp: Path) -> str:
    """A task's script with its paths moved under `tmp`."""
    return script.replace("/data/", f"{tmp}/data/").replace("/opt/dss", str(tmp))


def _probe(tmp: Path) -> str:
    script = _local(run.probe_script("r", command=True), tmp)
    env = {"PATH": "/usr/bin:/bin", **run.probe_env("r", "no-such-training-script")}
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env).stdout


def test_parse_probe_reads_every_exit_record() -> None:
    """Each `exit.<node>=` line is that node's record; a garbled one reads as none."""
    probe = parse_probe('exit.0={"rc": 0}\nexit.1={"rc": 1}\nexit.2={"rc"\n')
    assert probe.exits == {"0": {"rc": 0}, "1": {"rc": 1}}


def test_parse_probe_reads_deepspeeds_step_and_checkpoint() -> None:
    """DeepSpeed's step, the log's time and a `latest` tag of a command run."""
    probe = parse_probe('exit.master={"rc": 0}\ndsstep=20\nlogtime=99\ncheckpoint=global_step20\n')
    assert (probe.ds_step, probe.log_time, probe.checkpoint) == (20, 99, "global_step20")


def test_parse_probe_without_records_keeps_todays_checkpoints() -> None:
    """Without exit records a `global_step` tag is not a checkpoint the relaunch knows."""
    assert parse_probe("checkpoint=global_step20\n").checkpoint == ""


def test_probe_without_command_is_unchanged() -> None:
    """The probe of a train.py run reads no exit record (its text as before)."""
    assert "exit." not in run.probe_script("r") and "|Error|" in run.probe_script("r")


def test_failed_attempt_is_read_back_as_failed(tmp_path: Path) -> None:
    """End to end, as the task runs it: a supervisor whose launcher prints DeepSpeed's
    pdsh failure and exits 1 writes its exit record; the probe reads it and the
    verdict names the node and the exception."""
    program = Path(_local(exitrecord_path("r"), tmp_path))
    program.parent.mkdir(parents=True)
    program.write_text(follow_program("exitrecord.py"))
    cmd = f"sh -c 'cat {FIXTURES / 'ds_pdsh_failure.log'}; exit 1'"
    script = run.supervisor_script(
        cmd=cmd,
        run_name="r",
        workdir="/opt/dss",
        max_restarts=0,
        delay_s=0,
        pattern="no-such-pattern",
        exit_record="master",
    )
    path = tmp_path / "supervise.sh"
    path.write_text(_local(script, tmp_path))
    proc = subprocess.run(["sh", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    state = verdict(parse_probe(_probe(tmp_path)), [], 1000, 0, ["master"])
    assert (state.state, state.reason, state.step) == (
        "failed",
        "restart budget spent after 0 automatic restarts; node 10.0.1.3 exited 1: "
        "ValueError: bad batch at step 12",
        12,
    )


def test_finished_run_reads_deepspeeds_latest(tmp_path: Path) -> None:
    """A launcher that exits 0 leaves a record rc 0: finished, at DeepSpeed's checkpoint."""
    program = Path(_local(exitrecord_path("r"), tmp_path))
    program.parent.mkdir(parents=True)
    program.write_text(follow_program("exitrecord.py"))
    ckpt = tmp_path / "data/checkpoints/r"
    ckpt.mkdir(parents=True)
    (ckpt / "latest").write_text("global_step20")
    cmd = f"cat {FIXTURES / 'ds_pdsh_finished.log'}"
    script = run.supervisor_script(
        cmd=cmd,
        run_name="r",
        workdir="/opt/dss",
        max_restarts=0,
        delay_s=0,
        pattern="no-such-pattern",
        exit_record="master",
    )
    path = tmp_path / "supervise.sh"
    path.write_text(_local(script, tmp_path))
    assert subprocess.run(["sh", str(path)], capture_output=True, timeout=60).returncode == 0
    state = verdict(parse_probe(_probe(tmp_path)), [], 1000, 0, ["master"])
    assert (state.state, state.step, state.checkpoint) == ("finished", 20, "global_step20")
