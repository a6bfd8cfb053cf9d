"""Release of ended runs: a job whose run has ended gives its GPUs back to the queue
(docs/design/sharing.md, C5).

A run that ends (finished, or failed: infra/render/verdict.py) keeps its services, and
so its GPUs, until someone stops it. The admission pass of `scripts/job queue CLUSTER
--run` (jobs/queuerun.py) therefore first looks at each job of the cluster whose
services hold GPUs now (as the leader's tasks say), reads its run record after a
refresh, as `scripts/job list --refresh` does (jobs/record.py `read_record`), and
releases each ended one: its stack file gains `training.released` with the verdict
(state, step, reason), and `up` makes the released form (the program's __main__.py):
the stack holds its cluster reference and exports the verdict as its `run` output;
its services, standby, launch and scrape are deleted (the launch's delete sends the
ranks its stop, harmless once the run has ended); its checkpoints and logs stay on the
data dir. `scripts/job list` then reads the verdict from the file. `scripts/job submit`
of the same job writes its file without the key: the full form again, resuming from
its newest checkpoint as a stopped job does.

A released job whose services still hold GPUs (its released `up` failed part way, or
its file was put back by hand) gets the released form's `up` again, with no refresh:
its verdict is in its file. A failed refresh or `up` is said, naming the job, and the
pass goes on: the job keeps its GPUs until a later pass releases it. A queued job holds
no GPU, and a CPU job none to give back: neither is looked at.

A job started by a pass from another checkout (jobs/entryfile.py) is released too: the
jobs looked at are those the leader's tasks name, not only those whose files are here.
Its file here may still be queued (the submitter's: the mark is dropped; a job whose
entry is still in the queue is not looked at, its tasks left by a failed start) or missing
(another watch's checkout: its released file names its cluster, the manager its state
went through and the verdict, the rest is the cluster's defaults, and its stack must
already be in this state backend).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi import automation as auto

from infra.config import ConfigError, StackConfig
from infra.providers.fit import SwarmGpus
from jobs import command
from jobs.record import read_state, run_record, state_manager
from jobs.repoint import moved_job
from jobs.table import failure_words

ENDED = ("finished", "failed")
"""The run states that are an end (infra/render/verdict.py): `stalled` and `unknown`
are not, a stalled run's `up` relaunches it."""


@dataclass(frozen=True)
class ReleasePass:
    """What one release step did: the jobs released, and per job that could not be,
    the line saying why (its refresh or `up` failed)."""

    jobs: tuple[str, ...] = ()
    problems: Mapping[str, str] = field(default_factory=dict)


def verdict_of(run: Mapping[str, Any]) -> dict[str, Any]:
    """`training.released` for a run record (`state`, `step`, `reason`): its step a
    whole number (the state may hold it as a float), or none."""
    step = run.get("step")
    return {
        "state": str(run["state"]),
        "step": int(step) if isinstance(step, int | float) else None,
        "reason": str(run.get("reason") or ""),
    }


