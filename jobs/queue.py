"""The cluster's queue as the job command reads and decides it: the entries on the
leader (infra/providers/queue.py), one admission pass over them (infra/admission.py),
the verdicts written back into the entries' labels, and what `job queue` and `job list`
print of them (docs/design/sharing.md, 3.3 and 3.5).

A pass is made under the cluster's submit lock (jobs/lock.py), by `scripts/job submit`
(for the job it submits, beside the entries) and by `scripts/job queue CLUSTER --run`
(jobs/queuerun.py). What holds GPUs is what the leader's tasks hold (infra/providers/
fit.py); every waiting job is an entry, and the head's reservation is the entry whose
state is `reserved` (its `hosts` and `before` labels), so the next pass keeps it.
Nothing here starts a job: the caller runs the job's `up`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.admission import Admission, Reservation, Running, Waiting, admit, queue_order
from infra.config import ConfigError, StackConfig
from infra.config.rules.placement import host_slots
from infra.placement import Ask
from infra.providers.fit import SwarmGpus
from infra.providers.hostops import HostError
from infra.providers.queue import RESERVED_BEFORE, Entry, entry_name, list_entries, set_labels
from jobs.table import JobRow, gpus, unread_row

QUEUE_HEADER = (
    f"{'POS':>3} {'JOB':<20} {'PRIO':>4} {'WAITED':>7} {'ASK':<14} {'STATE':<9} HOSTS OR REASON"
)


def revision(root: Path) -> str:
    """The project's git commit at `root` (empty: not a git checkout)."""
    proc = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def entry_ask(entry: Entry) -> Ask:
    """The ask an entry's `ask` label holds."""
    a = entry.ask
    model = a.get("gpu_model")
    return Ask(
        entry.job,
        int(a.get("nodes") or 1),
        int(a.get("gpus_per_node") or 0),
        None if model is None else str(model),
        tuple(a.get("hosts") or ()),
    )


def waiting(entries: Iterable[Entry]) -> list[Waiting]:
    """Every entry as a waiting job (its ask, priority and first submit)."""
    return [Waiting(entry_ask(e), e.priority, e.since) for e in entries]


def holders(swarm: SwarmGpus) -> list[Running]:
    """What holds GPUs now, per job (its hosts and the most it holds on one); a task of
    no job (a service made by hand) counts as a holder of its own name."""
    by_job: dict[str, dict[str, int]] = {}
    for host, held in swarm.held.items():
        for h in held:
            name = h.job or h.service
            hosts = by_job.setdefault(name, {})
            hosts[host] = hosts.get(host, 0) + h.gpus
    return [Running(job, tuple(hosts), max(hosts.values())) for job, hosts in by_job.items()]


def reservation(entries: Iterable[Entry]) -> Reservation | None:
    """The head's reservation the last pass left: the entry labelled `reserved`."""
    for e in entries:
        if e.state == "reserved" and e.hosts:
            before = frozenset(b for b in e.label(RESERVED_BEFORE).split(",") if b)
            return Reservation(e.job, e.hosts, before)
    return None


def admission(
    cluster: StackConfig,
    swarm: SwarmGpus,
    entries: Sequence[Entry],
    new: Waiting | None = None,
) -> Admission:
    """One pass over the entries (and `new`, a job being submitted that has no entry or
    whose entry it replaces), on `cluster`'s hosts as its leader reports `swarm`."""
    jobs = [w for w in waiting(entries) if new is None or w.name != new.name]
    down = [h.name for h in cluster.hosts if h.name not in swarm.capacity]
    return admit(
        host_slots(cluster),
        holders(swarm),
        [*jobs, *([new] if new else [])],
        reservation(entries),
        down,
    )


def verdict_labels(adm: Admission, job: str) -> dict[str, str | None]:
    """The labels job `job`'s entry gets from the pass: its state, position, reason and
    hosts (admitted: its placement; reserved: the reservation's, with `before`)."""
    v = adm.verdict(job)
    hosts: tuple[str, ...] = ()
    before: str | None = None
    if v.state == "admitted":
        hosts = adm.admitted[job].hosts
    elif v.state == "reserved" and adm.reservation is not None:
        hosts, before = adm.reservation.hosts, ",".join(sorted(adm.reservation.before))
    return {
        "state": v.state,
        "position": "" if v.position is None else str(v.position),
        "reason": v.reason,
        "hosts": ",".join(hosts),
        RESERVED_BEFORE: before,
    }


