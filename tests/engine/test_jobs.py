"""Jobs as their own stacks on a cluster stack (issue 22), with the real engine on the lab.

In order, on the 2-host lab: a single dev stack trains synced code; it becomes a cluster
stack (`kind: cluster`), which previews as the run's deletion alone and keeps the swarm,
image, overlay, secrets and warm-up service as they are (docs/jobs.md, "Migrating a
single stack"); monitoring turned on in the cluster's file creates only monitoring's
resources; the run's checkpoints move to a job's folder and the job, submitted with the
job command's functions (jobs/command.py, what `scripts/job` runs), resumes from the
newest of them in services of its own; the cluster's Prometheus scrapes its ranks by
the file the job adds; its state holds no cluster resource and no secret; preview is a
no-op for both stacks; `list` shows the job's state, step, loss and GPUs; `logs` reads
its launcher log, all ranks or one; the run killed whole lists `failed` with its reason
after one `list --refresh` (its `run` output still saying running), and a submit again
relaunches it; one line of `train.py` changed and submitted again
relaunches on the new code with no service and no image touched (the time is printed);
a host change in the cluster's file that the cluster has not deployed refuses the
job's preview; `gpus` names each host's free GPUs and the job holding them; a submit
waits while another holds the cluster's submit lock, and takes an expired one; a second
job asking for the GPUs the first holds is queued by `submit` (tests/engine/
test_jobs_queue.py follows a queued job to its start) and, its file written by hand
with no hosts, refused by the engine's preview and `up`, with nothing created; `stop`
removes the job's services and its scrape file and keeps its checkpoints; `remove`
drops its stack and stack file; the cluster is still a no-op after all of it. The tests
depend on this order (as tests/engine/test_run.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from harness import ROOT
from harness.configs import dev_config
from harness.jobs import remove_job
from harness.lab import (
    Resume,
    check_resumed_after_the_stop,
    client,
    exec_text,
    logged_steps,
    run_log,
    run_resumes,
    service_versions,
    shared,
)
from harness.prom import api, query, wait_for_prom
from harness.stack import Pulumi, Stack
from harness.waits import wait_for
from infra.components.swarm import endpoint
from infra.config import ConfigError
from infra.layout import STANDBY_SERVICE, WARMUP_SERVICE, training_service_names
from jobs import command, teardown
from jobs.lock import EXPIRES_LABEL, HOLDER_LABEL, LOCK_NAME, submit_lock
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.engine

CLUSTER = "test-jobs-cluster"
SINGLE_RUN = "jobs-single"
"""The single stack's run, before it becomes the cluster."""
JOB = "test-jobs-a"
JOB_B = "test-jobs-b"
"""A second job, which the first one's GPUs leave no room for."""
SECRET = "wandb-jobs-4d1f07"
MARK = "dss-engine-test: job code version 2"
CKPT_EVERY = 5
SCRAPE_S = 5
CLUSTER_TYPES = (
    "deepspeed-swarm:swarm:",
    "deepspeed-swarm:hostfacts:",
    "docker:index/image:",
    "docker:index/network:",
    "docker:index/secret:",
    "docker:index/remoteImage:",
    "deepspeed-swarm:monitoring:",
)
"""Type prefixes of what only the cluster stack owns."""


@pytest.fixture(scope="module")
def cluster(lab: dict[str, Any], make_stack: MakeStack, code: Path) -> Stack:
    """The dev lab as a single stack training synced code, with a few checkpoints made;
    the first test turns it into the cluster stack. Its `training` section then holds
    the jobs' defaults."""
    config = dev_config(
        run_name=SINGLE_RUN,
        steps=100000,
        checkpoint_every=CKPT_EVERY,
        code={"dir": str(code)},
        script="train.py",
    )
    s = make_stack(CLUSTER, config, {"wandb_api_key": SECRET})
    s.pulumi("up", "--yes", "--skip-preview")
    wait_for(
        "two checkpoints", lambda: max(logged_steps(SINGLE_RUN) or [0]) > 2 * CKPT_EVERY, 600, 5
    )
    return s


def spec(code: Path) -> command.JobSpec:
    return command.JobSpec(name=JOB, cluster=CLUSTER, code_dir=code, steps=100000)


def newest_checkpoint(run: str) -> str:
    return max(p.name for p in shared("checkpoints", run).iterdir() if p.name.startswith("step_"))


def resumes() -> list[Resume]:
    """Every resume of the job so far, as rank 0 announced it."""
    return run_resumes(JOB)


