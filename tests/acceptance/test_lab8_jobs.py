"""A job on the 9-host lab's cluster with the job command (issue 22), as a person runs
it: `scripts/job submit`, `logs -f`, `list`, one line of `train.py` changed and
submitted again, `stop` and `remove`, each a subprocess with the cluster's backend.
The cluster is the `lab8` stack's config with `kind: cluster` and monitoring on; the
job trains synced code on the eight training hosts, and the cluster's Prometheus
scrapes its eight ranks by the file the job adds. Tests run in file order on one
cluster and one job; each records a row of the table `scripts/acceptance` prints
(tests/acceptance/report.py).
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from dss_train import checkpoints as ck
from prometheus_client.parser import text_string_to_metric_families

from harness import ROOT
from harness.configs import lab8_config
from harness.lab import (
    check_resumed_after_the_stop,
    client,
    docker,
    host_index,
    logged_steps,
    restart_events,
    restart_events_after,
    run_log,
    run_resumes,
    service_versions,
    shared,
    wait_resumed,
)
from harness.prom import api, firing, query, wait_for_prom
from harness.stack import Pulumi, Stack
from harness.waits import wait_for
from infra.config.models.job import Recovery
from infra.layout import job_standby_name, training_service_names
from infra.providers.queue import entry_name
from infra.render.queuefile import (
    JOBS_METRIC,
    NOT_RUN_AFTER_S,
    PASS_METRIC,
    WAIT_METRIC,
    Waiter,
    file_name,
    queue_metrics,
)
from jobs import command
from jobs.queue import QUEUE_HEADER
from tests.acceptance.conftest import JOB_SCRIPT, job_cli, job_cluster, task_container
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

CLUSTER = "test-lab8-cluster"
JOB = "test-lab8-job"
CKPT_EVERY = 10
MARK = "dss-acceptance: job code version 2"
SCRIPT = JOB_SCRIPT
TRAINING_HOSTS = [f"lab-h{i}" for i in range(1, 9)]
SPARE = "lab-h9"
FOURTH = f"{JOB}-w"
"""The job test_two_jobs_share_four_hosts queues behind the three it runs."""
"""The lab8 config's spare (Pulumi.lab8.yaml)."""


@pytest.fixture(scope="module")
def cluster(
    lab9: dict[str, Any], monitoring_images: None, make_stack: MakeStack
) -> Iterator[Stack]:
    """The lab8 config as a cluster stack (no run of its own) with monitoring, up; the
    job removed afterwards in any case (make_stack then destroys the cluster)."""
    config = {
        **lab8_config(checkpoint_every=CKPT_EVERY),
        "deepspeed-swarm:monitoring": {"enabled": True},
    }
    with job_cluster(make_stack, CLUSTER, config, JOB) as s:
        yield s


def submit(cluster: Stack, code: Path) -> str:
    return job_cli(cluster, "submit", str(code), "--name", JOB, "--cluster", CLUSTER,
                   "--steps", "100000", "--checkpoint-every", str(CKPT_EVERY))  # fmt: skip


def job_outputs(cluster: Stack) -> dict[str, Any]:
    """The job stack's outputs, read with the cluster's backend."""
    proc = Pulumi(JOB, env=cluster.env).run("stack", "output", "--json")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def placed(*services: str) -> list[str]:
    """The nodes the services' running tasks are on, sorted."""
    running = ["--filter", "desired-state=running", "--format", "{{.Node}}"]
    return sorted(docker(1, "service", "ps", *services, *running).split())


