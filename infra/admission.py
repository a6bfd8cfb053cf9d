"""Which waiting jobs a shared cluster admits now, and on which hosts (one pass).

docs/design/sharing.md, 3.3. The pass reads the hosts, what the running jobs hold and
the reservation the last pass left, and walks the waiting jobs in **order**: priority
descending, then `since` (first submit), then name.

- **Whole or nothing.** A job is admitted only where the planner (infra/placement.py)
  places all of it on GPUs free now; its GPUs then count as held for every job after
  it in the same pass, so no GPU is promised twice.
- **Never.** A job the cluster can never hold (the planner's `never`) is refused with
  the planner's message and skipped: it is no head, so it blocks no one.
- **The head** is the first job in order that does not fit. It is reserved on hosts H:
  its named hosts when it names them; else, of its candidates, the `nodes` hosts with
  the least of its need still held (`gpus_per_node` less what is free there, at least
  0), ties by the cluster's `hosts` order; a host that is down counts after every host
  that is up. H is kept from pass to pass while the same job is the head and H's hosts
  are still up candidates of its ask (a lost host, or a changed ask, plans it again),
  so the jobs it waits for are not reset. The reservation records those jobs (the ones
  holding GPUs on H when it was made, `before`); one that has ended leaves the record,
  so a later job of its name counts as after.
- **Backfill.** A job after the head is admitted only if, on every h in H, what it and
  every job admitted after the reservation hold stays within `count(h) -
  gpus_per_node(head)`: the planner sees, on h, at most that much less what those jobs
  hold. Hosts outside H are free to all (a head of one model leaves the other model's
  hosts to the jobs behind it). So GPUs on H given out after the reservation never cut
  into the head's need; the ones held before it (the reservation's `before`) are freed
  as their jobs end, and the head fits by the time the last of them ends, with no run
  time guessed. A higher priority passes the head and may become the head itself: the
  bound holds within a priority. A job admitted ahead of a kept head (a higher priority,
  not bound by it) counts as after it: the margin left to backfill only shrinks.

Pure, below config as infra/placement.py: the job command and the queue's runner feed
it what the cluster's leader reports and store the reservation it returns.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from infra.placement import Ask, HostSlot, Placement, candidates, plan

State = Literal["admitted", "reserved", "queued", "refused"]


@dataclass(frozen=True)
class Waiting:
    """A job waiting for GPUs: its ask, its priority (higher first) and `since`, when it
    was first submitted (a resubmit keeps it, so a job never loses its place)."""

    ask: Ask
    priority: int = 0
    since: float = 0.0

    @property
    def name(self) -> str:
        return self.ask.job


@dataclass(frozen=True)
class Running:
    """What a running job (or any other holder) holds: `gpus_per_node` on each host."""

    job: str
    hosts: tuple[str, ...]
    gpus_per_node: int


@dataclass(frozen=True)
class Reservation:
    """The head `job` reserved on `hosts`; `before`: the jobs that held GPUs on them
    when it was made (and still run). Every other holder there came after it, and what
    those hold is what backfill may not grow past the head's need."""

    job: str
    hosts: tuple[str, ...]
    before: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Verdict:
    """One waiting job after the pass: `position` among the jobs still waiting (1 is the
    head; None once admitted or refused) and why, in words."""

    job: str
    state: State
    position: int | None
    reason: str


@dataclass(frozen=True)
class Admission:
    """The pass's decision: the jobs admitted now (in order) with their placements, the
    head's reservation to keep for the next pass, and a verdict per waiting job."""

    admitted: Mapping[str, Placement]
    reservation: Reservation | None
    verdicts: tuple[Verdict, ...] = ()

    def verdict(self, job: str) -> Verdict:
        for v in self.verdicts:
            if v.job == job:
                return v
        raise KeyError(job)


def queue_order(waiting: Sequence[Waiting]) -> list[Waiting]:
    """Priority descending, then `since`, then name."""
    return sorted(waiting, key=lambda w: (-w.priority, w.since, w.name))


def reserve_hosts(hosts: Sequence[HostSlot], free: Mapping[str, int], ask: Ask) -> tuple[str, ...]:
    """The hosts H a head that does not fit is reserved on (the rule in the module's
    docstring), in `hosts` order; `free` as the planner's (a host missing is down)."""
    if ask.hosts:
        return ask.hosts

    def still_held(h: HostSlot) -> tuple[bool, int, int]:
        return (h.name not in free, max(0, ask.gpus_per_node - free.get(h.name, 0)), h.order)

    chosen = sorted(candidates(hosts, ask), key=still_held)[: ask.nodes]
    return tuple(h.name for h in sorted(chosen, key=lambda h: h.order))


def _holding(running: Running, host: str) -> int:
    return running.gpus_per_node if host in running.hosts else 0


