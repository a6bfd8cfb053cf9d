"""A user's own DeepSpeed script as a job on the 9-host lab's cluster (issue 44): the
tutorial-shaped example (examples/deepspeed-tutorial), copied unmodified, submitted
with `scripts/job submit DIR -- deepspeed train.py --deepspeed --deepspeed_config
ds_config.json ...` on 4 of the eight training hosts; a worker host's link cut mid-run,
Swarm moves its task to the spare and the run follows it by itself (the cluster's
`training.recovery.follow_moves`): the script's own `load_checkpoint` resumes from the
newest `save_checkpoint` in the job's checkpoint dir, with no `pulumi up`, and the
job's preview is a no-op after. Then the queue with no one acting (issue 47): a job
queued behind a short run of the tutorial on the same two hosts is started by
`scripts/job queue CLUSTER --watch` once that run ends and is released. Each test
records a row of the table `scripts/acceptance` prints (tests/acceptance/report.py).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.configs import lab8_config
from harness.jobs import remove_job
from harness.lab import (
    host_index,
    launcher_log_since,
    launcher_log_size,
    restart_events,
    service_versions,
    shared,
    tasks_of,
)
from harness.stack import Pulumi, Stack
from harness.waits import reap, stamp_lines, wait_for
from infra.layout import training_service_names
from tests.acceptance.conftest import (
    EXAMPLE,
    JOB_SCRIPT,
    TUTORIAL_COMMAND,
    TUTORIAL_SAVE_EVERY,
    TUTORIAL_STEP,
    job_cli,
    job_cluster,
    tutorial_copy,
    tutorial_steps,
)
from tests.engine.conftest import MakeStack

pytestmark = [pytest.mark.acceptance, pytest.mark.engine]

CLUSTER = "test-lab8-script-cluster"
JOB = "test-lab8-tutorial"
SAVE_EVERY = TUTORIAL_SAVE_EVERY
SCRIPT = JOB_SCRIPT
SPARE = "lab-h9"
"""The lab8 config's spare (Pulumi.lab8.yaml)."""
COMMAND = TUTORIAL_COMMAND
_STEP = TUTORIAL_STEP
_RESUMED = re.compile(r"resumed at step (\d+) from ")


@pytest.fixture(scope="module")
def cluster(lab9: dict[str, Any], make_stack: MakeStack) -> Iterator[Stack]:
    """The lab8 config as a cluster stack, up; the job removed afterwards in any case."""
    with job_cluster(make_stack, CLUSTER, lab8_config(), JOB) as s:
        yield s


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, copied as it is into a code dir of its own."""
    return tutorial_copy(tmp_path_factory)


def steps_since(offset: int) -> list[int]:
    """The steps rank 0 printed (`step N loss X`, every 10) in the launcher log since
    `offset`."""
    return [int(m) for m in _STEP.findall(launcher_log_since(JOB, offset))]


def newest_tag() -> int | None:
    """The step of the newest checkpoint DeepSpeed's `save_checkpoint` completed in the
    job's checkpoint dir (`latest` names it; written after the tag's files)."""
    latest = shared("checkpoints", JOB, "latest")
    if not latest.exists():
        return None
    m = re.fullmatch(r"global_step(\d+)", latest.read_text().strip())
    return int(m.group(1)) if m else None


def test_tutorial_resumes_from_its_own_checkpoint_after_a_host_loss(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """The tutorial trains across 4 hosts as a job; a worker host (not a manager) is cut
    after a checkpoint: the job's task moves to the spare and the run restarts by itself
    from the script's newest `save_checkpoint` (at most one save interval lost), trains
    on, and the job's preview is a no-op during the loss and after it."""
    t0 = time.monotonic()
    job_cli(cluster, "submit", str(code), "--name", JOB, "--cluster", CLUSTER,
            "--nodes", "4", "--gpus-per-node", "1", "--", *COMMAND)  # fmt: skip
    job = Pulumi(JOB, env=cluster.env)

    def outputs() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(job.run("stack", "output", "--json").stdout)
        return doc

    try:
        wait_for("the tutorial's first step", lambda: steps_since(0) or None, 900, 2)
        first = time.monotonic() - t0
        rank_map = outputs()["rankMap"]
        assert len({e["node"] for e in rank_map}) == 4, rank_map
        assert code.joinpath("train.py").read_bytes() == EXAMPLE.joinpath("train.py").read_bytes()
        ckpt = wait_for("a save_checkpoint", newest_tag, 600)
        wait_for("a step past it", lambda: max(steps_since(0)) > ckpt, 300)
        lost = next(e["node"] for e in rank_map if host_index(e["node"]) > 3)  # not a manager
        i, worker = host_index(lost), training_service_names(JOB)[1]
        offset, seen = launcher_log_size(JOB), len(restart_events(JOB))
        subprocess.run(["ip", "link", "set", f"dssl{i}", "down"], check=True)
        t_loss = time.monotonic()
        before = max(steps_since(0))
        try:
            wait_for(f"{worker} running on {SPARE}",
                     lambda: (SPARE, "Running") in tasks_of(worker), 240)  # fmt: skip
            moved = time.monotonic() - t_loss
            m = wait_for(
                "the script's resume line",
                lambda: _RESUMED.search(launcher_log_since(JOB, offset)),
                600,
            )
            resumed = int(m.group(1))
            wait_for(
                "a step after the resume",
                lambda: max(steps_since(offset), default=0) > resumed,
                600,
            )
            to_step = time.monotonic() - t_loss
            # The host is still lost: the job's state describes the run, which runs.
            job.run("preview", "--expect-no-changes")
        finally:
            subprocess.run(["ip", "link", "set", f"dssl{i}", "up"], check=True)
        assert resumed >= ckpt, f"resumed at {resumed}, older than the checkpoint {ckpt}"
        assert before - resumed <= SAVE_EVERY, f"resumed at {resumed}, cut at {before}"
        moves = [e for e in restart_events(JOB)[seen:] if e["event"] == "hostfile"]
        assert moves, f"restarts.jsonl: {restart_events(JOB)}"
        job.run("preview", "--expect-no-changes")
        run = outputs()["run"]
        assert run["state"] == "running", run
    finally:
        remove_job(cluster, JOB)
    report["figure"] = (
        f"4 x 1 on {', '.join(sorted({e['node'] for e in rank_map}))}, first step {first:.0f} s; "
        f"{lost} cut at step {before}: task on {SPARE} {moved:.0f} s after the loss, resumed "
        f"at step {resumed} from the script's own checkpoint, next step {to_step:.0f} s after "
        "the loss; preview no-op during and after"
    )
    report["command"] = (
        f"scripts/job submit examples/deepspeed-tutorial --name {JOB} --cluster {CLUSTER} "
        f"--nodes 4 --gpus-per-node 1 -- {' '.join(COMMAND)}; ip link set dssl{i} down"
    )


