"""Hosts with different GPUs in one cluster (issue 47, item 3): the 9-host lab with
two fake models and two counts (lab-h1..h4 8 x `fake-a`, lab-h5..h8 4 x `fake-b`, the
spare lab-h9 8 x `fake-a`), the lab8 config with each host's own `gpus`, as a cluster
stack. A job asking for `fake-b` lands only on `fake-b` hosts, though `fake-a` hosts
have more GPUs free; what no host of a model can ever hold is refused before anything
is written, naming the job, the shortfall and what the cluster has. A queued job starts
by itself though a host that ran a watch of the queue is lost while it held the lock,
and through another manager when the cluster's first is lost.
Each test records a row of the table `scripts/acceptance` prints
(tests/acceptance/report.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.configs import HOSTS as HOSTS_KEY
from harness.configs import lab8_config
from harness.jobs import remove_job
from harness.lab import lab_cli, lab_status, tasks_of
from harness.stack import Pulumi, Stack
from harness.waits import reap, stamp_lines, wait_for
from infra.config import stack_file_values
from infra.layout import training_service_names
from jobs import command, leader, teardown
from jobs.lock import HOLDER_LABEL, LOCK_NAME, try_lock
from lab.config import netns_name, veth_name
from tests.acceptance.conftest import (
    HOSTS,
    JOB_SCRIPT,
    TUTORIAL_COMMAND,
    clear_job_files,
    job_cli,
    job_cluster,
    tutorial_copy,
    tutorial_steps,
)
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

CLUSTER = "test-lab8-sharing-cluster"
JOB = "test-lab8-model-b"
MODELS = ("fake-a",) * 4 + ("fake-b",) * 4 + ("fake-a",)
COUNTS = (8,) * 4 + (4,) * 4 + (8,)
"""Per host lab-h1..h9, as `lab up --gpu-models` and `--gpus` take them."""
B_HOSTS = [f"lab-h{i}" for i in range(1, HOSTS + 1) if MODELS[i - 1] == "fake-b"]


@pytest.fixture(scope="module")
def mixed_lab() -> Iterator[dict[str, Any]]:
    """The 9-host lab with two fake GPU models and two counts (no swarm yet)."""
    lab_cli("down", check=False)
    try:
        lab_cli("up", "--hosts", str(HOSTS), "--gpus", ",".join(map(str, COUNTS)),
                "--gpu-models", ",".join(MODELS))  # fmt: skip
        yield lab_status()
    finally:
        lab_cli("down", check=False)


@pytest.fixture(scope="module")
def cluster(mixed_lab: dict[str, Any], make_stack: MakeStack) -> Iterator[Stack]:
    """The lab8 config with each host's own count and model, as a cluster stack, up; the
    job removed afterwards in any case."""
    config = lab8_config()
    hosts = config[HOSTS_KEY]
    assert len(hosts) == HOSTS, hosts
    config[HOSTS_KEY] = [
        {**h, "gpus": {"count": n, "model": m}}
        for h, n, m in zip(hosts, COUNTS, MODELS, strict=True)
    ]
    with job_cluster(make_stack, CLUSTER, config, JOB) as s:
        yield s


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DeepSpeed tutorial example, copied as it is."""
    return tutorial_copy(tmp_path_factory)


def _gpus_rows(cluster: Stack) -> dict[str, list[str]]:
    """`scripts/job gpus CLUSTER`, each row's words by host."""
    rows = job_cli(cluster, "gpus", CLUSTER).splitlines()[1:]
    return {r.split()[0]: r.split() for r in rows}


