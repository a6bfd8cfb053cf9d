"""Acceptance on eight GPU hosts and a spare (issue 8), with the real engine on the
9-host lab: the deployment guides' checks after `pulumi up` from nothing, a lost
host resumed on the spare, a planned change, drift on eight hosts, a broken
config, secrets nowhere, and destroy. Tests run in file order on one stack; each
records a row of the table `scripts/acceptance` prints (tests/acceptance/report.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from functools import partial
from typing import Any

import pytest
import yaml
from dss_train import checkpoints as ck

from delivery.preview import Impact
from harness import ROOT
from harness.configs import lab8_config
from harness.lab import (
    LAB_ROOT,
    CommandFailed,
    client,
    docker,
    docker_run,
    edit_node,
    host_index,
    launcher_log_size,
    logged_steps,
    remove_network,
    restart_events,
    restart_events_after,
    run_log,
    service_versions,
    shape_link,
    shared,
    tasks_of,
    training_processes,
    unshape_link,
)
from harness.lab import launcher_log_since as lab_log_since
from harness.lab import resumed_step as lab_resumed_step
from harness.lab import wait_resumed as lab_wait_resumed
from harness.stack import Stack, restarting
from harness.waits import wait_for
from infra.config.models.job import Recovery
from lab.config import host_addr
from tests.acceptance.conftest import HOSTS, RUN, SECRET, SPARE, task_container
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

CHECKPOINT_EVERY = 10
CHECKPOINTS = shared("checkpoints", RUN)
RESTARTS = Impact.RESTARTS.label
LAUNCH, ROSTER = "test-lab8-launch-run", "test-lab8-launch-roster"
GATE, RUN_STATE = "test-lab8-launch-gate-allreduce", "test-lab8-launch-run-state"
"""Changed with new tasks (the gate measures them) or a relaunch (the run's record):
neither touches training."""
MOVED_HOST = "lab-h8"
"""The host the planned changes drain, remove and add back (a worker, not a manager)."""


def latest_checkpoint() -> int | None:
    found, _ = ck.select_latest(CHECKPOINTS, hashes=False)
    return found[0] if found else None


def master_exec(stack: Stack, *argv: str, timeout: int = 600) -> str:
    """Run a command as the training user in the master task (rank 0's container)."""
    entry = stack.outputs()["rankMap"][0]
    ctr = task_container(entry["node"], entry["task_id"])
    host = host_index(entry["node"])
    proc = docker_run(host, "exec", "-u", "1000", ctr, *argv, check=False, timeout=timeout)
    assert proc.returncode == 0, f"ds-master: {' '.join(argv)} exited {proc.returncode}:\n" + (
        proc.stdout[-2000:] + proc.stderr[-2000:]
    )
    return proc.stdout


def addresses(stack: Stack) -> list[str]:
    return [e["address"] for e in stack.outputs()["rankMap"]]


wait_resumed = partial(lab_wait_resumed, RUN)
launcher_log_since = partial(lab_log_since, RUN)
resumed_step = partial(lab_resumed_step, RUN)
log_size = partial(launcher_log_size, RUN)


def world_size() -> int:
    """The world size of the last logged step."""
    rows = run_log(RUN, "metrics.jsonl").read_text().splitlines()
    return int(json.loads(rows[-1])["world_size"])


def loss_across(resumed: int, steps: int = 3) -> tuple[float, float]:
    """Mean loss of the last `steps` steps before checkpoint `resumed` and of the
    `steps` after the first resumed one (whose loss precedes any update with the
    loaded optimizer state), once they are logged."""
    wait_for(f"step {resumed + 1 + steps} logged",
             lambda: resumed + 1 + steps in logged_steps(RUN), 600, 1)  # fmt: skip
    rows = [json.loads(x) for x in run_log(RUN, "metrics.jsonl").read_text().splitlines() if x]
    loss = {r["step"]: r["loss"] for r in rows}
    before = [loss[s] for s in range(resumed - steps + 1, resumed + 1)]
    after = [loss[s] for s in range(resumed + 2, resumed + 2 + steps)]
    return sum(before) / steps, sum(after) / steps


def up_resumed(stack: Stack) -> tuple[int, float]:
    """`pulumi up`, then the step its relaunch resumed from and the seconds from the
    start of `up` to that resume's first logged step."""
    offset, t_up = log_size(), time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    resumed = wait_resumed(offset)
    return resumed, time.monotonic() - t_up


def edit_stack_file(stack: Stack, edit: Any) -> str:
    """Change the stack file's config in place (as a reviewer's PR does); returns
    the old text to restore. Secure values and the salt are kept as they are."""
    old = stack.config_file.read_text()
    doc = yaml.safe_load(old)
    edit(doc["config"])
    stack.config_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return old


@pytest.fixture(scope="module")
def stack(lab9: dict[str, Any], make_stack: MakeStack) -> Stack:
    return make_stack(
        "test-lab8",
        lab8_config(run_name=RUN, checkpoint_every=CHECKPOINT_EVERY),
        {"wandb_api_key": SECRET},
    )


def test_up_from_nothing(stack: Stack, report: dict[str, str]) -> None:
    """`pulumi up` from nothing: 9 Ready nodes, 3 managers, the spare empty."""
    t0 = time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    took = time.monotonic() - t0
    nodes = [
        json.loads(line) for line in docker(1, "node", "ls", "--format", "{{json .}}").splitlines()
    ]
    assert len(nodes) == HOSTS and all(n["Status"] == "Ready" for n in nodes), nodes
    managers = sorted(n["Hostname"] for n in nodes if n["ManagerStatus"])
    assert managers == ["lab-h1", "lab-h2", "lab-h3"], f"managers: {managers}"
    running = ["--filter", "desired-state=running", "--format", "{{.Node}}"]
    placed = docker(1, "service", "ps", "ds-worker", "ds-master", *running).split()
    assert sorted(placed) == [f"lab-h{i}" for i in range(1, 9)], f"training tasks on {placed}"
    standby = docker(1, "service", "ps", "ds-standby", "--format", "{{.Node}}").split()
    assert standby == [SPARE], f"ds-standby on {standby}, not the spare {SPARE}"
    gate = stack.outputs()["gate"]
    assert gate["state"] == "passed", gate
    report["figure"] = (
        f"{len(stack.outputs()['rankMap'])} training tasks + spare; up {took:.0f} s; the gate "
        f"passed in {gate['seconds']} s, {gate['busbw_MBps']} MB/s bus bandwidth at "
        f"{gate['figures'][-1]['bytes'] >> 20} MiB"
    )
    report["command"] = "pulumi up --stack lab8"


def test_each_task_sees_only_its_gpus(stack: Stack, report: dict[str, str]) -> None:
    """Each task's GPUs are the UUIDs Swarm assigned it; 64 distinct in all."""
    rank_map = stack.outputs()["rankMap"]
    seen: list[str] = []
    for entry in rank_map:
        node = entry["node"]
        ctr = task_container(node, entry["task_id"])
        env = docker(host_index(node), "inspect", ctr, "--format", "{{json .Config.Env}}")
        value = next(
            (
                e.split("=", 1)[1]
                for e in json.loads(env)
                if e.startswith("DOCKER_RESOURCE_NVIDIA-GPU=")
            ),
            "",
        )
        visible = sorted(u for u in value.split(",") if u)
        on_host = (LAB_ROOT / f"h{host_index(node)}" / "gpus").read_text().split()
        assert visible == sorted(entry["gpu_uuids"]), (
            f"{entry['task']} on {node}: the container has {visible}, the rank map says "
            f"{entry['gpu_uuids']}"
        )
        assert len(visible) == 8 and set(visible) <= set(on_host), (
            f"{entry['task']} on {node}: {visible} are not 8 of the host's GPUs {on_host}"
        )
        seen += visible
    assert len(seen) == 64 and len(set(seen)) == 64, f"{len(set(seen))} distinct of {len(seen)}"
    report["figure"] = "64 distinct UUIDs, 8 per task, each the host's own"
    report["command"] = (
        "pulumi stack output rankMap; docker inspect <task> (DOCKER_RESOURCE_NVIDIA-GPU)"
    )


def test_ssh_and_pdsh_reach_every_task(stack: Stack, report: dict[str, str]) -> None:
    """From the master, SSH and a pdsh fan-out reach all 8 tasks without a password."""
    addrs = addresses(stack)
    for addr in addrs:
        out = master_exec(stack, "ssh", "-o", "BatchMode=yes", addr, "hostname")
        assert out.strip().startswith("ds-"), f"ssh {addr}: {out!r}"
    out = master_exec(stack, "pdsh", "-w", ",".join(addrs), "hostname")
    answered = {line.split(":", 1)[0] for line in out.splitlines() if ":" in line}
    names = {line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
    assert answered == set(addrs) and len(names) == 8, f"pdsh answered {sorted(answered)}"
    report["figure"] = "8/8 tasks by ssh (BatchMode) and pdsh"
    report["command"] = "docker exec -u dss <ds-master> pdsh -w <8 addresses> hostname"


def test_allreduce_across_all_nodes(stack: Stack, report: dict[str, str]) -> None:
    """An all-reduce across the 8 nodes returns the right sum; bus bandwidth reported."""
    hostfile = f"/data/.dss/{RUN}/hostfile"
    cmd = (
        f"cd /opt/dss && /opt/venv/bin/python -m dss_train.collective --hostfile {hostfile}"
        " --me %h --sizes 1024 1048576 16777216 --iters 3"
    )
    out = master_exec(stack, "pdsh", "-w", ",".join(addresses(stack)), cmd)
    rows = [
        json.loads(line.split(":", 1)[1])
        for line in out.splitlines()
        if line.split(":", 1)[-1].strip().startswith("{")
    ]
    assert len(rows) == 3, f"rank 0 reported {len(rows)} sizes:\n{out[-2000:]}"
    assert all(r["sum_ok"] and r["ranks"] == 8 for r in rows), rows
    report["figure"] = (
        ", ".join(f"{r['bytes'] // 1024} KiB {r['busbw_MBps']:.2f} MB/s" for r in rows)
        + " bus bandwidth (gloo, 8 ranks, training running)"
    )
    report["command"] = "pdsh -w <8 addresses> python -m dss_train.collective --hostfile H --me %h"


def jupyter_status(url: str, token: str | None) -> int:
    """The HTTP status of JupyterLab's API at `url`, with the token or without."""
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0  # not listening (yet)


def test_jupyterlab_on_the_master(stack: Stack, report: dict[str, str]) -> None:
    """JupyterLab on the master answers with its token (200), refuses without (403)."""
    out = stack.outputs()
    base, token = out["jupyterUrl"].removesuffix("/lab"), out["jupyterToken"]
    api = f"{base}/api/contents"
    wait_for("JupyterLab's API", lambda: jupyter_status(api, token) == 200, timeout=180)
    assert jupyter_status(api, None) == 403, "JupyterLab answered without the token"
    assert jupyter_status(api, "not-the-token") == 403, "JupyterLab took a wrong token"
    req = urllib.request.Request(api, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        names = {c["name"] for c in json.load(resp)["content"]}
    assert {"logs", "checkpoints"} <= names, f"/data in JupyterLab holds {names}"
    port = base.rsplit(":", 1)[1]
    elsewhere = [
        f"lab-h{i}"
        for i in range(2, HOSTS + 1)
        if jupyter_status(f"http://{host_addr(i)}:{port}/api/status", token)
    ]
    assert not elsewhere, f"JupyterLab's port answers on {elsewhere}, not only the master"
    report["figure"] = (
        "200 with the token, 403 without or wrong; /data mounted; port on the master only"
    )
    report["command"] = "curl -H 'Authorization: token <jupyterToken>' <jupyterUrl>/api/contents"


def test_training_learns_and_checkpoints(stack: Stack, report: dict[str, str]) -> None:
    """Training across 8 nodes: the loss falls and checkpoints land on the shared /data."""
    log = run_log(RUN, "metrics.jsonl")

    def enough() -> list[dict[str, Any]] | None:
        rows = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        done = latest_checkpoint()
        return rows if len(rows) >= 3 * CHECKPOINT_EVERY and done is not None else None

    rows = wait_for("30 steps and a complete checkpoint", enough, timeout=900, interval=5)
    first = sum(r["loss"] for r in rows[:5]) / 5
    last = sum(r["loss"] for r in rows[-5:]) / 5
    assert last < first, f"loss did not fall: first 5 steps {first:.3f}, last 5 {last:.3f}"
    assert rows[-1]["world_size"] == 8, rows[-1]
    ckpt = latest_checkpoint()
    report["figure"] = (
        f"loss {first:.2f} -> {last:.2f} over {len(rows)} steps; checkpoint step {ckpt} "
        f"complete (manifest); {rows[-1]['step_time_s']:.1f} s/step"
    )
    report["command"] = f"tail metrics.jsonl; ls checkpoints/{RUN}"


def master_on(node: str, manager: int = 2) -> bool:
    """ds-master runs on `node`, as manager lab-h`manager` sees it (lab-h2: lab-h1 is the
    host the master check cuts); False while the managers cannot answer."""
    try:
        return (node, "Running") in tasks_of("ds-master", manager)
    except CommandFailed:
        return False  # lab-h1 was the Raft leader: the other two elect a new one first


def node_ready(node: str, manager: int = 2) -> bool:
    """`node` is Ready as manager lab-h`manager` sees it (False while it cannot answer)."""
    status = ["node", "ls", "--filter", f"name={node}", "--format", "{{.Status}}"]
    try:
        return "Ready" in docker(manager, *status)
    except CommandFailed:
        return False


def move_master_home() -> tuple[int, float]:
    """The spare drained until ds-master runs on lab-h1 again and has taken the run over
    there, then made active; the step it resumed from and the seconds it took."""
    offset, t_drain = log_size(), time.monotonic()
    docker(2, "node", "update", "--availability", "drain", SPARE)
    try:
        wait_for("ds-master running on lab-h1", partial(master_on, "lab-h1"), 240)
        back = wait_resumed(offset)
    finally:
        docker(2, "node", "update", "--availability", "active", SPARE)
    return back, time.monotonic() - t_drain


def test_lost_master_taken_over_by_the_spare(stack: Stack, report: dict[str, str]) -> None:
    """training.recovery.follow_master on eight hosts: the master's host (lab-h1, a
    manager) lost mid-run, Swarm moves ds-master to the spare, whose task takes the run
    over from the last complete checkpoint with no `pulumi up`; the spare drained, the
    master goes back and takes it over again; the stack file restored, `up` relaunches
    as the preview said and the next preview is a no-op."""
    master = stack.outputs()["rankMap"][0]
    assert master["node"] == "lab-h1", master

    def follow_master(on: bool) -> Any:
        return lambda c: c["deepspeed-swarm:training"]["recovery"].update(follow_master=on)

    old = edit_stack_file(stack, follow_master(True))
    try:
        _, took_on = up_resumed(stack)
        stack.pulumi("preview", "--expect-no-changes")
        # The update replaced ds-master's task, and Swarm may have put the new one on the
        # spare (it spreads by task count): the documented way back, which takes over.
        placed = "lab-h1" if master_on("lab-h1") else SPARE
        if placed == SPARE:
            move_master_home()
        ckpt = wait_for("a complete checkpoint", latest_checkpoint, timeout=600)
        wait_for("a step past it", lambda: max(logged_steps(RUN), default=0) > ckpt, 300)
        offset, seen = log_size(), len(restart_events(RUN))
        subprocess.run(["ip", "link", "set", "dssl1", "down"], check=True)
        t_loss = time.monotonic()
        before = max(logged_steps(RUN), default=0)
        try:
            wait_for(f"ds-master running on {SPARE}", partial(master_on, SPARE), 240)
            moved_after = time.monotonic() - t_loss
            resumed = wait_resumed(offset)
            to_step = time.monotonic() - t_loss
        finally:
            subprocess.run(["ip", "link", "set", "dssl1", "up"], check=True)
        lost_steps = before - resumed
        assert 0 <= lost_steps <= CHECKPOINT_EVERY, f"resumed from {resumed}, cut at {before}"
        taken = [e for e in restart_events(RUN)[seen:] if "takeover" in e]
        assert len(taken) == 1, f"restarts.jsonl: {restart_events(RUN)}"
        assert "takes the run over" in launcher_log_since(offset)
        wait_for("lab-h1 Ready again", partial(node_ready, "lab-h1"), 180)
        stack.pulumi("preview", "--expect-no-changes")
        stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
        assert stack.outputs()["run"]["state"] == "running", stack.outputs()["run"]
        # The spare drained to free it again: the master goes back and takes over there.
        back, took_back = move_master_home()
    finally:
        stack.config_file.write_text(old)
    # follow_master off again, as lab8 is configured: the master's command, env and
    # constraint change, so the preview restarts the job and `up` relaunches it.
    plan = stack.plan()
    assert plan.get(LAUNCH) == ("replace", RESTARTS), plan
    _, took_off = up_resumed(stack)
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"follow_master on: up to first step {took_on:.0f} s (the new master task on "
        f"{placed}{', moved home' if placed == SPARE else ''}); lab-h1 (master, a manager) cut "
        f"at step {before}; ds-master on {SPARE} after {moved_after:.0f} s; taken over, "
        f"resumed from step {resumed} ({lost_steps} steps lost, interval {CHECKPOINT_EVERY}); "
        f"first resumed step {to_step:.0f} s after the loss, {to_step - moved_after:.0f} s "
        f"after the move; preview and refresh no-ops; spare drained: back on lab-h1 from step "
        f"{back}, {took_back:.0f} s; follow_master off again: up to first step {took_off:.0f} s"
    )
    report["command"] = (
        "follow_master: true; pulumi up; ip link set dssl1 down; (no pulumi up); pulumi "
        "preview; pulumi refresh; docker node update --availability drain lab-h9"
    )


def test_lost_host_resumes_on_the_spare(stack: Stack, report: dict[str, str]) -> None:
    """A host lost mid-run: Swarm moves its task to the spare and the run follows it by
    itself (training.recovery.follow_moves): the master's supervisor stops the blocked
    launcher and restarts it on the moved task from the last complete checkpoint, with
    no `pulumi up`; preview and refresh are no-ops during the loss and after it."""
    rank_map = stack.outputs()["rankMap"]
    lost = next(e["node"] for e in rank_map if host_index(e["node"]) > 3)  # not a manager
    i = host_index(lost)
    ckpt = wait_for("a complete checkpoint", latest_checkpoint, timeout=600)
    wait_for("a step past it", lambda: max(logged_steps(RUN), default=0) > ckpt, 300)
    offset = log_size()
    subprocess.run(["ip", "link", "set", f"dssl{i}", "down"], check=True)
    t_loss = time.monotonic()
    before = max(logged_steps(RUN), default=0)
    try:
        wait_for(
            f"ds-worker running on {SPARE}",
            lambda: (SPARE, "Running") in tasks_of("ds-worker"),
            timeout=240,
        )
        moved_after = time.monotonic() - t_loss
        resumed = wait_resumed(offset)
        to_step = time.monotonic() - t_loss
        # The host is still lost: the state describes the run, which runs.
        p = stack.plan()
        assert p == {}, f"the run resumed by itself, yet the preview wants {p}"
    finally:
        subprocess.run(["ip", "link", "set", f"dssl{i}", "up"], check=True)
    lost_steps = before - resumed
    assert resumed >= ckpt, f"resumed from {resumed}, older than the checkpoint {ckpt}"
    assert lost_steps <= CHECKPOINT_EVERY, f"{lost_steps} steps lost (> {CHECKPOINT_EVERY})"
    events = restart_events(RUN)
    moves = [e["moved"] for e in events if e["event"] == "hostfile"]
    lost_address = next(e["address"] for e in rank_map if e["node"] == lost)
    assert moves and list(moves[-1]) == [lost_address], f"restarts.jsonl: {events}"
    hostfile = shared(".dss", RUN, "hostfile").read_text()
    assert f"{moves[-1][lost_address]} slots=" in hostfile and lost_address not in hostfile
    wait_for(
        f"{lost} Ready again",
        lambda: (
            "Ready"
            in docker(1, "node", "ls", "--filter", f"name={lost}", "--format", "{{.Status}}")
        ),
        180,
    )
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    report["figure"] = (
        f"{lost} cut at step {before}; task on {SPARE} after {moved_after:.0f} s; resumed "
        f"by itself from step {resumed} ({lost_steps} steps lost, interval "
        f"{CHECKPOINT_EVERY}); first resumed step {to_step:.0f} s after the loss, "
        f"{to_step - moved_after:.0f} s after the move; preview and refresh no-ops"
    )
    report["command"] = "ip link set dssl<i> down; (no pulumi up); pulumi preview; pulumi refresh"


def kill_a_rank(stack: Stack) -> tuple[dict[str, Any], int]:
    """SIGKILL the rank of a worker whose task is where the launch put it (not the one
    followed to the spare); returns its rank map entry and the last step logged."""
    running = {node for node, state in tasks_of("ds-worker") if state == "Running"}
    entry = next(e for e in reversed(stack.outputs()["rankMap"]) if e["node"] in running)
    ctr = task_container(entry["node"], entry["task_id"])
    before = max(logged_steps(RUN), default=0)
    docker(host_index(entry["node"]), "exec", ctr, "pkill", "-KILL", "-f", "--", "--local_rank=")
    return entry, before


def test_killed_rank_resumes_by_itself(stack: Stack, report: dict[str, str]) -> None:
    """One rank SIGKILLed on a worker host (an OOM, a crashed process): the master's
    supervisor restarts the run from the last complete checkpoint with no `pulumi up`,
    within the restart budget, records it, and preview and refresh stay no-ops."""
    wait_for("a complete checkpoint", latest_checkpoint, timeout=600)
    seen, offset = len(restart_events(RUN)), log_size()
    entry, before = kill_a_rank(stack)
    t_kill = time.monotonic()
    resumed = wait_resumed(offset)
    took = time.monotonic() - t_kill
    redone = before - resumed
    assert redone <= CHECKPOINT_EVERY, f"{redone} steps redone (> {CHECKPOINT_EVERY})"
    records = restart_events_after(RUN, seen) or []
    assert [r for r in records if r["event"] == "restart"], f"recorded: {records}"
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    report["figure"] = (
        f"node rank {entry['node_rank']} on {entry['node']} killed after step {before}; "
        f"resumed by itself from step {resumed} ({redone} steps redone, interval "
        f"{CHECKPOINT_EVERY}), first resumed step {took:.0f} s after the kill; restart "
        "recorded; preview and refresh no-ops"
    )
    report["command"] = "docker exec <worker task> pkill -KILL -f -- --local_rank=; (no pulumi up)"


def test_spent_budget_is_drift_then_up_relaunches(stack: Stack, report: dict[str, str]) -> None:
    """Ranks killed until the restart budget is spent: refresh reports the run failed,
    naming the run and the reason; `pulumi up` relaunches it from the newest complete
    checkpoint, and the next preview is a no-op."""
    # The stack's budget: lab8 leaves max_restarts at its default.
    budget = Recovery().max_restarts
    kills, spent = 0, False
    while not spent:
        assert kills <= budget, f"{kills} kills, and no spent budget: {restart_events(RUN)}"
        seen, offset = len(restart_events(RUN)), log_size()
        kill_a_rank(stack)
        kills += 1
        new = wait_for("the kill recorded", partial(restart_events_after, RUN, seen), 300, 1)
        spent = new[-1]["event"] == "budget_spent"
        if not spent:
            wait_resumed(offset)
    t_spent = time.monotonic()

    def reported() -> str | None:
        """Refresh's drift report, once it has one: the run is failed when no training
        process is left (rank 0 may sit in a collective until its timeout first)."""
        proc = stack.pulumi("refresh", "--preview-only", "--expect-no-changes", "--diff",
                            check=False)  # fmt: skip
        return proc.stdout + proc.stderr if proc.returncode != 0 else None

    said = wait_for("refresh reporting the spent budget", reported, 300, 5)
    took_report = time.monotonic() - t_spent
    assert '"running" => "failed"' in said and "restart budget spent" in said, said[-3000:]
    resumed, took = up_resumed(stack)
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"budget of {budget} spent at kill {kills} of this check; refresh reported the run "
        f"failed (restart budget spent) {took_report:.0f} s after it was spent; `up` relaunched "
        f"it from step {resumed}, first step {took:.0f} s after `up` started; preview a no-op. "
        "The alert "
        "(`DssRestartBudgetSpent`) needs monitoring, which lab8 does not deploy: "
        "tests/acceptance/test_lab8_jobs.py checks it on the lab8 cluster"
    )
    report["command"] = "pkill ranks until budget_spent; pulumi refresh --preview-only; pulumi up"


def test_ds_config_change_replaces_only_the_launch(stack: Stack, report: dict[str, str]) -> None:
    """A ds_config change replaces only the launch: services untouched, training resumes."""
    stack.pulumi(
        "config", "set", "--path", "training.ds_config.gradient_clipping", "0.5", "--type", "float"
    )
    p = stack.plan()
    assert p.get(LAUNCH) == ("replace", RESTARTS), p
    # The roster reads the tasks again (the spec digest holds ds_config), so the
    # preview cannot know the gate's tasks stay the same: it shows the gate too.
    others = [n for n in p if n not in (LAUNCH, ROSTER, RUN_STATE, GATE)]
    assert not others, f"a ds_config change also changes {others}"
    assert [n for n, (_, impact) in p.items() if impact == RESTARTS] == [LAUNCH], p
    versions = service_versions()
    offset = log_size()
    stack.pulumi("up", "--yes", "--skip-preview")
    assert service_versions() == versions, "a ds_config change updated a service"
    resumed = wait_resumed(offset)
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"preview: only the launch restarts the job; services unchanged; resumed from {resumed}"
    )
    report["command"] = (
        "pulumi config set --path training.ds_config.gradient_clipping 0.5 --type float; "
        "pulumi preview; pulumi up"
    )


def test_new_image_rolls_the_services(
    stack: Stack, report: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A new image (one line of train.py changed) rolls the services; training resumes."""
    ctx = tmp_path_factory.mktemp("context") / "images"
    shutil.copytree(ROOT / "images", ctx)
    with (ctx / "train.py").open("a") as f:
        f.write("# acceptance: a one-line change makes a new image\n")
    stack.pulumi("config", "set", "--path", "image.context", str(ctx))
    p = stack.plan()
    assert {"test-lab8-train-master", "test-lab8-train-worker", LAUNCH} <= set(restarting(p)), p
    before = service_versions()
    offset = log_size()
    t0 = time.monotonic()
    stack.pulumi("up", "--yes", "--skip-preview")
    after = service_versions()
    rolled = sorted(n for n in after if after[n] != before.get(n))
    assert {"ds-master", "ds-worker"} <= set(rolled), f"services rolled: {rolled}"
    resumed = wait_resumed(offset)
    took = time.monotonic() - t0
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"preview: {len(restarting(p))} changes restart the job; rolled {', '.join(rolled)}; "
        f"resumed from {resumed}, {took:.0f} s from `up` to the first new step"
    )
    report["command"] = "edit train.py; pulumi preview; pulumi up"


def test_host_drained_then_removed(stack: Stack, report: dict[str, str]) -> None:
    """A host drained (its task moves, one restart) then removed (leaves, no restart)."""
    index = [h["name"] for h in lab8_config()["deepspeed-swarm:hosts"]].index(MOVED_HOST)

    def drain(c: dict[str, Any]) -> None:
        c["deepspeed-swarm:hosts"][index]["availability"] = "drain"

    edit_stack_file(stack, drain)
    p = stack.plan()
    assert p[f"test-lab8-swarm-node-{MOVED_HOST}"][0] == "update", p
    assert p.get(LAUNCH) == ("replace", RESTARTS), p
    offset = log_size()
    stack.pulumi("up", "--yes", "--skip-preview")
    nodes = [e["node"] for e in stack.outputs()["rankMap"]]
    assert MOVED_HOST not in nodes and len(nodes) == 7, f"rank map after the drain: {nodes}"
    resumed = wait_resumed(offset)
    resharded = "world size changed 8 -> 7: weights resumed, optimizer state re-sharded"
    assert resharded in launcher_log_since(offset), "no universal resize on resume"
    assert world_size() == 7
    before, after = loss_across(resumed)

    edit_stack_file(stack, lambda c: c["deepspeed-swarm:hosts"].pop(index))
    p = stack.plan()
    assert p[f"test-lab8-swarm-node-{MOVED_HOST}"][0] == "delete", p
    assert not restarting(p), f"removing a drained host restarts training: {p}"
    offset = log_size()
    stack.pulumi("up", "--yes", "--skip-preview")
    left = docker(host_index(MOVED_HOST), "info", "--format", "{{.Swarm.LocalNodeState}}")
    assert left.strip() == "inactive", f"{MOVED_HOST} is still in the swarm ({left.strip()})"
    assert MOVED_HOST not in docker(1, "node", "ls", "--format", "{{.Hostname}}").split()
    assert "resumed from" not in launcher_log_since(offset), "the removal relaunched training"
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"drain: preview restarts only the launch, {MOVED_HOST}'s task moved, resumed from "
        f"{resumed} with world size 7, optimizer state re-sharded (universal checkpoint): "
        f"mean loss {before:.3f} over the 3 steps before, {after:.3f} over steps "
        f"{resumed + 2}-{resumed + 4}; removal: node left, nothing restarted"
    )
    report["command"] = "availability: drain; pulumi up; remove the host; pulumi up"


def test_host_joins_and_gets_a_worker(stack: Stack, report: dict[str, str]) -> None:
    """A host added to the stack joins, is labelled and gets a worker; training resumes."""
    hosts = lab8_config()["deepspeed-swarm:hosts"]
    index = [h["name"] for h in hosts].index(MOVED_HOST)
    edit_stack_file(stack, lambda c: c["deepspeed-swarm:hosts"].insert(index, hosts[index]))
    p = stack.plan()
    assert p[f"test-lab8-swarm-node-{MOVED_HOST}"][0] == "create", p
    assert p.get(LAUNCH) == ("replace", RESTARTS), p
    offset = log_size()
    stack.pulumi("up", "--yes", "--skip-preview")
    labels = json.loads(
        docker(1, "node", "inspect", MOVED_HOST, "--format", "{{json .Spec.Labels}}")
    )
    assert labels.get("dss.role") == "worker" and labels.get("dss.gpus") == "8", labels
    placed = [node for node, state in tasks_of("ds-worker") if state == "Running"]
    assert len(placed) == 7 and len(set(placed)) == 7, f"ds-worker tasks on {placed}"
    resumed = wait_resumed(offset)
    assert world_size() == 8
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"{MOVED_HOST} joined with labels {sorted(labels)}; ds-worker on "
        f"{'it' if MOVED_HOST in placed else 'the free host (' + str(placed) + ')'}; resumed "
        f"from {resumed} with world size 8"
    )
    report["command"] = "add the host; pulumi preview; pulumi up"


def test_on_resize_reset_beside_the_universal_checkpoint(
    stack: Stack, report: dict[str, str]
) -> None:
    """The same world-size change as the drain above (8 -> 7) with the optimizer state
    restarted (`--on-resize reset`: weights only, Adam's moments new), for the loss
    beside the universal checkpoint's; then the stack file restored (8 hosts, universal
    again) and `up` relaunches with world size 8; the next preview is a no-op."""
    index = [h["name"] for h in lab8_config()["deepspeed-swarm:hosts"]].index(MOVED_HOST)

    def drain_and_reset(c: dict[str, Any]) -> None:
        c["deepspeed-swarm:hosts"][index]["availability"] = "drain"
        t = c["deepspeed-swarm:training"]
        t["args"] = [*t.get("args", []), "--on-resize", "reset"]

    wait_for("a complete checkpoint", latest_checkpoint, timeout=600)
    old = edit_stack_file(stack, drain_and_reset)
    try:
        offset = log_size()
        resumed, _ = up_resumed(stack)
        reset = "world size changed 8 -> 7: weights resumed, optimizer state reset"
        assert reset in launcher_log_since(offset), "no reset resize on resume"
        assert world_size() == 7
        before, after = loss_across(resumed)
    finally:
        stack.config_file.write_text(old)
    _, took = up_resumed(stack)
    assert world_size() == 8
    stack.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"{MOVED_HOST} drained with --on-resize reset: resumed from {resumed} with world size "
        f"7, Adam restarted: mean loss {before:.3f} over the 3 steps before, {after:.3f} "
        f"over steps {resumed + 2}-{resumed + 4} (the drain row above: the universal "
        f"checkpoint); restored: world size 8 again, first step {took:.0f} s after `up`"
    )
    report["command"] = "availability: drain and args --on-resize reset; pulumi up; restore"


def _relabel(node: str, drop: str) -> None:
    labels = json.loads(docker(1, "node", "inspect", node, "--format", "{{json .Spec.Labels}}"))
    edit_node(node, Labels={k: v for k, v in labels.items() if k != drop})


def drifted_properties(diff_text: str) -> dict[str, set[str]]:
    """From `pulumi refresh --diff` text: resource name -> the top-level properties
    (and their changed keys) on lines marked ~, + or -."""
    named: dict[str, set[str]] = {}
    for chunk in diff_text.split("[urn=")[1:]:
        urn, _, body = chunk.partition("]")
        props = named.setdefault(urn.rsplit("::", 1)[-1], set())
        for line in body.splitlines():
            m = re.match(r"\s*[~+-]\s+([\w.-]+)\s*:", line)
            if m:
                props.add(m.group(1))
    return named


def test_drift_on_eight_hosts_reported_then_repaired(stack: Stack, report: dict[str, str]) -> None:
    """Drift on 8 hosts is reported by `refresh --preview-only --expect-no-changes`,
    naming resource and property; `up --refresh` repairs it; then a clean no-op."""
    # One drift per host (lab-h1..h8), each as an operator or a failing host makes it.
    _relabel("lab-h2", "dss.gpus")
    edit_node("lab-h3", Availability="drain")
    docker(1, "service", "update", "--detach", "--label-add", "hand=edit", "ds-worker")
    subprocess.run(
        ["ip", "netns", "exec", "dsslab-h4", "ip", "link", "set", "eth0", "mtu", "9000"], check=True
    )
    gpus = LAB_ROOT / "h5" / "gpus"
    gpu_list = gpus.read_text()
    gpus.write_text("".join(gpu_list.splitlines(keepends=True)[1:]))
    driver = LAB_ROOT / "h6" / "driver-version"
    driver_was = driver.read_text()
    driver.write_text("470.57.02\n")
    expected = {
        "test-lab8-swarm-node-lab-h2": "labels",
        "test-lab8-swarm-node-lab-h3": "availability",
        "test-lab8-train-worker": "labels",
        "test-lab8-facts-lab-h4": "nic_mtu",
        "test-lab8-facts-lab-h5": "gpu_count",
        "test-lab8-facts-lab-h6": "driver_meets_minimum",
    }
    try:
        proc = stack.pulumi(
            "refresh", "--preview-only", "--expect-no-changes", "--diff", check=False
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"drift on 8 hosts not detected:\n{out[-3000:]}"
        named = drifted_properties(out)
        for name, prop in expected.items():
            assert prop in named.get(name, set()), (
                f"refresh does not name {name} and {prop} (it names {named}):\n{out[-4000:]}"
            )
        # Hosts below what the stack needs are refused, naming the host: the repair of a
        # host is the operator's; Pulumi must not paper over it.
        proc = stack.pulumi("up", "--refresh", "--yes", "--skip-preview", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, "up went ahead on a host that lost a GPU"
        assert "lab-h5" in out and "gpu_count" in out, out[-3000:]
    finally:
        subprocess.run(
            ["ip", "netns", "exec", "dsslab-h4", "ip", "link", "set", "eth0", "mtu", "9100"],
            check=True,
        )
        gpus.write_text(gpu_list)
        driver.write_text(driver_was)
    stack.pulumi("up", "--refresh", "--yes", "--skip-preview")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    stack.pulumi("preview", "--expect-no-changes")
    labels = json.loads(docker(1, "node", "inspect", "lab-h2", "--format", "{{json .Spec.Labels}}"))
    assert labels.get("dss.gpus") == "8", f"lab-h2's label not repaired: {labels}"
    report["figure"] = (
        "6 drifts on 6 hosts named (node label, drain, service edit, NIC MTU, lost GPU, "
        "driver); up refused the broken hosts, repaired the rest; then no-op"
    )
    report["command"] = "pulumi refresh --preview-only --expect-no-changes; pulumi up --refresh"


def test_removed_objects_reported_then_repaired(stack: Stack, report: dict[str, str]) -> None:
    """A secret and the overlay removed by hand are reported, then repaired by `up --refresh`."""
    leader = client(1)
    network = stack.outputs()["networkName"]
    docker(1, "service", "rm", "ds-master", "ds-worker", "ds-net-warmup")
    secret = next(
        s
        for s in leader.secrets.list()
        if s.attrs["Spec"]["Labels"].get("dss.file") == "wandb_api_key"
    )
    secret.remove()
    remove_network(leader, network)
    proc = stack.pulumi("refresh", "--preview-only", "--expect-no-changes", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"hand removals not detected:\n{out[-3000:]}"
    for name in ("test-lab8-secrets-wandb-api-key", "test-lab8-net-overlay"):
        assert re.search(rf"^\s*-\s+\S+ {name} delete\s*$", out, re.M), (
            f"refresh does not report {name} as gone:\n{out[-3000:]}"
        )
    offset = log_size()
    stack.pulumi("up", "--refresh", "--yes", "--skip-preview")
    stack.pulumi("preview", "--expect-no-changes")
    resumed = wait_for("the resume line", lambda: resumed_step(offset), timeout=600)
    report["figure"] = f"secret and overlay reported as deleted; recreated; resumed from {resumed}"
    report["command"] = (
        "docker secret rm / network rm; pulumi refresh --preview-only; pulumi up --refresh"
    )


def test_broken_config_touches_nothing(stack: Stack, report: dict[str, str]) -> None:
    """A broken stack config fails `pulumi preview` naming key and value; state unchanged."""
    state = stack.workdir / "state"

    def digest() -> str:
        h = hashlib.sha256()
        for p in sorted(x for x in state.rglob("*") if x.is_file() and "locks" not in x.parts):
            h.update(str(p).encode() + p.read_bytes())
        return h.hexdigest()

    before = digest()
    # 9100 + 50 (VXLAN) does not fit the 9100 underlay.
    old = edit_stack_file(stack, lambda c: c["deepspeed-swarm:network"].update(mtu=9100))
    try:
        proc = stack.pulumi("preview", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, "a preview with network.mtu 9100 on a 9100 underlay passed"
        assert "network.mtu: 9100 + 50" in out and "allowed" in out, out[-3000:]
        assert "Traceback" not in out, f"a config error printed a traceback:\n{out[-3000:]}"
        assert "Resources:" not in out or "+ " not in out.split("Resources:")[-1], out[-2000:]
    finally:
        stack.config_file.write_text(old)
    assert digest() == before, "the state changed on a failed preview"
    report["figure"] = (
        "preview exits non-zero naming network.mtu, 9100 and what is allowed, no traceback; "
        "state byte-identical"
    )
    report["command"] = "pulumi preview (network.mtu: 9100 on a 9100 underlay)"


def task_logs(service: str) -> str:
    """Every task log of a service Swarm still has. `docker service logs` exits 1 when
    a node that ran one of its tasks has left (a host removed); what it got counts."""
    proc = docker_run(1, "service", "logs", "--raw", service, check=False)
    out = proc.stdout + proc.stderr  # the tasks' stdout and stderr
    assert "[entrypoint]" in out, f"{service}: no task logs read ({out[-500:]!r})"
    return out


def test_secrets_appear_nowhere(stack: Stack, report: dict[str, str]) -> None:
    """The secret values are in no state, image layer, service spec, task log or engine log."""
    entry = stack.outputs()["rankMap"][0]
    ctr = task_container(entry["node"], entry["task_id"])
    key = docker(host_index(entry["node"]), "exec", ctr, "cat", "/run/secrets/ssh_private_key")
    key_body = max(key.splitlines(), key=len)
    assert len(key_body) > 40, "could not read the generated key from its task"
    needles = {
        "wandb secret": SECRET,
        "SSH private key": key_body,
        "JupyterLab token": stack.outputs()["jupyterToken"],
    }
    places: dict[str, str] = {
        "state": stack.state_text(),
        "engine output": "\n".join(stack.transcript),
        "service specs": docker(1, "service", "inspect", *docker(1, "service", "ls", "-q").split()),
        "task logs": task_logs("ds-master") + task_logs("ds-worker"),
        "run logs": "\n".join(p.read_text(errors="replace") for p in shared("logs", RUN).iterdir()),
    }
    image = stack.outputs()["imageRef"]
    tagged = f"{image.split('@')[0]}:{stack.outputs()['imageTag']}"
    saved = subprocess.run(
        ["docker", "save", tagged], capture_output=True, check=True, timeout=600
    ).stdout
    for what, value in needles.items():
        for place, text in places.items():
            assert value not in text, f"the {what} appears in the {place}"
        assert value.encode() not in saved, f"the {what} appears in the image's layers"
    report["figure"] = (
        "0 hits for 3 values in state, engine output, service specs, task logs, run logs, "
        f"image layers ({len(saved) // 2**20} MiB saved)"
    )
    report["command"] = "grep <value> in each; docker save <image>"


def test_gate_refuses_a_slow_host_on_eight_hosts(stack: Stack, report: dict[str, str]) -> None:
    """With a worker host's link at 40 Mbit/s and the training tasks re-created, `up
    --refresh` measures the gate again and refuses naming that host and its remedy;
    nothing launched."""
    # A host with a training task now (the earlier checks moved tasks), not a manager.
    slow_host = max(host_index(e["node"]) for e in stack.outputs()["rankMap"])
    qdisc = shape_link(slow_host, "40mbit")
    try:
        # New tasks (as after hosts rebooted): the roster changes, so the gate measures.
        # Not detached: every old task (and the run in it) is gone before the `up`.
        for service in ("ds-master", "ds-worker"):
            docker(1, "service", "update", "--force", "--quiet", service, timeout=900)
        t0 = time.monotonic()
        res = stack.pulumi("up", "--refresh", "--yes", "--skip-preview", check=False)
        took = time.monotonic() - t0
    finally:
        unshape_link(slow_host)
    out = res.stdout + res.stderr
    slow = f"lab-h{slow_host}"
    print("\n".join(ln for ln in out.splitlines() if "gate" in ln or "pair" in ln or "slow" in ln))
    assert res.returncode != 0, f"the gate did not refuse: {stack.outputs().get('gate')}"
    assert f"slow host(s): {slow} (every pair of theirs was slow)" in out, out[-3000:]
    hosts = yaml.safe_load(stack.config_file.read_text())["config"]["deepspeed-swarm:hosts"]
    index = [h["name"] for h in hosts].index(slow)
    assert f"remedy for {slow}: set hosts[{index}].availability: drain" in out
    m = re.search(r"the gate took ([\d.]+) s", out)
    assert m, out[-3000:]
    pairs = re.findall(r"pair (lab-h\d) <-> (lab-h\d): ([\d.]+) MB/s", out)
    theirs = [f"{a}-{b} {v}" for a, b, v in pairs if slow in (a, b)]
    running = {ctr: procs for ctr, procs in training_processes(HOSTS).items() if procs}
    assert not running, f"training runs past a failed gate: {running}"
    report["figure"] = (
        f"{qdisc}: refused after {m.group(1)} s of gate ({len(pairs)} pairs; {slow}'s "
        f"{', '.join(theirs)} MB/s), `up` exit {res.returncode} after {took:.0f} s; nothing "
        "launched"
    )
    report["command"] = (
        "tc qdisc ... on lab-h5; docker service update --force ds-worker; pulumi up --refresh"
    )


def no_containers(i: int) -> bool:
    """Lab host i runs no container (a removed service's tasks leave asynchronously)."""
    return not docker(i, "ps", "-aq").strip()


def test_destroy_leaves_only_the_checkpoint(stack: Stack, report: dict[str, str]) -> None:
    """`pulumi destroy` leaves a complete checkpoint and nothing else the stack made."""
    stack.pulumi("destroy", "--yes", "--skip-preview")
    found, skipped = ck.select_latest(CHECKPOINTS)
    assert found is not None, f"no complete checkpoint after destroy: {skipped}"
    for i in range(1, HOSTS + 1):
        info = json.loads(docker(i, "info", "--format", "{{json .Swarm.LocalNodeState}}"))
        assert info == "inactive", f"lab-h{i} is still in a swarm ({info})"
        wait_for(f"lab-h{i} without containers", partial(no_containers, i), 90)
        nets = [
            n
            for n in docker(i, "network", "ls", "--format", "{{.Name}}").split()
            if n.startswith("ds-net")
        ]
        assert not nets, f"lab-h{i}: networks left: {nets}"
    report["figure"] = (
        f"checkpoint {found[1]} verified (sha256); 9 hosts out of the swarm, no containers, "
        "no networks"
    )
    report["command"] = "pulumi destroy"
