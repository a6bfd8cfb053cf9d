"""The cluster's queue (issue 47, C4 and C5), with the real engine on the 2-host dev lab
(2 hosts x 2 fake GPUs).

In order: job A (2 nodes x 2 GPUs) is submitted and trains; job B (2 x 2) is submitted
and waits: `submit` says its place and reason (the head, reserved on both hosts, held
now by A), its stack holds only its cluster reference and its queue entry (no service,
no launch: it holds no GPU), the entry is the Swarm config `dss-queue.<B>` on the
leader, `scripts/job list` reads `reserved` with the place and reason under the table
and `scripts/job queue CLUSTER` shows its row, and the queue's metrics file on the
shared data dir says one job reserved; A stopped (`scripts/job stop`), one pass by
hand (`scripts/job queue CLUSTER --run`) from another checkout at another revision
(without B's stack file) names B and leaves it waiting; with `--any-revision` the
pass there admits B and starts it with that checkout's program: its file written
from its entry, its code unpacked from the queue's code config, its file in the full
form planned on both hosts, its entry and code config gone, B training, and its next
preview there a no-op. With the submitter's queued file, untouched by that pass,
`job list --refresh` reads B's run from its stack, and B's submit from there takes it
over where it runs (no service updated, no relaunch). Then C is submitted behind B and
`scripts/job queue CLUSTER --watch` runs with no one acting, B's file removed here
(as on a machine whose pass did not start B): B ends its steps, the watch releases it
from its stack and starts C (the Swarm-service runner, C6, is not built). Last, a
job larger than the cluster (3 hosts of 2) is refused by `submit` and, its file
written by hand, by the engine's preview, naming the job and the shortfall. The tests
depend on this order (as tests/engine/test_jobs.py).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pulumi import automation as auto

from harness import ROOT
from harness.configs import dev_config
from harness.jobs import remove_job
from harness.lab import client, logged_steps, service_versions, shared
from harness.stack import Pulumi, Stack
from harness.waits import reap, stamp_lines, wait_for
from infra.config import stack_file_values, stack_file_yaml
from infra.config.models.job import Code
from infra.layout import PROJECT, training_service_names
from infra.providers.queue import entry_name
from infra.providers.queuecode import CODE_PREFIX, code_name
from infra.render.code import bundle
from infra.render.queuefile import file_name
from jobs import command
from jobs.jobfile import CARRIED_DIR
from jobs.queue import QUEUE_HEADER, revision
from jobs.record import read_record
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.engine

CLUSTER = "test-queue-cluster"
JOB_A = "test-queue-a"
JOB_B = "test-queue-b"
JOB_C = "test-queue-c"
B_STEPS = 60
"""B ends by itself (a few minutes on the lab), so the watch releases it for C."""
SECRET = "wandb-queue-5e2a18"
QUEUED_TYPES = {
    "pulumi:pulumi:Stack",
    "pulumi:providers:pulumi-python",
    "deepspeed-swarm:clusterref:ClusterRef",
    "pulumi:pulumi:StackReference",
    "pulumi:providers:pulumi",  # the default provider the stack reference reads through
    "pulumi:providers:docker",
    "deepspeed-swarm:queue:QueuedJob",
    "pulumi-python:dynamic:Resource",
}
"""Every resource type a queued job's state may hold: its cluster reference (a stack
reference and the leader's docker provider) and its entry; no service, no launch."""


@pytest.fixture(scope="module")
def cluster(lab: dict[str, Any], make_stack: MakeStack) -> Stack:
    """The dev lab as a cluster stack (no run of its own)."""
    config = dev_config(steps=100000, checkpoint_every=10)
    config[f"{PROJECT}:kind"] = "cluster"
    s = make_stack(CLUSTER, config, {"wandb_api_key": SECRET})
    s.pulumi("up", "--yes", "--skip-preview")
    return s