def record(api: Any, adm: Admission) -> None:
    """Write each verdict into its job's entry (a compare-and-swap per entry; a job
    with no entry, one just started, is passed by)."""
    for v in adm.verdicts:
        labels = verdict_labels(adm, v.job)

        def change(_e: Entry, new: dict[str, str | None] = labels) -> dict[str, str | None]:
            return new

        set_labels(api, v.job, change)


def waiting_words(job: str, cluster: str, state: str, position: int | None, reason: str) -> str:
    """`exp-c queued: #2 on lab-cluster; needs ...`: what submit and `job list` say."""
    place = f"#{position} on {cluster}; " if position is not None else f"on {cluster}; "
    return f"{job} {state}: {place}{reason}"


def _waited(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def ask_words(ask: Ask) -> str:
    """`2 x 4 fake-a`: nodes x GPUs per node, and the model when asked."""
    return f"{ask.nodes} x {ask.gpus_per_node}" + (f" {ask.gpu_model}" if ask.gpu_model else "")


def queue_lines(entries: Sequence[Entry], now: float | None = None) -> list[str]:
    """What `job queue CLUSTER` prints: the header and a row per entry, in queue order:
    its position (- once admitted), name, priority, time since its first submit, ask,
    state, and its hosts when admitted, else why it waits."""
    now = time.time() if now is None else now
    by_name = {e.job: e for e in entries}
    rows = [QUEUE_HEADER]
    for w in queue_order(waiting(entries)):
        e = by_name[w.name]
        pos = "-" if e.position is None else str(e.position)
        where = ", ".join(e.hosts) if e.state == "admitted" else e.reason or "-"
        rows.append(
            f"{pos:>3} {e.job:<20} {e.priority:>4} {_waited(now - e.since):>7} "
            f"{ask_words(w.ask):<14} {e.state:<9} {where}"
        )
    return rows


def entries_by_job(api: Any) -> Mapping[str, Entry]:
    return {e.job: e for e in list_entries(api)}


def queued_row(
    name: str,
    cfg: StackConfig,
    cache: dict[str, Mapping[str, Entry] | str],
    api_of: Callable[[StackConfig], Any],
    started: Callable[[], tuple[Mapping[str, Any] | None, str]] = lambda: (None, ""),
) -> JobRow:
    """`job list`'s row of a queued job (`training.queued`): its entry's state, and its
    place and reason under the table. `cache`: the entries per cluster read so far (or
    why they could not be read), so each cluster's leader is asked once. With no entry,
    `started()` is asked for the run record in the job's stack (None: none) and why it
    is not read now (jobs/record.py `listed_state`; the row is then `unread_row`'s): a
    pass from another checkout started the job (jobs/entryfile.py), so the row is its
    run's state and step, while this checkout's file still says queued."""
    cluster = cfg.cluster or ""
    if cluster not in cache:
        try:
            cache[cluster] = entries_by_job(api_of(cfg))
        except (ConfigError, HostError) as err:
            cache[cluster] = str(err)
    found = cache[cluster]
    step, unread = None, ""
    if isinstance(found, str):
        state, reason = "queued", found
    elif name not in found:
        run, unread = started()
        if run is not None:
            state, step = str(run.get("state") or "unknown"), run.get("step")
            reason = (
                "started by a pass from another checkout; its file here still says queued: "
                "submit it again here to take it over (on the hosts and through the manager "
                "its stack names: it is not moved)"
            )
        else:  # no run in its stack either: its entry was lost
            state = "queued"
            reason = (
                f"no entry {entry_name(name)} on the leader and no run in its stack; "
                "submit it again"
            )
    else:
        e = found[name]
        state = e.state
        reason = waiting_words(name, cluster, state, e.position, e.reason).split(": ", 1)[1]
    row = JobRow(name, cluster, state, step, None, gpus(cfg), reason)
    return unread_row(row, unread) if unread else row
