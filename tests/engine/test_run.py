"""The run as a resource that tells the truth (issue 20), with the real engine on the lab.

One dev stack, in order: a running run is no drift; a crashed rank is restarted by the
run's supervisor with no `up`, and the next preview is a no-op; a second crash spends
the budget (1 here), and refresh and preview both report the failed run, naming it and
why; `up` relaunches it from the newest checkpoint; stopped ranks (SIGSTOP) make a
stalled run, reported and relaunched the same way; a run that finished its last step
is neither drift nor relaunched. The stack trains synced code (`training.code.dir`, a
copy of the image's own), so the same run also shows that one line of `train.py`
changed relaunches it on the new code with no image and no service touched, and that
code edited on the data dir is drift that `up --refresh` repairs without a relaunch.
Times are printed (the README's acceptance table).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.configs import dev_config
from harness.lab import (
    check_resumed_after_the_stop,
    client,
    exec_text,
    launcher_log_since,
    logged_steps,
    restart_events,
    run_log,
    run_resumes,
    service_versions,
    shared,
)
from harness.stack import Stack, restarting
from harness.waits import wait_for
from infra.layout import MASTER_SERVICE, WORKER_SERVICE
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.engine

RUN = "runstate"
SECRET = "wandb-runstate-8e2c51"
CKPT_EVERY = 5
STALL_AFTER_S = 45
TASKS = ((1, MASTER_SERVICE), (2, WORKER_SERVICE))
"""(lab host, service) of each training task of the dev stack."""
RANK = "--local_rank="
"""In a rank's command line only (not the launcher's, the supervisor's or sshd's)."""
CODE = f"/data/code/{RUN}/"
"""In the command line of the run's launcher and ranks, whatever the code's version."""
MARK = "dss-engine-test: code version 2"
"""What the changed train.py prints at start."""


def task(host: int, service: str) -> Any:
    """The running container of `service` on lab host `host`."""
    (ctr,) = client(host).containers.list(
        filters={"label": f"com.docker.swarm.service.name={service}"}
    )
    return ctr


def restarts() -> list[dict[str, Any]]:
    """The run's restarts file: one record per automatic restart or spent budget."""
    return restart_events(RUN)


def resumes() -> list[int]:
    """The first step of every resume so far, as rank 0 announced it."""
    return [r.next_step for r in run_resumes(RUN)]


def resumed_after(before: int, t0: float, timeout: float = 300) -> tuple[int, float]:
    """Wait for resume number `before + 1` and its first logged step; return the step
    and the seconds from `t0` until it was logged."""
    nxt = wait_for("a resume", lambda: resumes()[before] if len(resumes()) > before else None,
                   timeout, 1)  # fmt: skip
    wait_for(f"step {nxt} logged", lambda: nxt in logged_steps(RUN), timeout, 1)
    return nxt, time.monotonic() - t0


def kill_worker_rank() -> tuple[int, float]:
    """SIGKILL the worker's rank; the last step logged before it, and when."""
    step = max(logged_steps(RUN))
    exec_text(task(2, WORKER_SERVICE), ["pkill", "-KILL", "-f", "--", RANK])
    return step, time.monotonic()


def run_output(stack: Stack) -> dict[str, Any]:
    return dict(stack.outputs()["run"])


def drift(stack: Stack, *args: str) -> str:
    """What a command run with --expect-no-changes printed, all of it; it must fail."""
    proc = stack.pulumi(*args, "--expect-no-changes", "--diff", check=False)
    assert proc.returncode != 0, f"pulumi {' '.join(args)} found no change:\n{proc.stdout[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def stack(lab: dict[str, Any], make_stack: MakeStack, code: Path) -> Iterator[Stack]:
    """The dev stack training a long run of synced code with a budget of one automatic
    restart."""
    config = dev_config(
        run_name=RUN,
        steps=100000,
        checkpoint_every=CKPT_EVERY,
        code={"dir": str(code)},
        script="train.py",
    )
    config["deepspeed-swarm:training"]["recovery"] = {
        "max_restarts": 1,
        "restart_delay": "5s",
        "stall_after": f"{STALL_AFTER_S}s",
    }
    s = make_stack("test-runstate", config, {"wandb_api_key": SECRET})
    s.pulumi("up", "--yes", "--skip-preview")
    wait_for("three logged steps", lambda: len(logged_steps(RUN)) >= 3, 600, 5)
    yield s