@pytest.fixture(scope="module")
def job(cluster: Stack, code: Path) -> Iterator[dict[str, Any]]:
    """The job: the single stack's run's checkpoints moved to its folder, submitted,
    resumed and training; its outputs with the first resume (`resumed`) and the
    checkpoint it should load (`expected`). Stopped and removed afterwards in any case."""
    lines: list[str] = []
    try:
        newest = newest_checkpoint(SINGLE_RUN)
        shared("checkpoints", SINGLE_RUN).rename(shared("checkpoints", JOB))
        t0 = time.monotonic()
        outputs = command.submit(spec(code), env=cluster.env, out=lines.append)
        cluster.record(*lines)
        first = wait_for("the job's resume", lambda: next(iter(resumes()), None), 600, 2)
        wait_for("its first step", lambda: first.next_step in logged_steps(JOB), 600, 2)
        took = time.monotonic() - t0
        print(f"migrated: the job resumed at step {first.next_step}, {took:.0f} s after submit")
        yield {**outputs, "resumed": first, "expected": newest}
    finally:
        remove_job(cluster, JOB, lines.append)
        cluster.record(*lines)


def _job_cli(cluster: Stack, *args: str) -> str:
    """`scripts/job <args>` as a person runs it, with the cluster's backend and
    passphrase; what it printed. It must exit 0."""
    proc = subprocess.run([str(ROOT / "scripts" / "job"), *args], env=cluster.env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.stdout


def _job_pulumi(cluster: Stack, *args: str) -> str:
    """`pulumi <args>` on the job's stack, with the cluster's backend and passphrase
    (what it printed goes into the cluster's transcript)."""
    proc = Pulumi(JOB, env=cluster.env).run(*args)
    cluster.record(proc.stdout, proc.stderr)
    return proc.stdout


def test_the_single_stack_becomes_a_cluster_stopping_only_the_run(cluster: Stack) -> None:
    """`kind: cluster` previews as the run's deletion alone; `up` keeps the swarm,
    image, overlay, secrets and the warm-up service as they are, and the stack then
    has no training service and no run, and exports the secrets' ids for its jobs."""
    before, versions = cluster.outputs(), service_versions()
    cluster.pulumi("config", "set", "kind", "cluster")
    plan = cluster.plan()
    assert plan and all(op == "delete" for op, _ in plan.values()), plan
    kept = ("-facts", "-swarm", "-image", "-net", "-secrets")
    assert not [n for n in plan if any(k in n for k in kept)], plan
    cluster.pulumi("up", "--yes", "--skip-preview")
    out = cluster.outputs()
    for key in ("imageRef", "networkId", "swarmId"):
        assert out[key] == before[key], key
    assert "run" not in out and "serviceNames" not in out, out
    assert set(out["secretRefs"]) == {"wandb_api_key", "ssh_private_key", "ssh_public_key"}
    now = service_versions()
    assert now[WARMUP_SERVICE] == versions[WARMUP_SERVICE], "the warm-up service was updated"
    assert STANDBY_SERVICE not in now, now
    assert not {"ds-master", "ds-worker"} & set(now), now
    cluster.pulumi("preview", "--expect-no-changes")


def targets(prom: str) -> dict[str, list[tuple[str, str]]]:
    """Prometheus' active targets: job label -> (run label, health) of each."""
    out: dict[str, list[tuple[str, str]]] = {}
    for t in api(prom, "targets", state="active")["activeTargets"]:
        out.setdefault(t["labels"]["job"], []).append((t["labels"].get("run", ""), t["health"]))
    return out


def scrape_file() -> Path:
    """The job's scrape config on the shared data dir (infra/components/scrape.py)."""
    return shared("monitoring", "jobs", f"{JOB}.yml")


def test_monitoring_on_the_cluster_adds_only_monitoring(
    cluster: Stack, monitoring_images: None
) -> None:
    """Monitoring turned on in the cluster's file: the preview creates monitoring's
    resources and changes nothing else; Prometheus scrapes the node exporters and
    itself, and has no training target before a job adds its own."""
    for key, value, kind in (
        ("enabled", "true", "bool"),
        ("scrape_interval", f"{SCRAPE_S}s", "string"),
        ("evaluation_interval", f"{SCRAPE_S}s", "string"),
    ):
        cluster.pulumi("config", "set", "--path", f"monitoring.{key}", value, "--type", kind)
    plan = cluster.plan()
    assert plan and all(op == "create" and "-monitoring" in n for n, (op, _) in plan.items()), plan
    cluster.pulumi("up", "--yes", "--skip-preview")
    prom = cluster.outputs()["prometheusAddress"]

    def others_up() -> dict[str, list[tuple[str, str]]] | None:
        now = targets(prom)
        health = {j: [h for _, h in now.get(j, [])] for j in ("dss-node", "prometheus")}
        return now if health == {"dss-node": ["up", "up"], "prometheus": ["up"]} else None

    assert "dss-train" not in wait_for_prom("node exporters and Prometheus up", others_up, 300)
    cluster.pulumi("preview", "--expect-no-changes")


def test_prometheus_scrapes_the_jobs_ranks(cluster: Stack, job: dict[str, Any]) -> None:
    """The job's scrape config is on the data dir and its cluster's Prometheus scrapes
    both of its ranks, under the run's name: `up` and the ranks' own step series."""
    assert f"tasks.{training_service_names(JOB)[0]}" in scrape_file().read_text()
    prom = cluster.outputs()["prometheusAddress"]

    def ranks_up() -> list[tuple[str, str]] | None:
        train = targets(prom).get("dss-train", [])
        return train if train == [(JOB, "up"), (JOB, "up")] else None

    wait_for_prom("the job's two ranks up", ranks_up, 300)

    def steps() -> list[dict[str, Any]] | None:
        series = query(prom, f'dss_train_step{{run="{JOB}"}}')
        return series if len(series) == 2 else None

    found = wait_for_prom("both ranks' steps", steps, 120)
    assert sorted(x["metric"]["rank"] for x in found) == ["0", "1"], found


def test_job_trains_in_services_of_its_own(job: dict[str, Any]) -> None:
    """The job's run resumed from the single stack's newest checkpoint and trains in
    `<job>-master` and `<job>-worker`, under its own run name (checkpoints and logs of
    its own), on the cluster's image."""
    assert job["resumed"].checkpoint.endswith(job["expected"]), job["resumed"]
    master, worker = training_service_names(JOB)
    assert job["serviceNames"] == [master, worker]
    assert {master, worker} <= set(service_versions())
    assert job["run"]["state"] == "running", job["run"]
    assert run_log(JOB, "metrics.jsonl").exists()
    assert job["code"]["path"].startswith(f"/data/code/{JOB}/")


def test_job_state_holds_no_cluster_resource(cluster: Stack, job: dict[str, Any]) -> None:
    """The job's state has its services, code and launch, and none of what the cluster
    owns (its preview can never show a cluster resource), and no secret's value."""
    state = json.loads(_job_pulumi(cluster, "stack", "export"))
    types = [r["type"] for r in state["deployment"]["resources"]]
    assert "deepspeed-swarm:services:TrainingServices" in types, types
    assert "deepspeed-swarm:launch:TrainingLaunch" in types, types
    assert "deepspeed-swarm:scrape:JobScrape" in types, types
    owned = [t for t in types if t.startswith(CLUSTER_TYPES)]
    assert owned == [], owned
    # The job mounts the cluster's secrets by id: their values are nowhere in it.
    assert SECRET not in json.dumps(state)
    assert SECRET not in command.stack_file(JOB).read_text()
    assert not any(SECRET in text for text in cluster.transcript)


def test_both_previews_are_no_ops(cluster: Stack, job: dict[str, Any]) -> None:
    """With the job running, neither its preview nor the cluster's has a change."""
    _job_pulumi(cluster, "preview", "--expect-no-changes")
    cluster.pulumi("preview", "--expect-no-changes")


def test_list_shows_state_step_loss_and_gpus(cluster: Stack, job: dict[str, Any]) -> None:
    """`job list` has the job with its run's state, a step read on the hosts now, its
    loss, and the GPUs it holds (2 nodes x 1 CPU rank on the lab)."""
    rows = {r.name: r for r in command.list_jobs(env=cluster.env)}
    row = rows[JOB]
    assert (row.cluster, row.state, row.gpus, row.reason) == (
        CLUSTER,
        "running",
        "2 x 1 cpu",
        "",
    ), row
    assert row.step is not None and row.step >= max(logged_steps(JOB)) - 1, row
    assert isinstance(row.loss, float), row


def test_the_command_line_lists_and_follows_the_job(cluster: Stack, job: dict[str, Any]) -> None:
    """`scripts/job list` and `scripts/job logs --rank 1` as a person runs them: the job's
    row, and the last lines of the task that runs rank 1."""
    rows = [line.split() for line in _job_cli(cluster, "list").splitlines()]
    assert rows[0][:3] == ["JOB", "CLUSTER", "STATE"], rows
    assert [JOB, CLUSTER, "running"] in [r[:3] for r in rows[1:]], rows
    address = job["rankMap"][1]["address"]
    lines = _job_cli(cluster, "logs", JOB, "--rank", "1", "--lines", "100").splitlines()
    assert lines and all(x.startswith(f"{address}: ") for x in lines), lines[:5]


def test_logs_read_the_jobs_launcher_log(job: dict[str, Any]) -> None:
    """`job logs` prints the launcher log from the master host, and `--rank` the lines
    of the task that runs that rank only."""
    cfg = command.job_settings(JOB)
    every = command.on_master(cfg, command.logs_command(cfg, None, 200, False),
                              capture_output=True)  # fmt: skip
    assert every.returncode == 0 and every.stdout.strip(), every
    address = command.task_address(job["rankMap"], rank=1)
    assert address == job["rankMap"][1]["address"]
    one = command.on_master(cfg, command.logs_command(cfg, address, 200, False),
                            capture_output=True)  # fmt: skip
    lines = one.stdout.splitlines()
    assert lines and all(x.startswith(f"{address}: ") for x in lines), lines[:5]
    assert len(lines) < len(every.stdout.splitlines())


def _job_tasks() -> list[Any]:
    """The containers of the job's running training tasks, on whichever lab host each is."""
    labels = [f"com.docker.swarm.service.name={s}" for s in training_service_names(JOB)]
    return [
        ctr
        for host in (1, 2)
        for label in labels
        for ctr in client(host).containers.list(filters={"label": label})
    ]


def _run_processes() -> list[str]:
    """Command lines of the job's run (supervisors, launchers, ranks) in its tasks."""
    marks = (f"/data/.dss/{JOB}/supervise", f"/data/code/{JOB}/")
    return [
        line
        for ctr in _job_tasks()
        for line in exec_text(ctr, ["ps", "-eo", "args="]).splitlines()
        if any(m in line for m in marks)
    ]


def test_a_dead_run_lists_failed_with_its_reason_after_one_refresh(
    cluster: Stack, job: dict[str, Any], code: Path
) -> None:
    """The job's run killed whole (its supervisors first, so none restarts it): one
    `list --refresh` reads it `failed` with its reason, from the run record the refresh
    rewrote, while the stack's `run` output still says running (only `up` computes
    outputs); `scripts/job list` with no refresh then prints the same state, and the
    reason under the table; a submit again relaunches the run, and `list` reads it
    running, with no reason."""
    tasks = _job_tasks()
    assert len(tasks) == 2, tasks
    for ctr in tasks:
        exec_text(ctr, ["pkill", "-KILL", "-f", f"/data/.dss/{JOB}/supervise"])
        exec_text(ctr, ["pkill", "-KILL", "-f", f"/data/code/{JOB}/"])
    wait_for("the run's processes gone", lambda: not _run_processes(), 120)
    t0 = time.monotonic()
    (row,) = [r for r in command.list_jobs(env=cluster.env, refresh=True) if r.name == JOB]
    print(f"the killed run listed {row.state} by one `list --refresh` in "
          f"{time.monotonic() - t0:.0f} s: {row.reason}")  # fmt: skip
    assert row.state == "failed" and "no training process is left" in row.reason, row
    # What the list read before: the output of the last `up`, which the refresh left alone.
    stale = command.workspace_stack(JOB, cluster.env).outputs()["run"].value
    assert stale["state"] == "running", f"the refresh recomputed the run output: {stale}"
    lines = _job_cli(cluster, "list").splitlines()
    assert [JOB, CLUSTER, "failed"] in [x.split()[:3] for x in lines[1:]], lines
    assert "" in lines and f"{JOB} failed: {row.reason}" in lines, lines
    before, printed = len(resumes()), list[str]()
    command.submit(spec(code), env=cluster.env, out=printed.append)
    cluster.record(*printed)
    nxt = wait_for("the relaunch's resume", lambda: resumes()[before].next_step
                   if len(resumes()) > before else None, 600, 1)  # fmt: skip
    wait_for(f"step {nxt} logged", lambda: nxt in logged_steps(JOB), 600, 1)
    (row,) = [r for r in command.list_jobs(env=cluster.env) if r.name == JOB]
    assert (row.state, row.reason) == ("running", ""), row
    _job_pulumi(cluster, "preview", "--expect-no-changes")


def test_changed_code_relaunches_with_no_service_touched(
    cluster: Stack, job: dict[str, Any], code: Path
) -> None:
    """One line of train.py changed and submitted again: the old run stops with a final
    checkpoint and the run relaunches on the new code from it, no service is updated
    and no image built; the job's preview is a no-op afterwards."""
    main = code / "train.py"
    old = "from dss_train.main import main"
    main.write_text(main.read_text().replace(old, f"print({MARK!r}, flush=True)\n{old}"))
    log = run_log(JOB, "launcher.log")
    versions, offset = service_versions(), log.stat().st_size
    image = cluster.outputs()["imageRef"]
    last, before, t0 = max(logged_steps(JOB)), len(resumes()), time.monotonic()
    lines: list[str] = []
    command.submit(spec(code), env=cluster.env, out=lines.append)
    cluster.record(*lines)
    up_s = time.monotonic() - t0
    nxt = wait_for("a resume", lambda: resumes()[before].next_step if len(resumes()) > before
                   else None, 600, 1)  # fmt: skip
    wait_for(f"step {nxt} logged", lambda: nxt in logged_steps(JOB), 600, 1)
    took = time.monotonic() - t0
    print(f"job code changed after step {last}: submit {up_s:.0f} s, step {nxt} at {took:.0f} s")
    since = log.read_bytes()[offset:].decode(errors="replace")
    assert MARK in since, "not the new code"
    check_resumed_after_the_stop(since, nxt, last)
    assert service_versions() == versions, "a code change updated a service"
    assert cluster.outputs()["imageRef"] == image
    _job_pulumi(cluster, "preview", "--expect-no-changes")


def test_an_undeployed_cluster_change_refuses_the_job(cluster: Stack, job: dict[str, Any]) -> None:
    """A host change in the cluster's stack file that the cluster has not deployed:
    the job's preview fails naming the cluster and what to run, with nothing of the
    job changed; with the file as deployed again, the job's preview is a no-op."""
    versions = service_versions()
    cluster.pulumi("config", "set", "--path", "hosts[1].labels.rack", "r2")
    try:
        proc = Pulumi(JOB, env=cluster.env).run("preview", check=False)
        cluster.record(proc.stdout, proc.stderr)
    finally:
        cluster.pulumi("config", "rm", "--path", "hosts[1].labels.rack")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-2000:]
    assert f"cluster: {CLUSTER!r}: its stack file Pulumi.{CLUSTER}.yaml" in text, text[-3000:]
    assert f"pulumi up --stack {CLUSTER}" in text, text[-3000:]
    assert service_versions() == versions
    _job_pulumi(cluster, "preview", "--expect-no-changes")


