"""infra.render.run: the supervisor, the probe's reading and the run's verdict."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from infra.layout import IMAGE_PYTHON, LAUNCH_DIR
from infra.render import run
from infra.render.run import Probe, parse_probe, verdict
from infra.render.runfiles import universal_path

pytestmark = pytest.mark.unit

NOW = 1_000_000


def probe(**kw: object) -> Probe:
    base: dict[str, object] = dict(
        now=NOW, supervisor=True, procs=3, age_s=600, last_step=40, last_step_time=NOW - 5,
        restarts=0, budget_spent=False, error="", checkpoint="step_00000040",
    )  # fmt: skip
    base.update(kw)
    return Probe(**base)  # type: ignore[arg-type]  # the test's own keyword set


def test_running_run_holds_no_step() -> None:
    """A run with processes that stepped recently is running, with no step or checkpoint:
    its record does not change while it trains."""
    state = verdict(probe(), [], 1000, 60)
    assert state.outputs() == {
        "state": "running", "reason": "", "step": None, "checkpoint": None, "restarts": 0,
    }  # fmt: skip


def test_no_step_for_stall_after_is_stalled() -> None:
    """Live processes, last step older than stall_after: stalled, naming how long."""
    state = verdict(probe(last_step_time=NOW - 200), [], 1000, 60)
    assert state.state == "stalled" and state.step == 40
    assert state.reason.startswith("no step for 200s (stall_after 60s)")


def test_a_young_process_counts_as_progress() -> None:
    """A run that restarted 10 s ago, its last step long before: still building, running."""
    assert verdict(probe(age_s=10, last_step_time=NOW - 900), [], 1000, 60).state == "running"


def test_supervisor_between_attempts_is_running() -> None:
    """No process but a supervisor waiting to restart: running, never stalled."""
    assert verdict(probe(procs=0, last_step_time=NOW - 900), [], 1000, 60).state == "running"


def test_supervisor_between_attempts_after_a_stop_is_failed() -> None:
    """No process and a supervisor waiting while the stop marker is set: it will exit
    without restarting, so the run is failed (drift; `up` relaunches it), not running."""
    state = verdict(probe(procs=0, stopping=True), [], 1000, 60)
    assert state.state == "failed" and "no training process is left" in state.reason


def test_processes_after_a_stop_still_count_as_running() -> None:
    """A stop asked while ranks still checkpoint: they are the run until they exit."""
    assert verdict(probe(stopping=True), [], 1000, 60).state == "running"


def test_last_step_reached_is_finished() -> None:
    """Nothing left and the last step is the target: finished at that step."""
    state = verdict(probe(supervisor=False, procs=0, last_step=1000), [], 1000, 60)
    assert (state.state, state.step, state.reason) == ("finished", 1000, "")


def test_nothing_left_before_the_target_is_failed_with_the_log_line() -> None:
    """Nothing left, short of the target: failed, with the last step and the launcher's line."""
    p = probe(supervisor=False, procs=0, error="dss-train: error: boom")
    state = verdict(p, [], 1000, 60)
    assert state.state == "failed" and state.step == 40 and state.checkpoint == "step_00000040"
    assert "no training process is left; last step 40" in state.reason
    assert state.reason.endswith("the launcher log says: dss-train: error: boom")


def test_spent_budget_is_the_reason() -> None:
    """A supervisor that gave up: the reason says so and how many restarts it made."""
    p = probe(supervisor=False, procs=0, restarts=3, budget_spent=True)
    assert verdict(p, [], 1000, 60).reason.startswith(
        "restart budget spent after 3 automatic restarts"
    )


def test_a_worker_still_running_keeps_the_run_alive() -> None:
    """The master's launcher gone but a worker's rank still there (a hang): not failed."""
    master = probe(supervisor=False, procs=0, last_step_time=NOW - 900)
    state = verdict(master, [probe(supervisor=False, procs=1, age_s=900)], 1000, 60)
    assert state.state == "stalled"