def test_running_run_is_no_drift(stack: Stack) -> None:
    """A training run: refresh and preview change nothing, the output says running."""
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    stack.pulumi("preview", "--expect-no-changes")
    out = run_output(stack)
    assert out["state"] == "running" and out["step"] is None, out


def test_crashed_rank_resumes_by_itself(stack: Stack) -> None:
    """A killed rank: the supervisor restarts the run from the last complete checkpoint
    with no `up` (at most one interval redone), records the restart, and the next
    preview and refresh are no-ops."""
    step, t0 = kill_worker_rank()
    first, took = resumed_after(len(resumes()), t0)
    print(f"rank killed after step {step}: resumed at step {first} in {took:.0f} s, no human")
    assert step - first < CKPT_EVERY, f"resumed at {first}, {step} was logged before"
    (record,) = restarts()
    assert record["event"] == "restart" and record["restart"] == 1, record
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_spent_budget_is_drift_naming_the_run(stack: Stack) -> None:
    """A second crash spends the budget: refresh reports the run failed, with the reason
    and the last step; a plain preview proposes to update (relaunch) it."""
    kill_worker_rank()
    wait_for("the spent budget recorded", lambda: len(restarts()) >= 2, 120)
    assert restarts()[-1]["event"] == "budget_spent", restarts()
    report = drift(stack, "refresh", "--preview-only")
    assert "run-state" in report and '"running" => "failed"' in report, report[-3000:]
    assert "restart budget spent after 1 automatic restarts" in report, report[-3000:]
    preview = drift(stack, "preview")
    assert "launch-run-state" in preview and "1 to update" in preview, preview[-3000:]


def test_up_relaunches_a_failed_run(stack: Stack) -> None:
    """`up` relaunches the failed run from its newest complete checkpoint; at most one
    checkpoint interval of steps is redone; the next preview is a no-op."""
    last, before, t0 = max(logged_steps(RUN)), len(resumes()), time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    first, took = resumed_after(before, t0)
    print(f"failed after step {last}: `up` relaunched it, step {first} logged in {took:.0f} s")
    assert last - first < CKPT_EVERY, f"resumed at {first}, {last} was logged before"
    out = run_output(stack)
    assert out["state"] == "running" and out["relaunches"] == 1 and out["restarts"] == 1, out
    stack.pulumi("preview", "--expect-no-changes")


def test_stalled_run_is_drift_and_up_relaunches_it(stack: Stack) -> None:
    """Stopped ranks (SIGSTOP: a hang) make a stalled run after `stall_after`: refresh
    names it stalled; `up` kills what hangs and relaunches; no stopped process is left."""
    for host, service in TASKS:
        exec_text(task(host, service), ["pkill", "-STOP", "-f", "--", RANK])
    time.sleep(STALL_AFTER_S + 15)
    report = drift(stack, "refresh", "--preview-only")
    assert '"running" => "stalled"' in report and "no step for" in report, report[-3000:]
    before = len(resumes())
    stack.pulumi("up", "--yes", "--skip-preview")
    resumed_after(before, time.monotonic())
    for host, service in TASKS:
        ps = exec_text(task(host, service), ["ps", "-eo", "stat=,args="])
        stopped = [line for line in ps.splitlines() if RANK in line and line.startswith("T")]
        assert not stopped, f"{service}: stopped ranks left: {stopped}"
    assert run_output(stack)["relaunches"] == 2
    stack.pulumi("preview", "--expect-no-changes")