def test_gpus_names_each_host_and_the_job_holding_it(cluster: Stack, job: dict[str, Any]) -> None:
    """`scripts/job gpus` on the live cluster asks its leader: each host with its model and
    none of its 2 GPUs free, held by the job's master on lab-h1 and its worker on lab-h2."""
    proc = subprocess.run(
        [str(ROOT / "scripts" / "job"), "gpus", CLUSTER],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    master, worker = training_service_names(JOB)
    assert [line.split() for line in proc.stdout.splitlines()] == [
        command.GPU_HEADER.split(),
        ["lab-h1", "fake-gpu", "0", "of", "2", f"{master},", "job", f"{JOB}:", "2"],
        ["lab-h2", "fake-gpu", "0", "of", "2", f"{worker},", "job", f"{JOB}:", "2"],
    ]


def test_a_submit_waits_for_the_clusters_submit_lock(
    cluster: Stack, job: dict[str, Any], code: Path
) -> None:
    """While another submit holds the cluster's lock (a Swarm config on the leader), a
    submit waits, naming the holder, and checks and writes nothing; once the lock is let
    go it goes on (to the admission pass, which queues it: the first job holds every
    GPU); a lock past its expiry is taken at once. No lock is left on the swarm."""
    leader = endpoint(command.cluster_settings(CLUSTER).leader)
    other = command.JobSpec(name=JOB_B, cluster=CLUSTER, code_dir=code, steps=10)
    said: list[str] = []
    outcome: list[BaseException] = []

    def submit() -> None:
        try:
            command.submit(other, env=cluster.env, out=said.append)
        except BaseException as e:  # the thread's outcome, asserted below
            outcome.append(e)

    waiter = threading.Thread(target=submit)
    with submit_lock(leader, "submit of the engine test", print):
        waiter.start()
        held = "waiting for the cluster's submit lock, held by submit of the engine test"
        wait_for("the second submit waiting", lambda: held in said, 60, 0.5)
        time.sleep(3)
        assert waiter.is_alive() and not outcome, (said, outcome)
        assert not command.stack_file(JOB_B).exists()
    waiter.join(300)
    try:
        assert not outcome and not waiter.is_alive(), (said, outcome)
        assert said[-1].startswith(f"job {JOB_B} reserved: #1 on {CLUSTER}; "), said[-3:]
    finally:
        remove_job(cluster, JOB_B, said.append)
        cluster.record(*said)
    api: Any = client(1).api  # docker-py's low-level API is untyped
    assert not api.configs(filters={"name": LOCK_NAME})
    # A submit killed while it held the lock: its expiry passed, the next one takes it.
    api.create_config(LOCK_NAME, b"dead", labels={HOLDER_LABEL: "dead", EXPIRES_LABEL: "1"})
    taken: list[str] = []
    with submit_lock(leader, "submit of the engine test", taken.append, wait_s=5):
        pass
    assert taken == ["the cluster's submit lock of dead has expired: taking it"]
    assert not api.configs(filters={"name": LOCK_NAME})
    # The lease: a holder renewing a 4-s lease every second keeps the lock past it (each
    # renewal a label update at the version read); another submit still waits.
    renewals: list[str] = []
    with submit_lock(leader, "the renewing holder", renewals.append, hold_s=4, renew_s=1):
        time.sleep(8)
        with (
            pytest.raises(ConfigError, match="held by the renewing holder after waiting 2 s"),
            submit_lock(leader, "submit of the engine test", taken.append, wait_s=2),
        ):
            pass
    assert renewals == [], renewals
    assert not api.configs(filters={"name": LOCK_NAME})


def test_a_job_without_free_gpus_is_refused(
    cluster: Stack, job: dict[str, Any], code: Path
) -> None:
    """A second job asking for the GPUs the first holds, its stack file written by hand
    (no hosts: the cluster's first hosts, as before planning; not queued): the engine's
    preview and `up` refuse it (the GpuFit check) naming each host, its free GPUs and the
    job holding them, and no service of it is created and the first job's are
    untouched. (`submit` queues such a job: tests/engine/test_jobs_queue.py.)"""
    other = command.JobSpec(name=JOB_B, cluster=CLUSTER, code_dir=code, steps=10)
    versions = service_versions()
    master = training_service_names(JOB)[0]
    refusal = f"lab-h1 has 0 of 2 free (held by {master}, job {JOB}: 2)"
    lines: list[str] = []
    try:
        command.write_job(other)
        stack = command.workspace_stack(JOB_B, cluster.env)
        for op in (stack.preview, stack.up):
            with pytest.raises(auto.CommandError) as refused:
                op(on_output=lines.append, color="never")
            assert refusal in str(refused.value), str(refused.value)[-3000:]
            assert f"scripts/job stop {JOB}" in str(refused.value)
        assert service_versions() == versions, "a refused job changed the swarm's services"
    finally:
        teardown.remove(JOB_B, env=cluster.env, out=lines.append)
        cluster.record(*lines)
    assert not command.stack_file(JOB_B).exists()


def test_stop_keeps_checkpoints_and_remove_drops_the_stack(
    cluster: Stack, job: dict[str, Any]
) -> None:
    """`stop` removes the job's services and keeps its checkpoints and stack file;
    `remove` drops the stack and the file; the cluster is a no-op throughout."""
    lines: list[str] = []
    teardown.stop(JOB, env=cluster.env, out=lines.append)
    names = set(service_versions())
    assert not set(training_service_names(JOB)) & names, names
    assert not scrape_file().exists(), "the job's scrape config stayed"
    prom = cluster.outputs()["prometheusAddress"]
    wait_for_prom("no training target", lambda: "dss-train" not in targets(prom), 120)
    assert any(shared("checkpoints", JOB).iterdir()), "the job's checkpoints went"
    assert command.stack_file(JOB).exists()
    assert JOB in command.job_names()
    teardown.remove(JOB, env=cluster.env, out=lines.append)
    cluster.record(*lines)
    assert not command.stack_file(JOB).exists()
    assert JOB not in command.job_names()
    cluster.pulumi("preview", "--expect-no-changes")
    cluster.pulumi("refresh", "--preview-only", "--expect-no-changes")