class _Pass:
    """The state one pass changes as it walks the order: what is free, who holds what
    (the running jobs and the ones admitted so far), and the head's reservation."""

    def __init__(
        self,
        hosts: Sequence[HostSlot],
        running: Sequence[Running],
        reservation: Reservation | None,
        down: Collection[str],
    ) -> None:
        self.hosts = hosts
        self.count = {h.name: h.gpus for h in hosts}
        self.holders = {r.job: r for r in running}
        self.free = {
            h.name: max(0, h.gpus - sum(_holding(r, h.name) for r in running))
            for h in hosts
            if h.name not in down
        }
        # Its `before` less the jobs that ended (a later job of such a name is after it).
        self.carried = reservation and replace(
            reservation, before=reservation.before & self.holders.keys()
        )
        self.head: Waiting | None = None
        self.reservation: Reservation | None = None

    def take(self, job: Waiting, placement: Placement) -> None:
        for h in placement.hosts:
            self.free[h] -= job.ask.gpus_per_node
        self.holders[job.name] = Running(job.name, placement.hosts, job.ask.gpus_per_node)

    def held_on(self, hosts: Collection[str]) -> frozenset[str]:
        """The jobs holding GPUs on any of `hosts` now."""
        return frozenset(
            r.job for r in self.holders.values() if r.gpus_per_node and set(r.hosts) & set(hosts)
        )

    def make_head(self, job: Waiting) -> None:
        """Reserve for `job`, the first that does not fit: the carried reservation when it
        is this job's and its hosts still serve the ask, else hosts chosen afresh."""
        kept = self.carried
        if not (kept and kept.job == job.name and self._still_serves(kept.hosts, job.ask)):
            chosen = reserve_hosts(self.hosts, self.free, job.ask)
            kept = Reservation(job.name, chosen, self.held_on(chosen))
        self.head, self.reservation = job, kept

    def _still_serves(self, reserved: tuple[str, ...], ask: Ask) -> bool:
        if ask.hosts:
            return reserved == ask.hosts and all(h in self.free for h in reserved)
        can = {h.name for h in candidates(self.hosts, ask)}
        return len(reserved) == ask.nodes and all(h in can and h in self.free for h in reserved)

    def usable(self) -> dict[str, int]:
        """The GPUs the next job in order may be given: all that is free before the head;
        after it, on each reserved host, at most what keeps the head's need whole."""
        res = self.reservation
        if self.head is None or res is None:
            return self.free
        out = dict(self.free)
        need = self.head.ask.gpus_per_node
        after = [r for r in self.holders.values() if r.job not in res.before]
        for h in res.hosts:
            if h in out:
                budget = self.count[h] - need - sum(_holding(r, h) for r in after)
                out[h] = max(0, min(out[h], budget))
        return out


def _free_words(hosts: Sequence[HostSlot], free: Mapping[str, int], ask: Ask) -> str:
    """`2 host(s) free with 8 GPU(s) (lab-h1, lab-h2)`: the hosts that could take one of
    the job's tasks now (among its named ones when it names them)."""
    pool = ask.hosts or tuple(h.name for h in candidates(hosts, ask))
    ready = [h for h in pool if free.get(h, -1) >= ask.gpus_per_node]
    if not ready:
        return f"no host free with {ask.gpus_per_node} GPU(s)"
    return f"{len(ready)} host(s) free with {ask.gpus_per_node} GPU(s) ({', '.join(ready)})"


def _needs(ask: Ask) -> str:
    named = f" ({', '.join(ask.hosts)})" if ask.hosts else ""
    return f"needs {ask.words()}{named}"


def _waits(state: _Pass, job: Waiting) -> str:
    """Why `job` waits: its ask, the hosts free now, and either the hosts reserved for it
    (it is the head) and who holds them now, or the head ahead of it (which explains
    free hosts it may not take: they are the head's)."""
    res = state.reservation
    assert state.head is not None and res is not None  # the first job that waits is the head
    words = f"{_needs(job.ask)}; {_free_words(state.hosts, state.free, job.ask)}"
    reserved = ", ".join(res.hosts)
    if state.head.name != job.name:
        return f"{words}; ahead of it: {state.head.name} (reserved {reserved})"
    holders = state.held_on(res.hosts)
    return f"{words}; reserved {reserved}" + (
        f", held now by {', '.join(sorted(holders))}" if holders else ""
    )


def admit(
    hosts: Sequence[HostSlot],
    running: Sequence[Running],
    waiting: Sequence[Waiting],
    reservation: Reservation | None = None,
    down: Collection[str] = (),
) -> Admission:
    """One admission pass (the rules in the module's docstring). `running`: what holds
    GPUs now (admitted jobs whose tasks do not hold them yet included); `reservation`:
    the one the last pass returned, dropped unless its job still waits; `down`: hosts
    the leader does not report now (nothing is placed or kept free there)."""
    state = _Pass(hosts, running, reservation, down)
    admitted: dict[str, Placement] = {}
    decided: list[tuple[Waiting, State, str]] = []
    for job in queue_order(waiting):
        result = plan(hosts, state.usable(), job.ask)
        if isinstance(result, Placement):
            state.take(job, result)
            admitted[job.name] = result
            where = f"admitted on {', '.join(result.hosts)} (master {result.master})"
            decided.append((job, "admitted", where))
        elif result.never:
            decided.append((job, "refused", result.message))
        else:
            verdict: State = "reserved" if state.head is None else "queued"
            if state.head is None:
                state.make_head(job)
            decided.append((job, verdict, _waits(state, job)))
    verdicts, position = [], 0
    for job, verdict, reason in decided:
        waits = verdict in ("reserved", "queued")
        position += waits
        verdicts.append(Verdict(job.name, verdict, position if waits else None, reason))
    return Admission(admitted, state.reservation, tuple(verdicts))
