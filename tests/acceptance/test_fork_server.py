"""training.fork_server with the real engine on the dev lab (issue 22): the launchers
and ranks are forks of one warm interpreter per task, and everything that stops,
restarts and reads the run behaves as without it.

One dev stack training synced code, in order: every launcher and rank of the run is
served by its task's fork server, and the preview is a no-op; one line of `train.py`
changed relaunches on the new code through the same (warm) servers; a killed rank is
restarted by the supervisor, with nothing of the old attempt left behind; turning the
fork server off relaunches the run as the preview said with python's own processes
again. Times are printed.

In the acceptance suite, not the test command (it was tests/engine/test_fork_server.py,
2.8 min there; issue 43): `training.fork_server` is off unless a stack sets it; the
test command keeps its rendering under golden files (every variant of the launch and
the supervisor, tests/unit/infra/golden/scripts/) and its program under unit tests;
the warm servers under the engine, a killed rank and turning it off run here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from delivery.preview import Impact
from harness.configs import dev_config
from harness.lab import (
    check_resumed_after_the_stop,
    client,
    exec_text,
    launcher_log_since,
    launcher_log_size,
    logged_steps,
    run_resumes,
)
from harness.stack import Stack
from harness.waits import wait_for
from infra.layout import MASTER_SERVICE, WORKER_SERVICE
from infra.render.run import forkserver_path
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.acceptance

RUN = "forked"
SECRET = "wandb-forked-3a0c6e"
CKPT_EVERY = 5
TASKS = ((1, MASTER_SERVICE), (2, WORKER_SERVICE))
"""(lab host, service) of each training task of the dev stack."""
SERVED = {MASTER_SERVICE: 3, WORKER_SERVICE: 2}
"""Processes each task's server runs for the run: the runner (on the master only),
the node's launcher and its one CPU rank."""
RANK = "--local_rank="
CLIENT = forkserver_path(RUN)
LAUNCH = "test-forked-launch-run"


def task(host: int, service: str) -> Any:
    (ctr,) = client(host).containers.list(
        filters={"label": f"com.docker.swarm.service.name={service}"}
    )
    return ctr


def processes(host: int, service: str) -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of every process in the task."""
    out = exec_text(task(host, service), ["ps", "-eo", "pid=,ppid=,args="])
    rows = [line.split(None, 2) for line in out.splitlines() if line.strip()]
    return {int(r[0]): (int(r[1]), r[2] if len(r) > 2 else "") for r in rows}


def servers(procs: dict[int, tuple[int, str]]) -> list[int]:
    """The task's servers: its keepers and served processes are forks of one and carry
    its command line, so a server is the one whose parent does not."""
    forks = {pid for pid, (_, args) in procs.items() if " --serve /tmp/dss-fork-" in args}
    return [pid for pid in forks if procs[pid][0] not in forks]


def served(procs: dict[int, tuple[int, str]], server: int) -> list[int]:
    """The processes the server runs: children of its keepers (its own children)."""
    keepers = {pid for pid, (ppid, _) in procs.items() if ppid == server}
    return [pid for pid, (ppid, _) in procs.items() if ppid in keepers]


def resumed_after(before: int, timeout: float = 300) -> int:
    """The first step of resume number `before + 1`, once it is logged."""

    def nxt() -> int | None:
        r = run_resumes(RUN)
        return r[before].next_step if len(r) > before else None

    step = wait_for("a resume", nxt, timeout, 1)
    wait_for(f"step {step} logged", lambda: step in logged_steps(RUN), timeout, 1)
    return step


def server_pids() -> dict[str, list[int]]:
    return {service: servers(processes(host, service)) for host, service in TASKS}


@pytest.fixture(scope="module")
def stack(lab: dict[str, Any], make_stack: MakeStack, code: Path) -> Stack:
    """The dev stack training synced code through the fork server."""
    config = dev_config(
        run_name=RUN,
        steps=100000,
        checkpoint_every=CKPT_EVERY,
        code={"dir": str(code)},
        script="train.py",
        fork_server=True,
    )
    config["deepspeed-swarm:training"]["recovery"] = {"max_restarts": 3, "restart_delay": "5s"}
    s = make_stack("test-forked", config, {"wandb_api_key": SECRET})
    t0 = time.monotonic()
    s.pulumi("up", "--yes", "--skip-preview")
    wait_for("three logged steps", lambda: len(logged_steps(RUN)) >= 3, 600, 2)
    print(f"up to the third step, the servers cold: {time.monotonic() - t0:.0f} s")
    return s


def test_every_launcher_and_rank_is_served(stack: Stack) -> None:
    """Each task runs one server, which runs the task's launcher and rank (and the
    runner on the master); the rank's visible process is the client, whose command line
    names the script and its arguments as python's did; preview and refresh no-ops."""
    for host, service in TASKS:
        procs = processes(host, service)
        (server,) = servers(procs)
        mine = served(procs, server)
        assert len(mine) == SERVED[service], f"{service}: served {mine} of {procs}"
        ranks = [args for _, args in procs.values() if RANK in args]
        # The kernel runs the client as `<python> -S <client> ...` (its first line).
        client_cmd = f"/opt/venv/bin/python -S {CLIENT} -u /data/code/{RUN}/"
        assert ranks and all(a.startswith(client_cmd) for a in ranks), ranks
        assert not any(CLIENT in procs[pid][1] for pid in mine), "a served process names it"
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_code_change_runs_on_the_warm_servers(stack: Stack, code: Path) -> None:
    """One line of train.py changed: `up` stops the served ranks with a final checkpoint
    (their clients pass the SIGTERM on) and relaunches the run on the new code through
    the servers already running (no new one started), from that checkpoint."""
    before_servers, before = server_pids(), len(run_resumes(RUN))
    offset = launcher_log_size(RUN)
    mark = "dss-engine-test: forked version 2"
    main = code / "train.py"
    main.write_text(
        main.read_text().replace(
            "from dss_train.main import main", f"print({mark!r}, flush=True)\n"
            "from dss_train.main import main", 1
        )
    )  # fmt: skip
    t0, last = time.monotonic(), max(logged_steps(RUN))
    stack.pulumi("up", "--yes", "--skip-preview")
    up_s = time.monotonic() - t0
    step = resumed_after(before)
    print(f"code change: up {up_s:.0f} s, first new step {time.monotonic() - t0:.0f} s")
    log = launcher_log_since(RUN, offset)
    assert mark in log
    assert server_pids() == before_servers, "the relaunch started new servers"
    check_resumed_after_the_stop(log, step, last)
    stack.pulumi("preview", "--expect-no-changes")


