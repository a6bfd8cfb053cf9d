"""`scripts/job queue CLUSTER [--run]`: the cluster's queue, and one admission pass by
hand from the submitter's checkout (docs/design/sharing.md, C4 and C5).

The pass (jobs/queue.py) runs under the cluster's submit lock, as a submit's does: it
reads the GPUs the leader's tasks hold, first releases the ended runs among their jobs
(jobs/release.py: each job's run record read after a refresh, an ended one's `up` in
the released form, which frees its GPUs), then reads every entry, admits what fits (in
order, whole or not at all, the head's reservation kept), writes each verdict into its
entry, and starts each admitted job by the `up` its submit would have run: its stack
file written without `training.queued`, with the pass's hosts, then `pulumi up` of its
stack in this checkout. The job's code dir must be here, at the revision it was
submitted from (the file records it); a job submitted from another checkout has its
file written from its entry first, when this checkout is at its revision and has its
code, in the project or carried by the queue (jobs/entryfile.py); else the job is
named and left waiting. `--any-revision` lets this checkout's program start a job
submitted from another revision (its file, here or written from its entry, validated
here), saying both revisions.
`--watch` makes the pass again and again (jobs/queuewatch.py); no runner service
starts a job by itself yet (C6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra.config import stack_file_values
from infra.placement import Placement
from infra.providers.queue import list_entries
from jobs import command, queuemetrics
from jobs.entryfile import CannotStart, other_revision, write_from_entry
from jobs.jobfile import full_values
from jobs.leader import quiet
from jobs.queue import admission, queue_lines, record, revision, waiting_words
from jobs.release import release_ended


def queue_table(cluster: str, out: command.Printer = quiet) -> list[str]:
    """What `job queue CLUSTER` prints, read from the entries on its leader; through
    `out`, the manager they were read through when the cluster's first does not answer."""
    return queue_lines(list_entries(command.leader_api(command.cluster_reached(cluster, out))))


@dataclass(frozen=True)
class Pass:
    """What one pass did: the jobs it released and started, and each other job's line
    (its place and reason while it waits; why it could not start from here or be
    released), keyed by job; `""`: the queue is empty. What it did as it went (each
    release and start, the engines' lines) went to the printer it was given."""

    released: tuple[str, ...]
    started: tuple[str, ...]
    standing: Mapping[str, str]
    manager: str | None = None
    """The manager the pass went through; None: the cluster's first."""


def _full_form(
    job: str, placement: Placement, manager: str | None, any_revision: bool
) -> tuple[str, str]:
    """Write job `job`'s stack file in its full form on `placement`, going through
    `manager` (None: the cluster's first; a queued job holds nothing made through the
    one it named before); the file's text as it was (to put back when the `up` fails),
    and the words for the revision it was submitted from when it is not this
    checkout's (`any_revision`: started all the same). CannotStart: not from this
    checkout."""
    path = command.stack_file(job)
    where = ", ".join(placement.hosts)
    text = path.read_text()
    values = stack_file_values(text)
    mark = dict(values.get("training") or {}).get("queued") or {}
    wanted, here = str(mark.get("revision") or ""), revision(path.parent)
    other = bool(wanted and here and wanted != here)
    if other and not any_revision:
        raise CannotStart(f"job {job}: admitted on {where}, but submitted from revision "
                          f"{wanted[:12]} and this checkout is at {here[:12]}; it waits; "
                          f"allowed: run the queue from a checkout at {wanted[:12]}, or "
                          "with --any-revision (this checkout's program starts it)")  # fmt: skip
    command.write_values(job, full_values(values, placement.hosts, manager))
    return text, f" ({other_revision(wanted, here)})" if other else ""


def start(
    job: str,
    placement: Placement,
    env: Mapping[str, str] | None,
    out: command.Printer,
    manager: str | None,
    any_revision: bool = False,
) -> None:
    """Start admitted job `job` through `manager` (the pass's; None: the cluster's
    first): its full form and `up` (module doc). CannotStart: not from this checkout. A
    failed `up` puts the queued file back and raises."""
    old, revised = _full_form(job, placement, manager, any_revision)
    through = f" through manager {manager}" if manager else ""
    out(f"job {job}: admitted on {', '.join(placement.hosts)}{revised}; pulumi up{through}")
    try:
        result = command.workspace_stack(job, env).up(on_output=out, color="never")
    except BaseException:
        command.stack_file(job).write_text(old)
        out(f"job {job}: its up failed; {command.stack_file(job).name} is queued again")
        raise
    run = {k: v.value for k, v in result.outputs.items()}.get("run", {})
    out(f"job {job}: run {run.get('state')} at step {run.get('step')}")


def queue_pass(
    cluster: str,
    env: Mapping[str, str] | None = None,
    out: command.Printer = print,
    way: command.Printer | None = None,
    prefer: str | None = None,
    any_revision: bool = False,
) -> Pass:
    """One pass over cluster `cluster`: release its ended runs, admit, start (module
    doc); what it did as it went through `out` (through `way`, when given, the line
    naming the manager it went through when not the cluster's first), the rest in the
    result. `prefer`: the manager asked first (jobs/leader.py `reached`).
    `any_revision`: a job submitted from another revision started here too.
    ConfigError: no manager answers, or the lock is not had; a failed start's error."""
    cfg = command.cluster_reached(cluster, way or out, prefer)
    standing: dict[str, str] = {}
    started: list[str] = []
    holder = command.holder_name(f"the queue of {cluster}")
    with command.cluster_lock(cfg, holder, out):
        swarm = command.leader_gpus(cfg)
        api = command.leader_api(cfg)
        # Under the lock no entry changes but by this pass: read once, for the release
        # (a waiting job is not released) and the admission.
        entries = list_entries(api)
        released = release_ended(cluster, swarm, env, out, {e.job for e in entries}, cfg)
        standing.update(released.problems)
        # What the released jobs held is free now: read again.
        adm = admission(cfg, command.leader_gpus(cfg) if released.jobs else swarm, entries)
        record(api, adm)
        for job, placement in adm.admitted.items():
            try:
                if command.file_values(job) is None:  # submitted from another checkout
                    out(write_from_entry(job, cluster, api, any_revision))
                start(job, placement, env, out, cfg.manager, any_revision)
                started.append(job)
            except CannotStart as why:
                standing[job] = str(why)
        queuemetrics.publish(cfg, cluster, list_entries(api), out)
    for v in adm.verdicts:
        if v.state != "admitted":
            standing[v.job] = f"job {waiting_words(v.job, cluster, v.state, v.position, v.reason)}"
    if not adm.verdicts:
        standing[""] = f"cluster {cluster}: no job waits"
    return Pass(released.jobs, tuple(started), standing, cfg.manager)


def run_queue(
    cluster: str,
    env: Mapping[str, str] | None = None,
    out: command.Printer = print,
    any_revision: bool = False,
) -> list[str]:
    """One pass (`queue_pass`), each job's standing said after it; the jobs started."""
    done = queue_pass(cluster, env, out, any_revision=any_revision)
    for line in done.standing.values():
        out(line)
    return list(done.started)