def test_parse_probe_reads_every_line() -> None:
    """The probe's key=value lines become a Probe; the last metrics line gives the step."""
    last = json.dumps({"step": 12, "time": 99.5})
    text = (
        f"now=100\nsupervisor=1\nprocs=4\nage=30\nlast={last}\nrestarts=2\nspent=1\n"
        "error=Traceback (most recent call last):\ncheckpoint=step_00000010\n"
    )
    error = "Traceback (most recent call last):"
    assert parse_probe(text) == Probe(100, True, 4, 30, 12, 99.5, 2, True, error, "step_00000010")


def test_parse_probe_of_nothing_is_an_empty_task() -> None:
    """No output (a task gone) or a half-written metrics line reads as nothing running."""
    p = parse_probe('last={"step": 1')
    assert (p.procs, p.supervisor, p.last_step, p.checkpoint) == (0, False, 0, "")
    assert not p.stopping


def test_parse_probe_reads_the_stop_marker() -> None:
    """`stopping=1` (the probe saw the run's stop marker) reads as stopping."""
    assert parse_probe("supervisor=1\nstopping=1\n").stopping


def _sh(script: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run a supervisor as the launch does: `sh <file>` (its pkill must not match itself)."""
    path = tmp / "supervise.sh"
    path.write_text(script)
    return subprocess.run(["sh", str(path)], capture_output=True, text=True, cwd=tmp, timeout=60)


def _local(script: str, tmp: Path) -> str:
    """The supervisor with the task's paths moved under `tmp`."""
    return script.replace("/data/", f"{tmp}/data/").replace("/opt/dss", str(tmp))


def test_supervisor_restarts_within_the_budget_and_records_it(tmp_path: Path) -> None:
    """A launcher that keeps failing is run 1 + max_restarts times; each restart and the
    spent budget are recorded; the supervisor exits with the launcher's code."""
    count = tmp_path / "count"
    cmd = f"sh -c 'echo x >> {count}; exit 3'"  # one command, as shlex.join(argv) is
    script = run.supervisor_script(cmd=cmd, run_name="r", workdir="/opt/dss", max_restarts=2,
                                   delay_s=0, pattern="no-such-process-pattern")  # fmt: skip
    proc = _sh(_local(script, tmp_path), tmp_path)
    assert proc.returncode == 3
    assert len(count.read_text().splitlines()) == 3
    records = [json.loads(x) for x in (tmp_path / "data/logs/r/restarts.jsonl").read_text().split()]
    assert [r["event"] for r in records] == ["restart", "restart", "budget_spent"]
    assert "restart budget (2) spent" in (tmp_path / "data/logs/r/launcher.log").read_text()


def test_supervisor_stops_on_success(tmp_path: Path) -> None:
    """A launcher that exits 0 (the last step, or a stop) ends the supervisor: no restart."""
    script = run.supervisor_script(cmd="true", run_name="r", workdir="/opt/dss", max_restarts=2,
                                   delay_s=0, pattern="no-such-process-pattern")  # fmt: skip
    assert _sh(_local(script, tmp_path), tmp_path).returncode == 0
    assert not (tmp_path / "data/logs/r/restarts.jsonl").exists()


def test_supervisor_restarts_nothing_after_a_stop(tmp_path: Path) -> None:
    """With the stop marker set (a `destroy` or a relaunch), a failed launcher is not rerun."""
    marker = Path(_local(run.stop_marker("r"), tmp_path))
    marker.parent.mkdir(parents=True)
    marker.touch()
    script = run.supervisor_script(cmd="sh -c 'exit 143'", run_name="r", workdir="/opt/dss",
                                   max_restarts=5, delay_s=0, pattern="x-none")  # fmt: skip
    assert _sh(_local(script, tmp_path), tmp_path).returncode == 143
    assert not (tmp_path / "data/logs/r/restarts.jsonl").exists()


def test_probe_finds_processes_through_its_environment_only() -> None:
    """The probe's text names neither the training script nor the supervisor (they come
    through its environment), so `pgrep -f` never counts the probe's own shell."""
    text = run.probe_script("myrun")
    assert "train.py" not in text and "supervise" not in text
    assert f'"${run.PROBE_ENV_PATTERN}"' in text and f'"${run.PROBE_ENV_SUPERVISOR}"' in text
    assert run.probe_env("myrun", "/opt/dss/train.py")[run.PROBE_ENV_PATTERN] == "/opt/dss/train.py"


def test_supervisor_keeps_its_counts_as_prometheus_text(tmp_path: Path) -> None:
    """With a metrics file the supervisor writes 0 at its start, each restart's count and
    the spent budget, as the node exporter's textfile collector reads them."""
    metrics = run.restart_metrics_file("r", 1)
    cmd = "sh -c 'exit 3'"
    script = run.supervisor_script(cmd=cmd, run_name="r", workdir="/opt/dss", max_restarts=2,
                                   delay_s=0, pattern="no-such-process-pattern",
                                   metrics_file=metrics, supervisor="1")  # fmt: skip
    assert _sh(_local(script, tmp_path), tmp_path).returncode == 3
    text = Path(_local(metrics, tmp_path)).read_text()
    assert 'dss_run_restarts_total{run="r",supervisor="1"} 2\n' in text
    assert 'dss_run_restart_budget_spent{run="r",supervisor="1"} 1\n' in text
    assert "# TYPE dss_run_restarts_total counter\n" in text
    assert not Path(_local(metrics, tmp_path) + ".new").exists()


def test_supervisor_without_metrics_is_unchanged() -> None:
    """Without a metrics file (no monitoring) the script has no trace of them: the launch
    of a stack without monitoring stays as it was deployed."""
    script = run.supervisor_script(cmd="true", run_name="r", workdir="/opt/dss", max_restarts=2,
                                   delay_s=0, pattern="p")  # fmt: skip
    assert "metrics" not in script and ".prom" not in script


def test_monitoring_doc_documents_the_restart_metrics() -> None:
    """docs/monitoring.md "Restart metrics" lists exactly the supervisors' metrics."""
    doc = (Path(__file__).resolve().parents[4] / "docs" / "monitoring.md").read_text()
    section = doc.split("\n## Restart metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `dss_")}
    assert documented == {run.RESTARTS_METRIC, run.BUDGET_METRIC}