def test_a_queued_job_starts_by_itself_when_the_one_before_it_ends(
    cluster: Stack, code: Path, report: dict[str, str]
) -> None:
    """X (the tutorial, 2 x 8 on lab-h5 and lab-h6, a short run) holds every GPU there;
    Y (2 x 1, named on the same hosts) is queued behind it, holding nothing. With
    `scripts/job queue CLUSTER --watch` running and no one acting, X ends `finished`:
    a pass releases it (its services go, its verdict stays in `job list`) and starts Y,
    which trains. Reports the time from X's GPUs free to Y's first step."""
    x, y = f"{JOB}-x", f"{JOB}-y"
    hosts = "lab-h5,lab-h6"
    for name in (x, y):
        for sub in ("checkpoints", "logs", ".dss"):
            shutil.rmtree(shared(sub, name), ignore_errors=True)
    short = [*COMMAND[:5], "--steps", "20", "--save_interval", "10"]
    stamps: list[tuple[float, str]] = []
    watch: subprocess.Popen[str] | None = None
    t0 = time.monotonic()
    try:
        job_cli(cluster, "submit", str(code), "--name", x, "--cluster", CLUSTER, "--hosts", hosts,
                "--gpus-per-node", "8", "--", *short)  # fmt: skip
        said = job_cli(cluster, "submit", str(code), "--name", y, "--cluster", CLUSTER,
                       "--hosts", hosts, "--gpus-per-node", "1", "--", *COMMAND)  # fmt: skip
        assert f"job {y} reserved: #1 on {CLUSTER}; " in said and f"held now by {x}" in said, said
        watch = subprocess.Popen(
            [SCRIPT, "queue", CLUSTER, "--watch", "--every", "5"], env=cluster.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        stamp_lines(watch, stamps)
        freed = f"job {x}: released; its GPUs are free"
        free = wait_for(
            f"{x} released by the watch",
            lambda: next((t for t, line in stamps if line == freed), None),
            1200,
        )
        wait_for(f"{y}'s first step", lambda: tutorial_steps(y) or None, 900, 1)
        to_step = time.time() - free
        listed = job_cli(cluster, "list").splitlines()
        row = next(line.split() for line in listed if line.startswith(x + " "))
        assert row[2] == "finished", listed
        assert not [n for n in service_versions() if n.startswith(x + "-")], service_versions()
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(300) == 0, [line for _, line in stamps][-20:]
    finally:
        if watch is not None:
            reap(watch)
        cluster.record(*(line for _, line in stamps))
        for name in (y, x):
            remove_job(cluster, name)
    report["figure"] = (
        f"{y} queued behind {x} on {hosts}; {x} finished and released by the watch, "
        f"{y}'s first step {to_step:.0f} s after {x}'s GPUs were free "
        f"({time.monotonic() - t0:.0f} s in all)"
    )
    report["command"] = (
        f"scripts/job submit DIR --name {x} --hosts {hosts} --gpus-per-node 8 -- ...; the same "
        f"for {y} with --gpus-per-node 1; scripts/job queue {CLUSTER} --watch --every 5"
    )