def test_a_job_asking_for_a_model_lands_only_on_its_hosts(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """A 2 x 4 job asking for `fake-b` runs on two of lab-h5..h8 only, though lab-h1..h4
    have twice the GPUs free: its tasks, its rank map (each rank's host and model) and
    `job gpus` (each host's model and holders) say so, and it trains."""
    before = _gpus_rows(cluster)
    assert {h: before[h][-5] for h in before} == {
        f"lab-h{i}": m for i, m in enumerate(MODELS, 1)
    }, before
    t0 = time.monotonic()
    job_cli(cluster, "submit", str(code), "--name", JOB, "--cluster", CLUSTER,
            "--nodes", "2", "--gpus-per-node", "4", "--gpu-model", "fake-b",
            "--", *TUTORIAL_COMMAND)  # fmt: skip
    try:
        wait_for(f"{JOB}'s first step", lambda: tutorial_steps(JOB) or None, 900, 2)
        first = time.monotonic() - t0
        job = Pulumi(JOB, env=cluster.env)
        outputs = json.loads(job.run("stack", "output", "--json").stdout)
        rank_map = outputs["rankMap"]
        nodes = sorted({e["node"] for e in rank_map})
        assert len(nodes) == 2 and set(nodes) <= set(B_HOSTS), rank_map
        assert {e["gpu_model"] for e in rank_map} == {"fake-b"}, rank_map
        placed = {
            node for name in training_service_names(JOB) for node, state in tasks_of(name)
            if state == "Running"
        }  # fmt: skip
        assert placed == set(nodes), (placed, nodes)
        after = _gpus_rows(cluster)
        for host in nodes:
            assert after[host][1:5] == ["fake-b", "0", "of", "4"], after[host]
            assert f"{JOB}:" in after[host], after[host]
        held = [h for h, row in after.items() if f"{JOB}:" in row]
        assert sorted(held) == nodes, after
        job.run("preview", "--expect-no-changes")
    finally:
        teardown.remove(JOB, env=cluster.env, out=cluster.record)
    report["figure"] = (
        f"2 x 4 fake-b on {', '.join(nodes)} (fake-b: {B_HOSTS[0]}..{B_HOSTS[-1]}; "
        f"fake-a hosts left free), first step {first:.0f} s after submit; preview no-op"
    )
    report["command"] = (
        f"scripts/job submit examples/deepspeed-tutorial --name {JOB} --cluster {CLUSTER} "
        "--nodes 2 --gpus-per-node 4 --gpu-model fake-b -- deepspeed train.py ..."
    )


def test_what_no_host_of_the_model_can_hold_is_refused(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """A job asking for 8 GPUs per node of `fake-b` (its hosts have 4) is refused by
    submit with exit 2, naming the job, the shortfall and the cluster's models, before
    any stack file is written; nothing runs for it."""
    name = f"{JOB}-big"
    proc = subprocess.run(
        [JOB_SCRIPT, "submit", str(code), "--name", name, "--cluster", CLUSTER,
         "--nodes", "1", "--gpus-per-node", "8", "--gpu-model", "fake-b", "--", *TUTORIAL_COMMAND],
        env=cluster.env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    cluster.record(proc.stdout, proc.stderr)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    said = proc.stderr
    assert name in said and "'fake-b'" in said and "Nothing was changed" in said, said
    assert not command.stack_file(name).exists()
    assert not [n for n, row in _gpus_rows(cluster).items() if f"{name}:" in row]
    report["figure"] = f"exit 2: {said.strip().splitlines()[-1][:160]}"
    report["command"] = (
        f"scripts/job submit DIR --name {name} --cluster {CLUSTER} --nodes 1 "
        "--gpus-per-node 8 --gpu-model fake-b -- ..."
    )


def _free_rows(cluster: Stack, hosts: list[str], model: str, gpus: int) -> Any:
    """`job gpus`' rows when each of `hosts` has all its `gpus` GPUs of `model` free,
    else None."""
    rows = _gpus_rows(cluster)
    free = [model, str(gpus), "of", str(gpus)]
    return rows if all(rows.get(h, [])[1:5] == free for h in hosts) else None


def _rejoin(i: int) -> None:
    """lab-h<i>'s link up again, then every manager answering: a manager back from a
    cut may start an election (its term moved on while it was alone), and the swarm has
    no leader until one is made (the cleanup removes jobs through their managers)."""
    subprocess.run(["ip", "link", "set", veth_name(i), "up"], check=True)
    settings = command.cluster_settings(CLUSTER)
    wait_for(
        "every manager answering (the swarm has a leader)",
        lambda: all(leader.answers(settings, m) is None for m in settings.managers),
        300,
        1,
    )


WATCH_S = 30.0
"""How long `_watch_from_lab_h2` lets its watch run."""


def _watch_from_lab_h2(cluster: Stack) -> list[str]:
    """The lines of a watch (a pass every second) run in lab-h2's namespace for WATCH_S
    seconds, then ended by SIGTERM (its exit status 0)."""
    stamps: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        ["ip", "netns", "exec", netns_name(2), JOB_SCRIPT, "queue", CLUSTER,
         "--watch", "--every", "1"],
        env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    reader = stamp_lines(proc, stamps)
    try:
        time.sleep(WATCH_S)
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(300)
    finally:
        reap(proc)
    reader.join(30)
    lines = [ln for _, ln in stamps]
    cluster.record(*(f"[watch on lab-h2] {ln}" for ln in lines))
    assert status == 0, lines[-20:]
    return lines


def _holder(code: Path, x: str) -> list[str]:
    """`scripts/job` arguments of X: the tutorial for ever, 2 x 4 on the first two
    fake-b hosts."""
    hosts = ",".join(B_HOSTS[:2])
    long = [*TUTORIAL_COMMAND[:5], "--steps", "100000000", "--save_interval", "1000"]
    return ["submit", str(code), "--name", x, "--cluster", CLUSTER, "--hosts", hosts,
            "--gpus-per-node", "4", "--", *long]  # fmt: skip


def _queued_behind(cluster: Stack, code: Path, x: str, y: str) -> None:
    """X (`_holder`) holds its hosts' GPUs; Y (the tutorial, the same hosts) is
    submitted and reserved behind it."""
    hosts = ",".join(B_HOSTS[:2])
    job_cli(cluster, *_holder(code, x))
    said = job_cli(cluster, "submit", str(code), "--name", y, "--cluster", CLUSTER,
                   "--hosts", hosts, "--gpus-per-node", "4", "--", *TUTORIAL_COMMAND)  # fmt: skip
    assert f"job {y} reserved: #1 on {CLUSTER}; " in said, said


def test_a_queued_job_survives_the_loss_of_a_host_running_its_watch(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """X (the tutorial, 2 x 4 fake-b on the first two fake-b hosts) holds their GPUs; Y
    (2 x 4 on the same hosts) is queued behind it. Two watches of the queue run, as on
    two managers: one in lab-h2's network namespace, one in lab-h3's. lab-h3 is lost
    while it holds the cluster's submit lock (the lock staged in its name as its last
    renewal left it, its watch killed, its link cut), then X is stopped. With no one
    else acting, the watch on lab-h2 waits out the dead holder's lease, takes the lock
    and starts Y, which trains."""
    x, y = f"{JOB}-wx", f"{JOB}-wy"
    dead = f"the queue of {CLUSTER} on lab-h3"
    stamps: dict[int, list[tuple[float, str]]] = {2: [], 3: []}
    watches: dict[int, subprocess.Popen[str]] = {}
    api = command.leader_api(command.cluster_settings(CLUSTER))
    cut = False
    try:
        _queued_behind(cluster, code, x, y)
        for i in stamps:
            watches[i] = subprocess.Popen(
                ["ip", "netns", "exec", netns_name(i), JOB_SCRIPT, "queue", CLUSTER,
                 "--watch", "--every", "5"],
                env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            stamp_lines(watches[i], stamps[i])
        wait_for("both watches' first pass", lambda: all(len(v) >= 2 for v in stamps.values()), 300)

        # Made as a holder makes it, once no pass holds it: expiring a lease from now.
        wait_for(
            "the lock staged in lab-h3's name",
            lambda: isinstance(try_lock(api, dead, time.time()), str),
            300,
            0.2,
        )
        watches[3].kill()
        subprocess.run(["ip", "link", "set", veth_name(3), "down"], check=True)
        cut, t_lost = True, time.time()
        job_cli(cluster, "stop", x)
        free = time.time()
        admitted = wait_for(
            f"{y} started by the watch on lab-h2",
            lambda: next((t for t, ln in stamps[2] if ln.startswith(f"job {y}: admitted on ")),
                         None),
            900,
        )  # fmt: skip
        wait_for(f"{y}'s first step", lambda: tutorial_steps(y) or None, 900, 1)
        to_step = time.time() - free
        lines = [ln for _, ln in stamps[2]]
        taken = f"the cluster's submit lock of {dead} has expired: taking it"
        took = next((t for t, ln in stamps[2] if ln == taken), None)
        assert took is not None, lines[-20:]
        assert t_lost <= took <= admitted, (t_lost, took, admitted)
        watches[2].send_signal(signal.SIGTERM)
        assert watches[2].wait(300) == 0, lines[-20:]
    finally:
        if cut:
            _rejoin(3)
        for w in watches.values():
            reap(w)
        for i, v in stamps.items():
            cluster.record(*(f"[watch on lab-h{i}] {ln}" for _, ln in v))
        for name in (y, x):
            remove_job(cluster, name)
        for held in api.configs(filters={"name": LOCK_NAME}):
            if (held.get("Spec") or {}).get("Labels", {}).get(HOLDER_LABEL) == dead:
                api.remove_config(held["ID"])
    report["figure"] = (
        f"lab-h3 lost holding the lock; {x} stopped; the watch on lab-h2 took the lock "
        f"{took - t_lost:.0f} s after the loss (its lease) and started {y}: first step "
        f"{to_step:.0f} s after {x}'s GPUs were free"
    )
    report["command"] = (
        f"scripts/job queue {CLUSTER} --watch --every 5, in lab-h2's and lab-h3's "
        f"namespaces; lab-h3 cut (ip link set {veth_name(3)} down); scripts/job stop {x}"
    )


def test_a_job_moves_off_a_lost_manager_and_a_queued_one_starts_through_another(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """A running job moves off its lost manager, and a queued job starts through another
    manager, when the cluster's first is lost. X (the tutorial, 2 x 4 fake-b on lab-h5,
    lab-h6) holds its hosts' GPUs; Y (the same hosts) is queued behind it. lab-h1, the
    cluster's first manager (through which every job so far was made), is lost while X
    runs. X submitted again as it is moves its state to lab-h2 (jobs/repoint.py): its
    file names lab-h2, its services are the same (id and version), and its preview
    through lab-h2 is a no-op (before that, `job list --refresh` lists X and W
    `unknown`, naming lab-h1, and exits 1). W (the tutorial, 2 x 1 on lab-h7, lab-h8),
    started as from another checkout (its file is not here), is stopped: its cluster is
    the one its state references, and it moves to lab-h2 too before its services go. X is then
    stopped through lab-h2. One pass from lab-h2's
    namespace finds lab-h1 silent, goes through lab-h2 (Raft kept the queue's entries
    and the lock on every manager), and starts Y through it: Y's file names lab-h2, Y
    trains, and its preview through lab-h2 is a no-op while lab-h1 is still lost. `job
    gpus` says on stderr that it read through lab-h2. A watch from lab-h2's namespace
    then says once that it goes through lab-h2, and its passes go on through it (which
    manager each pass asks first: the unit tests of jobs/queuewatch.py)."""
    x, y, w = f"{JOB}-mx", f"{JOB}-my", f"{JOB}-mw"
    hosts = ", ".join(B_HOSTS[:2])
    for name in (x, y, w):
        clear_job_files(name)
    w_text: str | None = None
    settings = command.cluster_settings(CLUSTER)
    second = settings.managers[1]
    via_second = settings.model_copy(update={"manager": second.name})
    cut = False
    try:
        _queued_behind(cluster, code, x, y)
        job_cli(cluster, "submit", str(code), "--name", w, "--cluster", CLUSTER, "--hosts",
                ",".join(B_HOSTS[2:]), "--gpus-per-node", "1", "--", *TUTORIAL_COMMAND)  # fmt: skip
        master = training_service_names(x)[0]
        before = command.leader_api(settings).inspect_service(master)
        subprocess.run(["ip", "link", "set", veth_name(1), "down"], check=True)
        cut, t_lost = True, time.time()
        # Raft elects a leader among lab-h2 and lab-h3 (a few seconds).
        wait_for("lab-h2 answering as a manager",
                 lambda: leader.answers(settings, second) is None, 300, 1)  # fmt: skip
        # `job list --refresh` reads each job through its state's manager: X and W are
        # not read now (`unknown`, naming lab-h1), the others are listed, and it exits 1.
        listing = subprocess.run(
            [JOB_SCRIPT, "list", "--refresh"],
            env=cluster.env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        cluster.record(listing.stdout, listing.stderr)
        listed = listing.stdout.splitlines()
        assert listing.returncode == 1, (listed[-40:], listing.stderr[-3000:])
        for name in (x, w):
            why = f"{name} unknown: not read now (through manager lab-h1): "
            assert any(ln.startswith(why) for ln in listed), listed[-40:]
        assert any(ln.split()[:1] == [y] for ln in listed), listed[-40:]
        unread = listing.stderr.removeprefix("job list --refresh: not read now: ")
        assert {x, w} <= set(unread.split(" (")[0].split(", ")), listing.stderr[-3000:]
        moved = job_cli(cluster, *_holder(code, x)).splitlines()
        assert any(ln.startswith(f"job {x}: its manager lab-h1 does not answer (")
                   and ln.endswith("its state now goes through manager lab-h2")
                   for ln in moved), moved[-40:]  # fmt: skip
        assert stack_file_values(command.stack_file(x).read_text())["manager"] == "lab-h2"
        after = command.leader_api(via_second).inspect_service(master)
        assert (after["ID"], after["Version"]) == (before["ID"], before["Version"]), (
            "X's master service was replaced or updated by the move",
            moved[-40:],
        )
        Pulumi(x, env=cluster.env).run("preview", "--expect-no-changes")
        # W as a checkout without its file stops it (one whose pass did not start it).
        w_text = command.stack_file(w).read_text()
        command.stack_file(w).unlink()
        stopped = job_cli(cluster, "stop", w).splitlines()
        assert any(ln.startswith(f"job {w}: its manager lab-h1 does not answer (")
                   and ln.endswith("its state now goes through manager lab-h2")
                   for ln in stopped), stopped[-40:]  # fmt: skip
        assert f"job {w}: stopped; its checkpoints and logs stay on the data dir" in stopped
        w_master = training_service_names(w)[0]
        assert command.leader_api(via_second).services(filters={"name": w_master}) == []
        job_cli(cluster, "stop", x)
        # A new Raft leader counts a node ready once its agent reports again (`unknown`
        # until then: no GPU of it is free to a pass). `job gpus` goes through lab-h2
        # as well: X's hosts ready and free.
        rows = wait_for(f"{hosts} ready and free as lab-h2 sees them",
                        lambda: _free_rows(cluster, B_HOSTS[:2], "fake-b", 4), 300, 2)  # fmt: skip
        proc = subprocess.run(
            ["ip", "netns", "exec", netns_name(2), JOB_SCRIPT, "queue", CLUSTER, "--run"],
            env=cluster.env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        cluster.record(proc.stdout, proc.stderr)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
        lines = proc.stdout.splitlines()
        assert any(ln.startswith(f"cluster {CLUSTER}: through manager lab-h2 (lab-h1 (")
                   for ln in lines), lines[:20]  # fmt: skip
        started = f"job {y}: admitted on {hosts}; pulumi up through manager lab-h2"
        assert started in lines, ("\n".join(lines[-40:]), rows)
        assert stack_file_values(command.stack_file(y).read_text())["manager"] == "lab-h2"
        wait_for(f"{y}'s first step", lambda: tutorial_steps(y) or None, 900, 1)
        to_step = time.time() - t_lost
        Pulumi(y, env=cluster.env).run("preview", "--expect-no-changes")
        gpus = subprocess.run([JOB_SCRIPT, "gpus", CLUSTER], env=cluster.env,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        cluster.record(gpus.stdout, gpus.stderr)
        assert gpus.returncode == 0, gpus.stderr[-3000:]
        assert gpus.stderr.startswith(f"cluster {CLUSTER}: through manager lab-h2 (lab-h1 ("), (
            gpus.stderr[-3000:]
        )
        asked = time.monotonic()
        assert leader.answers(settings, settings.managers[0]) is not None
        probe_s = time.monotonic() - asked
        watched = _watch_from_lab_h2(cluster)
        through = [ln for ln in watched if ln.startswith(f"cluster {CLUSTER}: through ")]
        assert len(through) == 1, watched[-20:]
        assert through[0].startswith(f"cluster {CLUSTER}: through manager lab-h2 (lab-h1 (")
        passes = watched[-1].rsplit("after ", 1)[-1]
        assert passes.endswith("pass(es)"), watched[-5:]
    finally:
        if cut:
            _rejoin(1)
        if w_text is not None:
            command.stack_file(w).write_text(w_text)
        for name in (y, x, w):
            remove_job(cluster, name)
    report["figure"] = (
        f"lab-h1 lost while {x} ran; {x} submitted again moved to lab-h2 (its services "
        f"the same, its preview a no-op), then stopped; {w}, its file not here, moved "
        f"by its stop; one pass from lab-h2 started {y} "
        "through lab-h2: "
        f"first step {to_step:.0f} s after the loss; {y}'s preview through lab-h2 a no-op; "
        f"a watch from lab-h2 made {passes} in {WATCH_S:.0f} s through lab-h2 (a probe of "
        f"the cut lab-h1 took {probe_s:.1f} s)"
    )
    report["command"] = (
        f"ip link set {veth_name(1)} down; scripts/job submit {x} (as it was), stop {w} "
        f"(its file not here), stop {x}; "
        f"in lab-h2's namespace: scripts/job queue {CLUSTER} --run, then --watch --every 1 "
        f"for {WATCH_S:.0f} s"
    )