def test_probe_reports_the_stop_marker(tmp_path: Path) -> None:
    """Run as the task runs it, the probe says `stopping=1` once the run's stop marker
    exists, and nothing of it before."""
    script = _local(run.probe_script("myrun"), tmp_path)
    env = {"PATH": "/usr/bin:/bin", **run.probe_env("myrun", "no-such-training-script")}

    def said() -> str:
        proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
        return proc.stdout

    assert "stopping=" not in said()
    marker = Path(_local(run.stop_marker("myrun"), tmp_path))
    marker.parent.mkdir(parents=True)
    marker.touch()
    assert parse_probe(said()).stopping


def test_supervisor_follows_a_task_that_moved(tmp_path: Path) -> None:
    """With `follow`: the watch stops a launcher once a hostfile address stops answering;
    the next attempt's rebuild puts the task that answers in its place, the launcher runs
    on it, and the restart, the loss and the move are all in the restarts file."""
    listeners = {}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    for a in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        listeners[a] = socket.create_server((a, port), reuse_port=False)
    try:
        hostfile = Path(_local(f"{LAUNCH_DIR}/r/hostfile", tmp_path))
        hostfile.parent.mkdir(parents=True)
        hostfile.write_text("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
        follow = run.Follow(hostfile=f"{LAUNCH_DIR}/r/hostfile", port=port,
                            addresses=("127.0.0.1", "127.0.0.2", "127.0.0.3"), wait_s=20,
                            interval_s=1, misses=2)  # fmt: skip
        Path(_local(run.follow_path("r"), tmp_path)).write_text(run.follow_program())
        Path(_local(run.follow_settings_path("r"), tmp_path)).write_text(
            _local(follow.settings("r"), tmp_path)
        )
        launcher = tmp_path / "launcher.sh"
        starts = tmp_path / "starts"
        launcher.write_text(
            f"echo x >> {starts}\ngrep -q 127.0.0.3 {hostfile} && exit 0\nsleep 60\n"
        )
        script = run.supervisor_script(cmd=f"sh {launcher}", run_name="r", workdir="/opt/dss",
                                       max_restarts=2, delay_s=0, pattern=str(launcher),
                                       follow=follow)  # fmt: skip
        path = tmp_path / "supervise.sh"
        path.write_text(_local(script, tmp_path))
        proc = subprocess.Popen(["sh", str(path)], cwd=tmp_path)
        try:
            wait_until = time.monotonic() + 20
            while not starts.exists() and time.monotonic() < wait_until:
                time.sleep(0.1)
            listeners.pop("127.0.0.2").close()  # the worker's host is lost
            assert proc.wait(timeout=40) == 0
        finally:
            proc.kill()
    finally:
        for s in listeners.values():
            s.close()
    assert hostfile.read_text() == "127.0.0.1 slots=1\n127.0.0.3 slots=1\n"
    assert len(starts.read_text().splitlines()) == 2
    records = [json.loads(x) for x in (tmp_path / "data/logs/r/restarts.jsonl").read_text().split()]
    assert [r["event"] for r in records] == ["gone", "restart", "hostfile"]
    assert records[2]["moved"] == {"127.0.0.2": "127.0.0.3"}
    log = (tmp_path / "data/logs/r/launcher.log").read_text()
    assert "127.0.0.2 has not answered" in log and "the hostfile follows the tasks" in log


def test_supervisor_without_follow_runs_the_launcher_in_the_foreground() -> None:
    """Without `follow` the attempt is the one line it always was (a stack deployed
    before follow_moves keeps its launch: the upgrade stays a no-op)."""
    script = run.supervisor_script(cmd="deepspeed x", run_name="r", workdir="/opt/dss",
                                   max_restarts=2, delay_s=0, pattern="p")  # fmt: skip
    assert "  rc=0\n  deepspeed x >>/data/logs/r/launcher.log 2>&1 || rc=$?\n  if [" in script
    assert "follow" not in script


def test_supervisor_with_follow_starts_nothing_after_a_stop_in_the_rebuild(
    tmp_path: Path,
) -> None:
    """With `follow`: a stop marker set while the attempt's rebuild waited (a launch
    replaced meanwhile) means no launcher is started; the supervisor exits."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    try:
        hostfile = Path(_local(f"{LAUNCH_DIR}/r/hostfile", tmp_path))
        hostfile.parent.mkdir(parents=True)
        hostfile.write_text("127.0.0.1 slots=1\n")
        follow = run.Follow(hostfile=f"{LAUNCH_DIR}/r/hostfile", port=port,
                            addresses=("127.0.0.1",), wait_s=5, interval_s=1, misses=2)  # fmt: skip
        Path(_local(run.follow_path("r"), tmp_path)).write_text(run.follow_program())
        Path(_local(run.follow_settings_path("r"), tmp_path)).write_text(
            _local(follow.settings("r"), tmp_path)
        )
        Path(_local(run.stop_marker("r"), tmp_path)).touch()
        starts = tmp_path / "starts"
        script = run.supervisor_script(cmd=f"sh -c 'echo x >> {starts}'", run_name="r",
                                       workdir="/opt/dss", max_restarts=2, delay_s=0,
                                       pattern="x-none", follow=follow)  # fmt: skip
        assert _sh(_local(script, tmp_path), tmp_path).returncode == 0
    finally:
        listener.close()
    assert not starts.exists(), "a launcher started after the stop"


def test_follow_settings_gain_the_takeover_keys_only_with_follow_master() -> None:
    """A run that follows only its workers keeps its settings file as it was (its
    launch is unchanged); with follow_master the takeover's keys are added."""
    plain = run.Follow(hostfile="/h", port=2222, names=("tasks.ds-worker",))
    assert set(json.loads(plain.settings("r"))) == {
        "hostfile", "port", "names", "addresses", "wait_s", "interval_s", "misses", "events"
    }  # fmt: skip
    moves = run.Follow(hostfile="/h", port=2222, names=("tasks.ds-worker",),
                       master_names=("tasks.ds-master",), master_moves=True, pattern="/p",
                       max_takeovers=3)  # fmt: skip
    extra = json.loads(moves.settings("r"))
    assert extra["active"] == f"{LAUNCH_DIR}/r/active" and extra["lease"] == f"{LAUNCH_DIR}/r/lease"
    assert (extra["master_names"], extra["pattern"], extra["max_takeovers"]) == (
        ["tasks.ds-master"],
        "/p",
        3,
    )
    assert extra["supervisor"] == run.supervisor_path("r") and extra["stop"] == run.stop_marker("r")
    assert "module" not in extra


def test_follow_settings_name_a_module_only_where_the_command_is_one() -> None:
    """follow_master with a `-m` command: the module, by which the takeover's watch
    finds the ranks, is in the settings; a script's settings have no such key."""
    moves = run.Follow(hostfile="/h", port=2222, master_moves=True, pattern="(-m) p( |$)",
                       module="mypkg.train")  # fmt: skip
    assert json.loads(moves.settings("r"))["module"] == "mypkg.train"


def test_takeover_loop_names_no_run_path_the_stop_kills() -> None:
    """The loop is the master task's command: `pkill -f` on the run's paths (the stop
    script) or `pgrep -f deepspeed` (the launch's check) must never match it."""
    text = run.takeover_loop()
    for pattern in (run.follow_path("lab8"), run.takeover_path("lab8"),
                    run.supervisor_prefix("lab8"), "deepspeed", "lab8"):  # fmt: skip
        assert pattern not in text, pattern
    assert "${DSS_RUN}/takeover.py" in text and text.startswith("while pgrep -x sshd")


def _moving(tmp: Path, port: int, run_name: str = "r") -> run.Follow:
    """A run on 127.0.0.1 that follows its master: hostfile, follow.py, takeover.py, ranks.py
    and the settings written under `tmp`."""
    hostfile = Path(_local(f"{LAUNCH_DIR}/{run_name}/hostfile", tmp))
    hostfile.parent.mkdir(parents=True)
    hostfile.write_text("127.0.0.1 slots=1\n")
    follow = run.Follow(hostfile=f"{LAUNCH_DIR}/{run_name}/hostfile", port=port,
                        addresses=("127.0.0.1",), wait_s=5, interval_s=1, misses=2,
                        master_moves=True, pattern="x-none", max_takeovers=2)  # fmt: skip
    Path(_local(run.follow_path(run_name), tmp)).write_text(run.follow_program())
    Path(_local(run.takeover_path(run_name), tmp)).write_text(run.follow_program("takeover.py"))
    Path(_local(run.ranks_path(run_name), tmp)).write_text(run.follow_program("ranks.py"))
    Path(_local(run.follow_settings_path(run_name), tmp)).write_text(
        _local(follow.settings(run_name), tmp)
    )
    return follow


def test_supervisor_claims_the_run_and_releases_it_when_done(tmp_path: Path) -> None:
    """With follow_master the supervisor writes its task into the active file (keeping
    the takeovers counted), touches the lease, passes the hostfile's first address as
    --master_addr, and removes the file when the run ends by itself."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    active = Path(_local(run.active_path("r"), tmp_path))
    seen = tmp_path / "seen"
    try:
        follow = _moving(tmp_path, port)
        active.write_text("old-task abc 1\n")
        slot = f"--master_addr={run.MASTER_ADDR_SLOT}"
        cmd = f"sh -c 'cat {run.active_path('r')} > {seen}; echo $0 >> {seen}' {slot}"
        script = run.supervisor_script(cmd=cmd, run_name="r", workdir="/opt/dss", max_restarts=1,
                                       delay_s=0, pattern="x-none", follow=follow)  # fmt: skip
        path = tmp_path / "supervise.sh"
        path.write_text(_local(script, tmp_path))
        env = {**os.environ, "DSS_TASK_ID": "task-a", "DSS_SPEC": "spec-a"}
        proc = subprocess.run(["sh", str(path)], cwd=tmp_path, env=env, timeout=60)
    finally:
        listener.close()
    assert proc.returncode == 0
    lines = seen.read_text().splitlines()
    assert lines[0] == "task-a spec-a 1", "the claim keeps the takeovers counted"
    assert lines[1] == "--master_addr=127.0.0.1"
    assert Path(_local(run.lease_path("r"), tmp_path)).exists()
    assert not active.exists(), "a run that ended by itself is released"


def test_supervisor_whose_run_was_taken_over_stops_and_leaves_the_file(tmp_path: Path) -> None:
    """Another task wrote itself into the active file (it took the run over): this
    supervisor's watch stops its launcher, and it exits without a restart, leaving the
    file to its new owner."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    active = Path(_local(run.active_path("r"), tmp_path))
    started = tmp_path / "started"
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(f"touch {started}\nsleep 60\n")
    try:
        follow = _moving(tmp_path, port)
        script = run.supervisor_script(cmd=f"sh {launcher}", run_name="r", workdir="/opt/dss",
                                       max_restarts=2, delay_s=0, pattern=str(launcher),
                                       follow=follow)  # fmt: skip
        path = tmp_path / "supervise.sh"
        path.write_text(_local(script, tmp_path))
        env = {**os.environ, "DSS_TASK_ID": "task-a", "DSS_SPEC": "spec-a"}
        proc = subprocess.Popen(["sh", str(path)], cwd=tmp_path, env=env)
        try:
            deadline = time.monotonic() + 20
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert started.exists(), "the launcher never started"
            active.write_text("task-b spec-a 1\n")
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
    finally:
        listener.close()
    assert active.read_text() == "task-b spec-a 1\n"
    records = Path(tmp_path / "data/logs/r/restarts.jsonl")
    text = records.read_text() if records.exists() else ""
    assert '"event":"restart"' not in text, text
    assert (
        "another master task took the run over"
        in (tmp_path / "data/logs/r/launcher.log").read_text()
    )


def _universal_supervisor(tmp: Path, converter: str, starts: Path) -> str:
    """A supervisor whose attempts first run `converter` (shell, standing in for
    infra/task/universal.py, run by the image's python) before a launcher that counts
    its starts in `starts`; the task's paths under `tmp`."""
    program = Path(_local(universal_path("r"), tmp))
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(converter)
    script = run.supervisor_script(cmd=f"sh -c 'echo x >> {starts}'", run_name="r",
                                   workdir="/opt/dss", max_restarts=2, delay_s=0,
                                   pattern="x-none", universal="/data/checkpoints/r")  # fmt: skip
    return _local(script, tmp).replace(IMAGE_PYTHON, "sh")


def test_supervisor_converts_before_the_launcher(tmp_path: Path) -> None:
    """`universal`: each attempt runs the converter on the run's checkpoint dir, then
    the launcher."""
    starts, seen = tmp_path / "starts", tmp_path / "converted"
    script = _universal_supervisor(tmp_path, f'echo "$1" >> {seen}\n', starts)
    assert _sh(script, tmp_path).returncode == 0
    assert seen.read_text() == f"{tmp_path}/data/checkpoints/r\n"
    assert starts.read_text() == "x\n"


def test_supervisor_whose_conversion_fails_starts_no_launcher(tmp_path: Path) -> None:
    """A conversion that fails is the attempt's failure: no launcher, a restart, and
    the budget spent after the last."""
    starts = tmp_path / "starts"
    script = _universal_supervisor(tmp_path, "exit 1\n", starts)
    assert _sh(script, tmp_path).returncode == 1
    assert not starts.exists(), "a launcher started after a failed conversion"
    records = (tmp_path / "data/logs/r/restarts.jsonl").read_text().split()
    assert [json.loads(r)["event"] for r in records] == ["restart", "restart", "budget_spent"]


def test_supervisor_stopped_while_converting_starts_no_launcher(tmp_path: Path) -> None:
    """A stop while the converter runs (the stop sets the marker and kills it): the
    supervisor exits 0 and starts no launcher."""
    starts = tmp_path / "starts"
    marker = _local(run.stop_marker("r"), tmp_path)
    script = _universal_supervisor(tmp_path, f"touch {marker}\nexit 137\n", starts)
    assert _sh(script, tmp_path).returncode == 0
    assert not starts.exists(), "a launcher started after the stop"