def test_killed_rank_restarts_with_nothing_left_behind(stack: Stack) -> None:
    """A served rank's client SIGKILLed: the served rank dies with it, the supervisor
    restarts the run, and each task's server again runs only this attempt's processes."""
    before = len(run_resumes(RUN))
    t0 = time.monotonic()
    exec_text(task(2, WORKER_SERVICE), ["pkill", "-KILL", "-f", "--", RANK])
    resumed_after(before)
    print(f"killed rank: first resumed step {time.monotonic() - t0:.0f} s after the kill")
    for host, service in TASKS:
        procs = processes(host, service)
        (server,) = servers(procs)
        assert len(served(procs, server)) == SERVED[service], f"{service}: {procs}"
    stack.pulumi("preview", "--expect-no-changes")


def test_turning_it_off_relaunches_as_the_preview_said(stack: Stack) -> None:
    """fork_server off: the preview replaces the launch (the one change that restarts
    the job; no service, no roster); `up` stops the served run, nothing of it is left,
    and it is relaunched with python's own processes; the next preview is a no-op."""
    stack.pulumi("config", "set", "--path", "training.fork_server", "false")
    plan = stack.plan()
    assert plan.get(LAUNCH) == ("replace", Impact.RESTARTS.label), plan
    assert set(plan) == {LAUNCH, f"{LAUNCH}-state"}, plan  # no service, no roster
    before = len(run_resumes(RUN))
    stack.pulumi("up", "--yes", "--skip-preview")
    # Not asserted: the old ranks' final checkpoint. A pdsh run's stop loses it with or
    # without the fork server (pdsh goes first, and a rank's next print hits the closed
    # pipe; seen 2026-12-05 on this stack without fork_server): docs/run.md, "Limits".
    resumed_after(before)
    for host, service in TASKS:
        procs = processes(host, service)
        (server,) = servers(procs)  # idle now: it lives as long as its task
        assert served(procs, server) == [], f"{service}: still served: {procs}"
        ranks = [args for _, args in procs.values() if RANK in args]
        assert ranks and not any(CLIENT in a for a in ranks), ranks
    stack.pulumi("preview", "--expect-no-changes")