def test_code_change_relaunches_on_the_new_code_alone(stack: Stack, code: Path) -> None:
    """One line of train.py changed: the preview updates the code and replaces the launch
    (the one change that restarts the job); `up` stops the run with a final checkpoint,
    copies the new version and relaunches from that checkpoint in the same tasks (no
    step trained twice), no image built and no service rolled; the next preview and
    refresh are no-ops."""
    main = code / "train.py"
    old = "from dss_train.main import main"
    main.write_text(main.read_text().replace(old, f"print({MARK!r}, flush=True)\n{old}"))
    p = stack.plan()
    name = stack.name
    assert set(p) == {f"{name}-launch-code-sync", f"{name}-launch-run", f"{name}-launch-run-state"}
    assert restarting(p) == [f"{name}-launch-run"], p
    versions, offset = service_versions(), run_log(RUN, "launcher.log").stat().st_size
    last, before, t0 = max(logged_steps(RUN)), len(resumes()), time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    first, took = resumed_after(before, t0)
    print(f"code changed after step {last}: `up` to step {first} on the new code in {took:.0f} s")
    assert MARK in launcher_log_since(RUN, offset), "the relaunched run did not run the new code"
    assert service_versions() == versions, "a code change updated a service"
    check_resumed_after_the_stop(launcher_log_since(RUN, offset), first, last)
    digest = stack.outputs()["code"]["digest"]
    assert shared("code", RUN, digest, "train.py").read_text() == main.read_text()
    kept = [d.name for d in shared("code", RUN).iterdir()]
    assert digest in kept and len(kept) == 2, f"the new and the previous version only: {kept}"
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_code_edited_on_the_data_dir_is_drift_repaired_without_relaunch(stack: Stack) -> None:
    """A file of the running version edited on the hosts: refresh names the code's
    digest and where; `up --refresh` copies the version back, and the run goes on
    (no relaunch: the launch's triggers hold the program's digest)."""
    digest = stack.outputs()["code"]["digest"]
    on_disk = shared("code", RUN, digest, "train.py")
    good = on_disk.read_text()
    on_disk.write_text(good + "# edited by hand on a host\n")
    report = drift(stack, "refresh", "--preview-only")
    assert "launch-code-sync" in report and "modified on lab-h1" in report, report[-3000:]
    before = len(resumes())
    stack.pulumi("up", "--refresh", "--yes", "--skip-preview")
    assert on_disk.read_text() == good, "up did not restore the code"
    assert len(resumes()) == before, "repairing the code relaunched the run"
    stack.pulumi("preview", "--expect-no-changes")


def test_finished_run_is_not_drift(stack: Stack) -> None:
    """A run stopped, given a last step a few steps on, and `up`: it trains to that step
    and finishes; then refresh, preview and `up` change nothing and start nothing."""
    for host, service in TASKS:
        ctr = task(host, service)
        exec_text(ctr, ["pkill", "-KILL", "-f", f"/data/.dss/{RUN}/supervise"])
        exec_text(ctr, ["pkill", "-KILL", "-f", CODE])
    target = max(logged_steps(RUN)) + 2 * CKPT_EVERY
    stack.pulumi("config", "set", "--path", "training.steps", str(target))
    stack.pulumi("up", "--yes", "--skip-preview")
    wait_for(f"step {target}", lambda: max(logged_steps(RUN)) >= target, 600, 2)
    wait_for("the run's processes gone", lambda: not training_processes_left(), 120)
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    stack.pulumi("preview", "--expect-no-changes")
    # A real refresh records what the tasks say (the preview-only one above records
    # nothing); the no-op `up` after it carries the record into the `run` output.
    stack.pulumi("refresh", "--yes", "--skip-preview")
    stack.pulumi("up", "--yes", "--expect-no-changes", "--skip-preview")
    out = run_output(stack)
    assert out["state"] == "finished" and out["step"] == target, out
    assert not training_processes_left(), "a finished run was started again"


def training_processes_left() -> list[str]:
    """Command lines of the run's processes (supervisors, launchers, ranks) in its tasks."""
    out = []
    for host, service in TASKS:
        ps = exec_text(task(host, service), ["ps", "-eo", "args="])
        out += [x for x in ps.splitlines() if CODE in x or "supervise" in x]
    return out
