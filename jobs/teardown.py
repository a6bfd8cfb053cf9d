"""`scripts/job stop NAME` and `scripts/job remove NAME`: a job's resources destroyed
(its run checkpoints on SIGTERM first), and with `remove` its stack and stack file too;
a job that waited leaves its cluster's queue, whose metrics are written again when no
job waits any more (docs/jobs.md, "The job command").

They act on the job's stack in the state backend, so they work from any checkout with
its file, the submitter's or the one whose pass started it. Apart from jobs/command.py,
which they call through (the tests' fakes of its engine and leader are theirs too).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping

from infra.config import ConfigError, StackConfig
from infra.providers.queue import list_entries
from infra.providers.reach import last_line
from jobs import command
from jobs.queuemetrics import publish, waiters
from jobs.record import state_cluster
from jobs.repoint import moved_job


def stop(name: str, env: Mapping[str, str] | None = None, out: command.Printer = print) -> None:
    """Destroy the job's resources: its launch stops the run (the ranks checkpoint on
    SIGTERM), then its services go. Its stack, stack file, checkpoints and logs stay,
    so `submit` again resumes it. A queued job leaves its cluster's queue (its entry
    goes), whose metrics are then written again (`left_queue`). A job whose manager
    does not answer is first moved to the one that does (jobs/repoint.py), also from a
    checkout without its file: its cluster is then the one its state references."""
    cfg = _settings(name)
    waited = cfg.cluster if cfg is not None and cfg.queued else None
    stack = command.workspace_stack(name, env)
    # With no file here, its cluster is the one its state references; that export is
    # the one the move reads.
    exported = None
    cluster = cfg.cluster if cfg is not None else None
    if cfg is None:
        exported = stack.export_stack()
        cluster = state_cluster(exported.deployment, name)
    moved_job(stack, name, _reached(cluster, out), out, exported)
    stack.destroy(on_output=out, color="never")
    out(f"job {name}: stopped; its checkpoints and logs stay on the data dir")
    if waited is not None:
        left_queue(waited, out)


def _settings(name: str) -> StackConfig | None:
    """Job `name`'s settings from its file here; None: no file (or one holding only the
    encryption salt), or one that is refused (its stop goes on all the same: its state
    says what to destroy)."""
    try:
        values = command.file_values(name)
        return command.parsed(name, values) if values is not None else None
    except (ConfigError, OSError):
        return None


def _reached(cluster: str | None, out: command.Printer) -> StackConfig | None:
    """Cluster stack `cluster` through the first manager that answers; None: no
    cluster, or no manager answers (the destroy then fails on the job's own manager,
    naming it), or its file here is refused."""
    if cluster is None:
        return None
    try:
        return command.cluster_reached(cluster, out)
    except ConfigError:
        return None


def left_queue(cluster: str, out: command.Printer) -> None:
    """Cluster `cluster`'s queue metrics written again after a waiting job left it,
    when no job waits any more. Else they say one waits until the next pass, and with
    no watch running DssQueueNotRun fires for a job that is gone. While others wait
    the file is left to the next pass: written now it would date a pass that did not
    run, and put off the alert that is right for them. Not under the submit lock: a
    watch's next pass writes what it sees anyway. A failure is said; the stop stands."""
    try:
        cfg = command.cluster_reached(cluster)
        entries = list_entries(command.leader_api(cfg))
    except Exception as e:  # no manager, the leader's API: said; the stop is done already
        why = e.problems[-1] if isinstance(e, ConfigError) else last_line(e)
        out(f"cluster {cluster}: queue metrics not written: {why}")
        return
    if not waiters(entries):
        publish(cfg, cluster, entries, out)


def remove(name: str, env: Mapping[str, str] | None = None, out: command.Printer = print) -> None:
    """Stop the job, then remove its stack and its stack file."""
    stop(name, env, out)
    stack = command.workspace_stack(name, env)
    stack.workspace.remove_stack(name)
    command.stack_file(name).unlink(missing_ok=True)
    shutil.rmtree(command.carried_code(name), ignore_errors=True)  # a queue pass's unpacked copy
    with contextlib.suppress(OSError):  # the dir of every job's copies, when none is left
        command.carried_code(name).parent.rmdir()
    out(f"job {name}: stack and {command.stack_file(name).name} removed")