def test_job_submitted_with_the_job_command(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """`scripts/job submit` starts a job on the eight training hosts in services of its
    own. It writes the job's stack file with the hosts it planned and prints the
    engine's progress, and the run logs steps under the job's name."""
    t0 = time.monotonic()
    out = submit(cluster, code)
    up_s = time.monotonic() - t0
    assert f"{JOB}-launch-run" in out, out[-2000:]
    wait_for("the job's first step", lambda: logged_steps(JOB), 900, 2)
    step_s = time.monotonic() - t0
    doc = command.stack_file(JOB).read_text()
    assert "kind: job" in doc and f"cluster: {CLUSTER}" in doc, doc
    assert "placement: planned" in doc and all(h in doc for h in TRAINING_HOSTS), doc
    assert placed(*training_service_names(JOB)) == TRAINING_HOSTS
    report["figure"] = f"submit {up_s:.0f} s, first step {step_s:.0f} s, 8 tasks"
    report["command"] = f"scripts/job submit DIR --name {JOB} --cluster {CLUSTER}"


def test_the_clusters_prometheus_scrapes_the_eight_ranks(
    cluster: Stack, report: dict[str, str]
) -> None:
    """The cluster's Prometheus finds the job's eight ranks by the job's scrape file,
    each `up` under the job's run, with their steps, and the nine node exporters."""
    prom = cluster.outputs()["prometheusAddress"]
    t0 = time.monotonic()

    def all_up() -> dict[str, list[str]] | None:
        by_job: dict[str, list[str]] = {}
        for t in api(prom, "targets", state="active")["activeTargets"]:
            labels = t["labels"]
            by_job.setdefault(labels["job"], []).append(f"{labels.get('run', '')}:{t['health']}")
        ok = by_job.get("dss-train") == [f"{JOB}:up"] * 8
        return by_job if ok and by_job.get("dss-node") == [":up"] * 9 else None

    wait_for_prom("8 ranks and 9 node exporters up", all_up, 300)
    steps = query(prom, f'dss_train_step{{run="{JOB}"}}')
    assert sorted(int(x["metric"]["rank"]) for x in steps) == list(range(8)), steps
    report["figure"] = f"8 ranks up under run {JOB} {time.monotonic() - t0:.0f} s after the check"
    report["command"] = f"{prom}/api/v1/targets"


def test_job_followed_with_logs(cluster: Stack, report: dict[str, str]) -> None:
    """`scripts/job logs -f` follows the job's launcher log as steps come, and `--rank 7`
    prints only the lines of the task that runs rank 7."""
    last = max(logged_steps(JOB))
    new_step = tuple(f"step {s}/" for s in range(last + 1, last + 200))
    proc = subprocess.Popen([SCRIPT, "logs", JOB, "-f", "--lines", "1"], env=cluster.env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        while not any(s in line for line in seen[-5:] for s in new_step):
            assert time.monotonic() < deadline, f"no step after {last} followed: {seen[-20:]}"
            if select.select([proc.stdout], [], [], 5)[0]:
                seen.append(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(30)
    address = job_outputs(cluster)["rankMap"][7]["address"]
    lines = job_cli(cluster, "logs", JOB, "--rank", "7", "--lines", "5000").splitlines()
    assert lines and all(x.startswith(f"{address}: ") for x in lines), lines[:5]
    report["figure"] = f"a step after {last} followed; {len(lines)} lines, all rank 7's"
    report["command"] = f"scripts/job logs {JOB} -f; scripts/job logs {JOB} --rank 7"


def test_job_listed_with_state_step_loss_and_gpus(cluster: Stack, report: dict[str, str]) -> None:
    """`scripts/job list` has the job running, with a step read on the hosts now, its
    loss and the GPUs it holds."""
    logged = max(logged_steps(JOB))
    rows = [line.split() for line in job_cli(cluster, "list").splitlines()]
    assert rows[0] == ["JOB", "CLUSTER", "STATE", "STEP", "LOSS", "GPUS"], rows
    row = next(r for r in rows[1:] if r[0] == JOB)
    assert row[1:3] == [CLUSTER, "running"], row
    assert int(row[3]) >= logged, f"the list's step is older than step {logged}: {row}"
    assert float(row[4]) > 0, row
    assert row[5:7] == ["8", "x"], row
    report["figure"] = " ".join(row)
    report["command"] = "scripts/job list"


def test_changed_line_relaunches_without_a_service_update(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """One line of train.py changed and submitted again: the old run stops with a final
    checkpoint and the job relaunches on the new code from it, no service updated and
    no image built."""
    main = code / "train.py"
    old = "from dss_train.main import main"
    main.write_text(main.read_text().replace(old, f"print({MARK!r}, flush=True)\n{old}"))
    log = run_log(JOB, "launcher.log")
    versions, offset, image = service_versions(), log.stat().st_size, cluster.outputs()["imageRef"]
    last, before, t0 = max(logged_steps(JOB)), len(run_resumes(JOB)), time.monotonic()
    submit(cluster, code)
    up_s = time.monotonic() - t0

    def resumed() -> int | None:
        found = run_resumes(JOB)
        return found[before].next_step if len(found) > before else None

    nxt = wait_for("a resume", resumed, 900, 1)
    wait_for(f"step {nxt} logged", lambda: nxt in logged_steps(JOB), 900, 1)
    step_s = time.monotonic() - t0
    since = log.read_bytes()[offset:].decode(errors="replace")
    assert MARK in since, "not the new code"
    stopped = check_resumed_after_the_stop(since, nxt, last)  # all eight ranks saved
    assert service_versions() == versions, "a code change updated a service"
    assert cluster.outputs()["imageRef"] == image
    Pulumi(JOB, env=cluster.env).run("preview", "--expect-no-changes")
    report["figure"] = (
        f"submit {up_s:.1f} s, first new step (step {nxt}) {step_s:.1f} s after it; "
        f"the stop saved step {stopped} ({last} logged before the submit); "
        "no service rolled"
    )
    report["command"] = f"edit train.py; scripts/job submit DIR --name {JOB} --cluster {CLUSTER}"


def test_checkpoints_and_logs_are_the_jobs_own(cluster: Stack, report: dict[str, str]) -> None:
    """The job's checkpoints and logs are under its own name on the shared data dir,
    and no service but the job's trains (the cluster has no run of its own)."""
    ckpts = sorted(p.name for p in shared("checkpoints", JOB).iterdir())
    assert any(n.startswith("step_") for n in ckpts), ckpts
    assert run_log(JOB, "metrics.jsonl").exists() and run_log(JOB, "launcher.log").exists()
    trains = {n for n in service_versions() if n.endswith(("-master", "-worker"))}
    assert trains == set(training_service_names(JOB)), trains
    assert not {"ds-master", "ds-worker"} & set(service_versions())
    report["figure"] = f"{len(ckpts)} checkpoints in checkpoints/{JOB}, logs in logs/{JOB}"
    report["command"] = f"ls /data/checkpoints/{JOB} /data/logs/{JOB}"


def test_spent_budget_fires_the_alert_and_refresh_reports_it(
    cluster: Stack, report: dict[str, str]
) -> None:
    """A worker's rank killed until the job's restart budget is spent: the cluster's
    Prometheus fires DssRestartBudgetSpent for the job's run, and the job's refresh
    reports the run failed, naming the reason; `up` of the job relaunches it."""
    budget = Recovery().max_restarts  # the job's: the cluster's default
    prom, job = cluster.outputs()["prometheusAddress"], Pulumi(JOB, env=cluster.env)
    # A relaunch resumes (and says so) only from a complete checkpoint.
    wait_for("a complete checkpoint", lambda: ck.select_latest(shared("checkpoints", JOB),
             hashes=False)[0] or None, 600)  # fmt: skip
    kills, spent = 0, False
    while not spent:
        assert kills <= budget, f"{kills} kills, and no spent budget: {restart_events(JOB)}"
        seen, offset = len(restart_events(JOB)), run_log(JOB, "launcher.log").stat().st_size
        entry = job_outputs(cluster)["rankMap"][-1]  # the last worker's task
        ctr = task_container(entry["node"], entry["task_id"])
        docker(
            host_index(entry["node"]), "exec", ctr, "pkill", "-KILL", "-f", "--", "--local_rank="
        )
        kills += 1
        new = wait_for("the kill recorded", partial(restart_events_after, JOB, seen), 300, 1)
        spent = new[-1]["event"] == "budget_spent"
        if not spent:
            wait_resumed(JOB, offset)
    t_spent = time.monotonic()

    alerts = wait_for_prom(
        "DssRestartBudgetSpent firing", lambda: firing(prom, "DssRestartBudgetSpent"), 600
    )
    alert_s = time.monotonic() - t_spent
    assert [a["labels"]["run"] for a in alerts] == [JOB], alerts

    def reported() -> str | None:
        proc = job.run("refresh", "--preview-only", "--expect-no-changes", "--diff", check=False)
        return proc.stdout + proc.stderr if proc.returncode != 0 else None

    said = wait_for("the job's refresh reporting the spent budget", reported, 300, 5)
    refresh_s = time.monotonic() - t_spent
    assert '"running" => "failed"' in said and "restart budget spent" in said, said[-3000:]
    offset, t0 = run_log(JOB, "launcher.log").stat().st_size, time.monotonic()
    job.run("up", "--yes", "--skip-preview")
    resumed = wait_resumed(JOB, offset)
    job.run("preview", "--expect-no-changes")
    report["figure"] = (
        f"budget of {budget} spent at kill {kills}; DssRestartBudgetSpent firing for run "
        f"{JOB} {alert_s:.0f} s after, the job's refresh reported the run failed (restart "
        f"budget spent) {refresh_s:.0f} s after; `up` of the job relaunched it from step "
        f"{resumed} in {time.monotonic() - t0:.0f} s; preview a no-op"
    )
    report["command"] = (
        "pkill -KILL ranks until budget_spent; GET /api/v1/alerts; "
        f"pulumi refresh --preview-only --stack {JOB}; pulumi up --stack {JOB}"
    )


def test_stopped_then_removed(cluster: Stack, report: dict[str, str]) -> None:
    """`scripts/job stop` removes the job's services and keeps its checkpoints, logs and
    stack file; `remove` drops the stack and the file; the cluster stays a no-op."""
    job_cli(cluster, "stop", JOB)
    assert not set(training_service_names(JOB)) & set(service_versions())
    assert any(shared("checkpoints", JOB).iterdir()), "the job's checkpoints went"
    assert command.stack_file(JOB).exists()
    job_cli(cluster, "remove", JOB)
    assert not command.stack_file(JOB).exists()
    assert JOB not in command.job_names()
    cluster.pulumi("preview", "--expect-no-changes")
    report["figure"] = "services gone, checkpoints and logs kept; cluster preview no-op"
    report["command"] = f"scripts/job stop {JOB}; scripts/job remove {JOB}"


def test_job_on_four_of_the_eight_hosts(cluster: Stack, code: Path, report: dict[str, str]) -> None:
    """`scripts/job submit --nodes 4` plans a job on the master host and the next three
    training hosts only (every host free: best fit, ties by the hosts' order), with world
    size 4, and Prometheus scrapes its 4 ranks; removed, it leaves the cluster a no-op."""
    small = f"{JOB}-4"
    for sub in ("checkpoints", "logs", ".dss"):
        shutil.rmtree(shared(sub, small), ignore_errors=True)
    t0 = time.monotonic()
    try:
        job_cli(cluster, "submit", str(code), "--name", small, "--cluster", CLUSTER,
                "--nodes", "4", "--steps", "100000")  # fmt: skip
        wait_for("the 4-node job's first step", lambda: logged_steps(small), 900, 2)
        took = time.monotonic() - t0
        assert placed(*training_service_names(small)) == TRAINING_HOSTS[:4]
        text = run_log(small, "launcher.log").read_text(errors="replace")
        assert "world 4," in text, text[-2000:]
        prom = cluster.outputs()["prometheusAddress"]
        wait_for_prom(
            "its 4 ranks up",
            lambda: len(query(prom, f'up{{job="dss-train", run="{small}"}} == 1')) == 4,
            300,
        )
    finally:
        if command.stack_file(small).exists():
            job_cli(cluster, "remove", small)
    cluster.pulumi("preview", "--expect-no-changes")
    report["figure"] = f"tasks on lab-h1..h4, world 4, 4 ranks scraped; first step {took:.0f} s"
    report["command"] = f"scripts/job submit DIR --name {small} --cluster {CLUSTER} --nodes 4"


def _placement_story(*services: str) -> str:
    """Every task the services ever had (node, state, error) and each node's running
    tasks: why Swarm put a task where it did."""
    fmt = "{{.Name}} {{.Node}} {{.DesiredState}} {{.CurrentState}} {{.Error}}"
    tasks = docker(1, "service", "ps", "--no-trunc", "--format", fmt, *services)
    nodes = docker(1, "node", "ls", "--format", "{{.Hostname}}").split()
    running = {n: docker(1, "node", "ps", n, "--filter", "desired-state=running",
                         "--format", "{{.Name}}").split() for n in nodes}  # fmt: skip
    return f"{tasks}\n{json.dumps(running, indent=1)}"


def _logged(run: str) -> Callable[[], list[int]]:
    return lambda: logged_steps(run)


def _past(run: str, step: int) -> Callable[[], bool]:
    return lambda: max(logged_steps(run)) > step


def _ranks_up(prom: str, run: str, ranks: int) -> Callable[[], bool]:
    return lambda: len(query(prom, f'up{{job="dss-train", run="{run}"}} == 1')) == ranks


def _queued(cluster: Stack, code: Path, name: str, *flags: str) -> str:
    """`scripts/job submit` of job `name` that does not fit now: it exits 0 with the job
    queued (its stack file in the queued form, its entry on the leader) and no service
    of it created: what it printed."""
    out = job_cli(cluster, "submit", str(code), "--name", name, "--cluster", CLUSTER, *flags)
    assert "queued:" in command.stack_file(name).read_text(), f"{name}'s file not queued"
    assert not [n for n in service_versions() if n.startswith(name)], f"{name}'s services"
    engine: Any = client(1).api  # docker-py's low-level API is untyped
    assert engine.configs(filters={"name": entry_name(name)}), f"{name}'s queue entry"
    return out


def _third_beside_the_pair(
    cluster: Stack, code: Path, pair: list[str], third: str, prom: str
) -> str:
    """Job `third` (4 x 4) submitted while `pair` fills lab-h1..h4: planned on the free
    lab-h5..h8, its tasks there and its 4 ranks scraped, the pair's services untouched
    and both pair jobs training on beside it; then a fourth job asking for more than
    is free (5 hosts with 4 GPUs: lab-h5..h8 have 4 each, lab-h1..h4 none) is queued
    and reserved, naming the free hosts and the jobs holding the rest, then removed.
    `third` is removed after. Returns the figure."""
    versions = {n: v for n, v in service_versions().items() if n.startswith(tuple(pair))}
    job_cli(cluster, "submit", str(code), "--name", third, "--cluster", CLUSTER,
            "--nodes", "4", "--gpus-per-node", "4", "--steps", "100000")  # fmt: skip
    doc = command.stack_file(third).read_text()
    assert "placement: planned" in doc and all(h in doc for h in TRAINING_HOSTS[4:]), doc
    wait_for(f"{third}'s first step", _logged(third), 900, 2)
    svcs = training_service_names(third)
    assert placed(*svcs) == TRAINING_HOSTS[4:], _placement_story(*svcs)
    wait_for_prom(f"{third}'s 4 ranks up", _ranks_up(prom, third, 4), 300)
    # Side by side: the pair trains on beside the third, none of its services updated.
    for name in pair:
        after = max(logged_steps(name))
        wait_for(f"{name} past step {after}", _past(name, after + 2), 300, 2)
    assert {n: v for n, v in service_versions().items() if n.startswith(tuple(pair))} == versions
    fourth = FOURTH
    said = _queued(cluster, code, fourth, "--nodes", "5", "--gpus-per-node", "4")
    engine: Any = client(1).api  # docker-py's low-level API is untyped
    # The head of the queue: reserved on the 4 hosts free now and a full one, held now
    # by the pair and the third; it holds no GPU meanwhile.
    free = ", ".join(TRAINING_HOSTS[4:])
    head = f"job {fourth} reserved: #1 on {CLUSTER}; needs 5 host(s) with 4 GPU(s); "
    assert f"{head}4 host(s) free with 4 GPU(s) ({free}); reserved " in said, said[-2000:]
    assert f"held now by {', '.join(sorted([*pair, third]))}" in said, said[-2000:]
    rows = job_cli(cluster, "queue", CLUSTER).splitlines()
    assert rows[0] == QUEUE_HEADER and len(rows) == 2, rows
    assert rows[1].split()[:2] == ["1", fourth] and " reserved " in rows[1], rows
    not_run = _queue_scraped_and_not_run(cluster, prom, fourth)
    job_cli(cluster, "remove", fourth)
    assert not engine.configs(filters={"name": entry_name(fourth)}), "entry left"
    # The queue left empty: its metrics say so (no DssQueueNotRun for a job that is gone).
    text = shared(".dss", "metrics", file_name(CLUSTER)).read_text()
    assert f'{JOBS_METRIC}{{cluster="{CLUSTER}",state="reserved"}} 0\n' in text, text
    assert fourth not in text, text
    job_cli(cluster, "remove", third)
    assert {n: v for n, v in service_versions().items() if n.startswith(tuple(pair))} == versions
    return (
        f"{third} planned on lab-h5..h8 beside them; 5 x 4 queued (4 hosts free), reserved; "
        f"{not_run}"
    )


def _queue_scraped_and_not_run(cluster: Stack, prom: str, head: str) -> str:
    """The cluster's Prometheus scrapes the queue's metrics as `head`'s submit wrote them
    (one job reserved, `head`'s wait); the file then rewritten by the command's own
    renderer as a pass `NOT_RUN_AFTER_S` + 60 s ago would have left it (what a watch
    that stopped leaves): DssQueueNotRun fires for the cluster, and one pass by hand
    (`scripts/job queue CLUSTER --run`) writes it anew and the alert stops firing.
    Returns the figure."""
    c = f'cluster="{CLUSTER}"'
    wait_for_prom(
        "one reserved job scraped",
        lambda: query(prom, f'max({JOBS_METRIC}{{{c},state="reserved"}}) == 1') or None,
        120,
    )
    assert query(prom, f'max({WAIT_METRIC}{{{c},run="{head}",state="reserved"}})'), head
    # The dashboard's queue panels, asked as Grafana would: each query answers.
    panels = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"] if "dss_queue" in t["expr"]]
    assert len(exprs) == 4, exprs
    for expr in exprs:
        assert [r for r in query(prom, expr) if r["metric"].get("cluster") == CLUSTER], expr
    path = shared(".dss", "metrics", file_name(CLUSTER))
    got = {s.name: s.value for f in text_string_to_metric_families(path.read_text())
           for s in f.samples if s.name in (PASS_METRIC, WAIT_METRIC)}  # fmt: skip
    since = got[PASS_METRIC] - got[WAIT_METRIC]
    old = time.time() - NOT_RUN_AFTER_S - 60
    text = queue_metrics(CLUSTER, [Waiter(head, "reserved", 1, since)], old)
    temp = path.with_name(f".{path.name}.test")  # the collector reads *.prom only
    temp.write_text(text)
    temp.replace(path)
    t0 = time.monotonic()
    fired = wait_for_prom(
        "DssQueueNotRun firing", lambda: firing(prom, "DssQueueNotRun", cluster=CLUSTER), 300
    )
    fire_s = time.monotonic() - t0
    assert len(fired) == 1, fired
    assert fired[0]["annotations"]["description"].startswith("1 job(s) waited"), fired
    t1 = time.monotonic()
    said = job_cli(cluster, "queue", CLUSTER, "--run")
    assert f"job {head} reserved: #1 on {CLUSTER}; " in said, said[-2000:]
    wait_for_prom(
        "DssQueueNotRun no longer firing",
        lambda: not firing(prom, "DssQueueNotRun", cluster=CLUSTER),
        300,
    )
    return (
        f"queue metrics scraped (1 reserved); DssQueueNotRun firing {fire_s:.0f} s after "
        f"a pass {NOT_RUN_AFTER_S // 60 + 1} min old was written, cleared "
        f"{time.monotonic() - t1:.0f} s after `job queue --run` began"
    )


def test_two_jobs_share_four_hosts(cluster: Stack, code: Path, report: dict[str, str]) -> None:
    """Two jobs of 4 nodes x 4 GPUs at once are planned on the master host and the next
    three (8 GPUs each: best fit, ties by the hosts' order), none of their tasks on the
    spare: both train in services of their own, Prometheus scrapes each one's 4 ranks
    under its run, `list` shows both and `gpus` the hosts they fill; a third such job is
    planned on the free lab-h5..h8 and trains beside them, the pair untouched; a fourth
    asking for more than is free is queued at the head, reserved, naming the hosts free
    and the holders, holding no GPU and no service, its queue metrics scraped, and
    DssQueueNotRun firing on a pass 11 min old until a pass by hand, and removed, the
    queue's metrics saying none waits; stopping one of the
    pair leaves the other's services untouched and training, and the cluster a no-op."""
    pair = [f"{JOB}-x", f"{JOB}-y"]
    third = f"{JOB}-z"
    for name in [*pair, third]:
        for sub in ("checkpoints", "logs", ".dss"):
            shutil.rmtree(shared(sub, name), ignore_errors=True)
    t0 = time.monotonic()
    try:
        for name in pair:
            job_cli(cluster, "submit", str(code), "--name", name, "--cluster", CLUSTER,
                    "--nodes", "4", "--gpus-per-node", "4", "--steps", "100000")  # fmt: skip
        for name in pair:
            wait_for(f"{name}'s first step", _logged(name), 900, 2)
            svcs = training_service_names(name)
            assert placed(*svcs) == TRAINING_HOSTS[:4], _placement_story(*svcs)
        took = time.monotonic() - t0
        prom = cluster.outputs()["prometheusAddress"]
        for name in pair:
            wait_for_prom(f"{name}'s 4 ranks up", _ranks_up(prom, name, 4), 300)
        rows = {r.split()[0]: r.split() for r in job_cli(cluster, "list").splitlines()[1:]}
        assert all(rows[n][2] == "running" for n in pair), rows
        # `gpus` says the same from the leader: lab-h1..h4 full, each held by both masters
        # or both workers; the other hosts and the spare free.
        free = {r.split()[0]: r for r in job_cli(cluster, "gpus", CLUSTER).splitlines()[1:]}
        assert sorted(free) == sorted([*TRAINING_HOSTS, SPARE]), free
        for host in TRAINING_HOSTS[:4]:
            assert "0 of 8" in free[host] and all(f"job {n}: 4" in free[host] for n in pair)
        for host in [*TRAINING_HOSTS[4:], SPARE]:
            assert free[host].split()[-4:] == ["8", "of", "8", "-"], free[host]
        assert free[SPARE].split()[1] == "spare", free[SPARE]
        beside = _third_beside_the_pair(cluster, code, pair, third, prom)
        kept, stopped = pair[1], pair[0]
        versions = {n: v for n, v in service_versions().items() if n.startswith(kept)}
        # Each job's own standby on the spare keeps the spare last (services.py).
        assert sorted(versions) == sorted([*training_service_names(kept), job_standby_name(kept)])
        job_cli(cluster, "stop", stopped)
        gone = {*training_service_names(stopped), job_standby_name(stopped)}
        assert not gone & set(service_versions())
        after = max(logged_steps(kept))
        wait_for(f"{kept} past step {after}", lambda: max(logged_steps(kept)) > after + 2, 300, 2)
        assert {n: v for n, v in service_versions().items() if n.startswith(kept)} == versions
        assert any(shared("checkpoints", stopped).iterdir()), "the stopped job's checkpoints"
    finally:
        for name in [*pair, third, FOURTH]:
            if command.stack_file(name).exists():
                job_cli(cluster, "remove", name)
    cluster.pulumi("preview", "--expect-no-changes")
    report["figure"] = (
        f"both on lab-h1..h4, 4 ranks each scraped, first steps {took:.0f} s; {beside}; "
        "one stopped, the other trained on untouched"
    )
    report["command"] = (
        f"scripts/job submit DIR --name {pair[0]} --cluster {CLUSTER} --nodes 4 "
        f"--gpus-per-node 4; the same for {pair[1]} and {third}; the same for {JOB}-w with "
        f"--nodes 5; scripts/job stop {pair[0]}"
    )