def released_values(values: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """Job stack file values `values` in the released form: `training.released` the
    verdict of run record `run`, every other key kept (its hosts too: a planned job is
    planned afresh by its next submit, as a stopped one; its manager)."""
    training = {**dict(values.get("training") or {}), "released": verdict_of(run)}
    return command.job_values(values.get("cluster"), training, values.get("manager"))


def ended_run(stack: Any) -> tuple[dict[str, Any] | None, Mapping[str, Any] | None]:
    """Job stack `stack`'s run record after a refresh when its run has ended, else None;
    and the state it was read from."""
    deployment = read_state(stack, refresh=True)
    run = run_record(deployment) or {}
    return (run if run.get("state") in ENDED else None), deployment


def values_here(
    values: Mapping[str, Any] | None, cluster: str, manager: str | None = None
) -> dict[str, Any]:
    """The stack file values a job of cluster `cluster` holding GPUs is released from,
    its file's being `values` (None: none here): those without the `queued` mark (a
    file still queued while its job holds GPUs: a pass from another checkout started
    it, from its entry); with none, its cluster, the `manager` its state went through
    (its released `up` goes through it too: the first may be the one lost) and no
    `training` key of its own (the released form needs none; its next submit writes
    them)."""
    if values is None:
        return command.job_values(cluster, {}, manager)
    training = {k: v for k, v in dict(values.get("training") or {}).items() if k != "queued"}
    return command.job_values(values.get("cluster"), training, values.get("manager"))


def release(
    job: str,
    cluster: str,
    env: Mapping[str, str] | None = None,
    out: command.Printer = print,
    way: StackConfig | None = None,
) -> bool:
    """Release job `job` of cluster `cluster`, which holds GPUs, if its run has ended
    (module doc): its file in the released form, then its `up`. False: its run has not
    ended. Its file may be queued or missing here (`values_here`); with none, its stack
    must be in this backend already (auto.StackNotFoundError: it is not; none is made).
    A released file is kept when the `up` fails (the next pass runs it again), and the
    error raised. `way`: the cluster as the pass reached it; a job whose manager does not
    answer first moves to the one that does (jobs/repoint.py: its refresh and `up` go
    through it)."""
    # Read before any engine call: the engine may write a file holding only the
    # encryption salt for a stack selected with no file here (`file_values`: none).
    values = command.file_values(job)
    cfg = command.parsed(job, values) if values is not None else None
    verdict = cfg.training.released if cfg is not None else None
    here = values is not None
    stack = command.workspace_stack(job, env) if here else command.existing_stack(job, env)
    moved = moved_job(stack, job, way, out)
    if verdict is None:
        run, deployment = ended_run(stack)
        if run is None:
            return False
        if moved is not None and values is not None:
            values = {**values, "manager": moved}
        manager = None if here else state_manager(deployment, job)
        command.write_values(job, released_values(values_here(values, cluster, manager), run))
        said = verdict_of(run)
        ended = f"job {job}: run {said['state']} at step {said['step']}"
        out(f"{ended}; released: its services, standby and launch go, its checkpoints "
            "and logs stay; pulumi up")  # fmt: skip
    else:
        out(f"job {job}: released ({verdict.state}), but its services still hold GPUs; "
            "pulumi up of its released form again")  # fmt: skip
    stack.up(on_output=out, color="never")
    out(f"job {job}: released; its GPUs are free")
    return True


def release_ended(
    cluster: str,
    swarm: SwarmGpus,
    env: Mapping[str, str] | None = None,
    out: command.Printer = print,
    waiting: Collection[str] = (),
    way: StackConfig | None = None,
) -> ReleasePass:
    """Release every ended run of cluster `cluster`'s jobs whose services hold GPUs in
    `swarm` (the leader's answer), in name order, but those `waiting` (their entries
    are in the queue: tasks of one are left by a failed start, not its run); one job's
    failure is said in the result and the others go on. `way`: as `release` says."""
    done: list[str] = []
    problems: dict[str, str] = {}
    for job in (j for j in holding_jobs(swarm) if j not in waiting):
        try:
            if release(job, cluster, env, out, way):
                done.append(job)
        except auto.StackNotFoundError:
            problems[job] = (f"job {job}: not released: it holds GPUs on {cluster}, but its "
                             "stack is not in this state backend and its file not in this "
                             "checkout; allowed: a pass with the backend it was started "
                             "with")  # fmt: skip
        except (ConfigError, auto.CommandError, OSError) as err:
            problems[job] = f"job {job}: not released: {failure_words(err)}"
    return ReleasePass(tuple(done), problems)


def holding_jobs(swarm: SwarmGpus) -> list[str]:
    """The jobs whose services hold GPUs in `swarm` (a cluster's leader's answer: their
    services' job label), in name order: those whose files are here, and those started
    from another checkout (jobs/entryfile.py)."""
    return sorted({h.job for holders in swarm.held.values() for h in holders if h.job})