def spec(name: str, code: Path, steps: int = 100000) -> command.JobSpec:
    return command.JobSpec(name=name, cluster=CLUSTER, code_dir=code, steps=steps, nodes=2,
                           gpus_per_node=2)  # fmt: skip


def _cli(cluster: Stack, *args: str, timeout: int = 300, cwd: Path = ROOT) -> str:
    """`scripts/job <args>` as a person runs it in checkout `cwd`, with the cluster's
    backend and passphrase; what it printed (into the cluster's transcript too). It
    must exit 0."""
    proc = subprocess.run([str(cwd / "scripts" / "job"), *args], env=cluster.env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip
    cluster.record(proc.stdout, proc.stderr)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def entries(prefix: str = "dss-queue.") -> list[str]:
    """The queue entries on the leader (lab-h1), by name (or the configs of `prefix`)."""
    api: Any = client(1).api  # docker-py's low-level API is untyped
    return sorted(c["Spec"]["Name"] for c in api.configs(filters={"name": prefix}))


def carried() -> list[str]:
    """The code configs the queue carries on the leader, by name."""
    return entries(CODE_PREFIX)


@pytest.fixture(scope="module")
def elsewhere(cluster: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Another checkout of this project at another revision, as a watch on a manager
    host may be: this working tree's files committed in a repository of their
    own (the same program; only the revision differs), the same Python env, and the
    cluster's stack file (no job's). Removed afterwards."""
    dest = tmp_path_factory.mktemp("elsewhere") / "project"
    dest.mkdir()
    # Tracked files and new ones not ignored: the working tree as it would be committed.
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True,
                            check=True).stdout.split(b"\0")  # fmt: skip
    for name in (n.decode() for n in listed if n):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree: not there
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    who = ["-c", "user.name=dss-test", "-c", "user.email=dss-test@example.invalid"]
    for argv in (["init", "-q"], ["add", "-A"], [*who, "commit", "-q", "-m", "elsewhere"]):
        subprocess.run(["git", "-C", str(dest), *argv], check=True, capture_output=True)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    shutil.copy(cluster.config_file, dest / cluster.config_file.name)
    assert revision(dest) not in ("", revision(ROOT))
    yield dest
    shutil.rmtree(dest, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs(cluster: Stack, code: Path) -> Iterator[dict[str, list[str]]]:
    """A submitted and training, B submitted behind it; what each submit said. Both
    removed afterwards in any case."""
    said: dict[str, list[str]] = {JOB_A: [], JOB_B: []}
    try:
        command.submit(spec(JOB_A, code), env=cluster.env, out=said[JOB_A].append)
        wait_for("A's first steps", lambda: len(logged_steps(JOB_A)) >= 2, 600, 2)
        command.submit(spec(JOB_B, code, B_STEPS), env=cluster.env, out=said[JOB_B].append)
        yield said
    finally:
        for name in (JOB_B, JOB_A):
            remove_job(cluster, name, said[name].append)
        cluster.record(*said[JOB_A], *said[JOB_B])


def test_a_job_that_does_not_fit_is_queued_with_its_place(jobs: dict[str, list[str]]) -> None:
    """B's submit says it waits: the head, reserved on both hosts, A holding them."""
    assert jobs[JOB_B][-1] == (
        f"job {JOB_B} reserved: #1 on {CLUSTER}; needs 2 host(s) with 2 GPU(s); no host "
        f"free with 2 GPU(s); reserved lab-h1, lab-h2, held now by {JOB_A}"
    ), jobs[JOB_B][-5:]
    training = stack_file_values(command.stack_file(JOB_B).read_text())["training"]
    assert "queued" in training and "hosts" not in training, training


def test_the_queued_stack_holds_only_its_entry(cluster: Stack, jobs: dict[str, Any]) -> None:
    """B's state: its cluster reference and its entry, no service or launch; the entry
    is on the leader; no service of B exists."""
    deployment = command.workspace_stack(JOB_B, cluster.env).export_stack().deployment
    types = {str(r["type"]) for r in (deployment or {}).get("resources", [])}
    assert types <= QUEUED_TYPES and "deepspeed-swarm:queue:QueuedJob" in types, types
    assert entries() == [entry_name(JOB_B)]
    assert carried() == [code_name(JOB_B)], "its code, carried for another checkout"
    assert not set(training_service_names(JOB_B)) & set(service_versions())


def test_list_and_queue_show_where_it_stands(cluster: Stack, jobs: dict[str, Any]) -> None:
    """`job list`: B `reserved`, its place and reason under the table; `job queue`: its
    row, position 1, the reason naming A."""
    listed = _cli(cluster, "list").splitlines()
    row = next(line.split() for line in listed if line.startswith(JOB_B + " "))
    assert row[1:3] == [CLUSTER, "reserved"], listed
    assert f"{JOB_B} reserved: #1 on {CLUSTER}; needs 2 host(s)" in "\n".join(listed), listed
    table = _cli(cluster, "queue", CLUSTER).splitlines()
    assert table[0] == QUEUE_HEADER, table
    (mine,) = [line.split() for line in table[1:]]
    assert mine[:2] == ["1", JOB_B] and mine[4:7] == ["2", "x", "2"], table
    assert mine[7] == "reserved" and f"held now by {JOB_A}" in table[1], table


def test_the_queue_metrics_say_b_waits(jobs: dict[str, Any]) -> None:
    """B's submit wrote the queue's metrics file on the shared data dir, over SSH on the
    master host: one job reserved, none queued, B's wait and the head's."""
    text = shared(".dss", "metrics", file_name(CLUSTER)).read_text()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    c = ("cluster", CLUSTER)
    assert got[("dss_queue_jobs", (c, ("state", "reserved")))] == 1.0, text
    assert got[("dss_queue_jobs", (c, ("state", "queued")))] == 0.0, text
    wait = got[("dss_queue_wait_seconds", (c, ("run", JOB_B), ("state", "reserved")))]
    assert wait == got[("dss_queue_head_wait_seconds", (c,))], text


def test_a_pass_by_hand_starts_it_once_the_gpus_are_free(
    cluster: Stack, jobs: dict[str, Any], code: Path, elsewhere: Path
) -> None:
    """A stopped; `job queue --run` from another checkout, at another revision and
    without B's stack file (as on a machine B was not submitted from), names B with
    both revisions and leaves it waiting, its entry kept; with `--any-revision` it
    writes B's file from its entry, its code unpacked from the queue (B's code dir is
    outside the project), admits B and runs its `up` with that checkout's program: its
    file in the full form planned on both hosts, its entry and code config gone, B
    training, its next preview there a no-op."""
    code_digest = bundle(code, Code().exclude).digest
    _cli(cluster, "stop", JOB_A)
    jobs["submitted"] = command.stack_file(JOB_B).read_text()  # the submitter's queued file
    name = command.stack_file(JOB_B).name
    wanted, there = revision(ROOT)[:12], revision(elsewhere)[:12]
    waits = _cli(cluster, "queue", CLUSTER, "--run", cwd=elsewhere)
    refused = (f"job {JOB_B}: {name} is not in this checkout, and it was submitted from "
               f"revision {wanted} while this checkout is at {there}; it waits")  # fmt: skip
    assert refused in waits, waits[-3000:]
    assert entries() == [entry_name(JOB_B)] and not (elsewhere / name).exists()
    said = _cli(cluster, "queue", CLUSTER, "--run", "--any-revision", cwd=elsewhere, timeout=900)
    other = (f"submitted from revision {wanted}, started with this checkout's program at "
             f"{there}: --any-revision")  # fmt: skip
    wrote = (f"job {JOB_B}: {name} written from its queue entry ({other}, code {code_digest} "
             "carried by the queue)")  # fmt: skip
    assert wrote in said, said[-3000:]
    assert f"job {JOB_B}: admitted on lab-h1, lab-h2 ({other}); pulumi up" in said, said[-3000:]
    training = stack_file_values((elsewhere / name).read_text())["training"]
    assert "queued" not in training, training
    assert (training["hosts"], training["placement"]) == (["lab-h1", "lab-h2"], "planned")
    assert training["code"]["dir"] == str(elsewhere / CARRIED_DIR / JOB_B / code_digest)
    assert entries() == [] and carried() == []
    # The pass wrote the queue it left: empty.
    text = shared(".dss", "metrics", file_name(CLUSTER)).read_text()
    assert f'dss_queue_jobs{{cluster="{CLUSTER}",state="reserved"}} 0\n' in text, text
    wait_for("B's first steps", lambda: len(logged_steps(JOB_B)) >= 2, 600, 2)
    proc = Pulumi(JOB_B, env=cluster.env, cwd=elsewhere).run("preview", "--expect-no-changes")
    cluster.record(proc.stdout, proc.stderr)


def test_the_submitters_checkout_reads_and_takes_over_the_started_job(
    cluster: Stack, jobs: dict[str, Any], code: Path
) -> None:
    """The submitter's checkout still holds B's queued file, as submitted (the pass ran
    in another checkout and wrote nothing here): `job list --refresh` reads B's run
    from its stack (running, started elsewhere), and a submit of B from there takes it
    over: its file written in the full form on the hosts and
    through the manager B's state names, its `up` neither updating B's services nor
    relaunching its run."""
    assert command.stack_file(JOB_B).read_text() == jobs["submitted"]
    listed = _cli(cluster, "list", "--refresh").splitlines()
    row = next(line.split() for line in listed if line.startswith(JOB_B + " "))
    # B may end its 60 steps meanwhile: its services stay until a pass releases it.
    assert row[2] in ("running", "finished"), listed
    said = f"{JOB_B} {row[2]}: started by a pass from another checkout"
    assert said in "\n".join(listed), listed
    names = training_service_names(JOB_B)
    before = {n: v for n, v in service_versions().items() if n in names}
    record = read_record(command.workspace_stack(JOB_B, cluster.env)) or {}
    assert len(before) == 2 and "relaunches" in record, (before, record)
    took: list[str] = []
    command.submit(spec(JOB_B, code, B_STEPS), env=cluster.env, out=took.append)
    cluster.record(*took)
    took_over = (f"job {JOB_B}: started by a pass from another checkout on lab-h1, lab-h2 "
                 f"through manager lab-h1; {command.stack_file(JOB_B).name} written in its "
                 "full form from its stack")  # fmt: skip
    assert took_over in took, took[-20:]
    training = stack_file_values(command.stack_file(JOB_B).read_text())["training"]
    assert "queued" not in training, training
    assert (training["hosts"], training["placement"]) == (["lab-h1", "lab-h2"], "planned")
    assert {n: v for n, v in service_versions().items() if n in names} == before
    after = read_record(command.workspace_stack(JOB_B, cluster.env)) or {}
    assert after.get("relaunches") == record.get("relaunches"), (record, after)
    assert took[-1].split()[:4] in (
        ["job", f"{JOB_B}:", "run", "running"],
        ["job", f"{JOB_B}:", "run", "finished"],
    ), took[-3:]


def test_a_watch_releases_the_ended_run_and_starts_the_next_by_itself(
    cluster: Stack, jobs: dict[str, Any], code: Path
) -> None:
    """C submitted while B trains waits behind it; `scripts/job queue CLUSTER --watch`
    runs with no one acting, from a checkout without B's file (removed, as on a machine
    whose pass did not start B): once B finishes its steps, a pass releases it from
    its stack (its file written with its cluster and the verdict, its services gone,
    `job list` says finished) and starts C, which trains; its entry gone. SIGTERM ends
    the watch between passes, exit 0."""
    said: list[str] = []
    stamps: list[tuple[float, str]] = []
    command.stack_file(JOB_B).unlink()
    watch = subprocess.Popen(
        [str(ROOT / "scripts" / "job"), "queue", CLUSTER, "--watch", "--every", "5"],
        env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    reader = stamp_lines(watch, stamps)
    try:
        command.submit(spec(JOB_C, code), env=cluster.env, out=said.append)
        assert f"job {JOB_C} " in said[-1] and " #1 on " in said[-1], said[-3:]
        free = wait_for(
            "B released by the watch",
            lambda: next(
                (t for t, ln in stamps if ln == f"job {JOB_B}: released; its GPUs are free"), None
            ),
            900,
        )
        wait_for("C's first steps", lambda: len(logged_steps(JOB_C)) >= 1, 900, 1)
        first_step = time.time() - free
        b_file = stack_file_values(command.stack_file(JOB_B).read_text())
        released = b_file["training"]["released"]
        assert released["state"] == "finished" and released["step"] == B_STEPS, released
        assert (b_file["cluster"], set(b_file["training"])) == (CLUSTER, {"released"}), b_file
        assert b_file["manager"] == "lab-h1", "the manager B's state went through"
        assert not set(training_service_names(JOB_B)) & set(service_versions())
        listed = _cli(cluster, "list").splitlines()
        row = next(line.split() for line in listed if line.startswith(JOB_B + " "))
        assert row[2] == "finished", listed
        assert "queued" not in stack_file_values(command.stack_file(JOB_C).read_text())["training"]
        assert entries() == []
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(120) == 0, [ln for _, ln in stamps][-20:]
        reader.join(10)
        assert "the watch ends" in stamps[-1][1], stamps[-3:]
        print(f"C's first step {first_step:.0f} s after B's GPUs were free")
    finally:
        reap(watch)
        remove_job(cluster, JOB_C, said.append)
        cluster.record(*said, *(ln for _, ln in stamps))


def test_a_job_larger_than_the_cluster_is_refused_at_preview_by_name(
    cluster: Stack, code: Path
) -> None:
    """A job asking for more hosts than the cluster has (3 of 2): `scripts/job submit`
    refuses it (exit 2) naming the job and the shortfall, and writes nothing; its stack
    file written by hand (as a pull request would bring it), the engine's preview
    refuses it the same way before anything is registered, and no entry or service of
    it exists."""
    big = f"{JOB_A}-big"
    short = (
        f"training.nodes: job '{big}' needs 3 host(s) with 2 GPU(s); the cluster has 2 "
        "(lab-h1, lab-h2); allowed: at most 2 node(s)"
    )
    proc = subprocess.run(
        [str(ROOT / "scripts" / "job"), "submit", str(code), "--name", big, "--cluster",
         CLUSTER, "--nodes", "3", "--gpus-per-node", "2"],
        env=cluster.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    cluster.record(proc.stdout, proc.stderr)
    assert proc.returncode == 2 and short in proc.stderr, (proc.stdout, proc.stderr[-2000:])
    assert not command.stack_file(big).exists()
    training = {**spec(big, code).training(), "nodes": 3}
    raw = {"kind": "job", "cluster": CLUSTER, "training": training}
    command.stack_file(big).write_text(
        stack_file_yaml({f"{PROJECT}:{k}": v for k, v in raw.items()})
    )
    lines: list[str] = []
    try:
        stack = command.workspace_stack(big, cluster.env)
        with pytest.raises(auto.CommandError) as refused:
            stack.preview(on_output=lines.append, color="never")
        assert short in str(refused.value), str(refused.value)[-3000:]
        assert entry_name(big) not in entries()
        assert not set(training_service_names(big)) & set(service_versions())
    finally:
        command.stack_file(big).unlink(missing_ok=True)
        command.workspace_stack(big, cluster.env).workspace.remove_stack(big)
        cluster.record(*lines)
