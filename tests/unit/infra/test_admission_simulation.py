"""infra.admission over time: seeded random arrivals and job ends on a mixed cluster,
one admission pass a step, checking at every step that no host is promised more GPUs
than it has, that a job is admitted only whole, and that the head's wait is bounded
by the jobs that held its reserved hosts when it was reserved."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from infra.admission import Admission, Reservation, Running, Waiting, admit
from infra.placement import Ask, HostSlot, Shortfall, fits, plan

pytestmark = pytest.mark.unit

HOSTS = [
    *(HostSlot(f"a{i}", i, 8, "fake-a") for i in range(4)),
    *(HostSlot(f"b{i}", 4 + i, 4, "fake-b") for i in range(4)),
]
COUNT = {h.name: h.gpus for h in HOSTS}
BY_NAME = {h.name: h for h in HOSTS}


@dataclass
class Watch:
    """The head being timed: its reserved hosts and the jobs that held GPUs there when
    it was reserved (worked out here, not read from the module's reservation)."""

    job: str
    hosts: tuple[str, ...]
    waits_for: frozenset[str]


@dataclass
class Sim:
    """One run: the cluster's state between passes and what the checks have seen."""

    rng: random.Random
    running: dict[str, Running] = field(default_factory=dict)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    reservation: Reservation | None = None
    watch: Watch | None = None
    made: int = 0
    bounds_met: int = 0
    backfilled_on_h: int = 0

    def arrive(self, step: int) -> None:
        for _ in range(self.rng.choice((0, 0, 1, 1, 1, 2))):
            self.made += 1
            name = f"j{self.made:04d}"
            nodes = self.rng.choice((1, 1, 2, 2, 3, 4))
            model = self.rng.choice((None, "fake-a", "fake-a", "fake-b"))
            named: tuple[str, ...] = ()
            if self.rng.random() < 0.1:  # some name hosts, a few of them wrongly (never)
                named = tuple(self.rng.sample([h.name for h in HOSTS], nodes))
            ask = Ask(name, nodes, self.rng.choice((1, 2, 4, 4, 8)), model, named)
            self.waiting[name] = Waiting(ask, self.rng.choice((0,) * 8 + (1,)), float(step))

    def end_some(self) -> None:
        for name in sorted(self.running):
            if self.rng.random() < 0.1:
                del self.running[name]

    def key(self, name: str) -> tuple[int, float, str]:
        w = self.waiting[name]
        return (-w.priority, w.since, name)


def check_whole(sim: Sim, result: Admission) -> None:
    """Every admitted job was waiting, got `nodes` distinct hosts that can carry it (its
    named ones when it names them), and no host holds more than its count after."""
    for name, placement in result.admitted.items():
        ask = sim.waiting[name].ask
        assert len(set(placement.hosts)) == len(placement.hosts) == ask.nodes, name
        assert placement.master == placement.hosts[0], name
        assert all(fits(BY_NAME[h], ask) for h in placement.hosts), name
        assert not ask.hosts or placement.hosts == ask.hosts, name
    held = {h: sum(r.gpus_per_node for r in sim.running.values() if h in r.hosts) for h in COUNT}
    for name, placement in result.admitted.items():
        for h in placement.hosts:
            held[h] += sim.waiting[name].ask.gpus_per_node
    over = {h: n for h, n in held.items() if n > COUNT[h]}
    assert not over, f"hosts promised more GPUs than they have: {over}"


def check_refused(sim: Sim, result: Admission) -> None:
    """A refused job is one the cluster can never hold, even empty."""
    for v in result.verdicts:
        if v.state == "refused":
            never = plan(HOSTS, COUNT, sim.waiting[v.job].ask)
            assert isinstance(never, Shortfall) and never.never, v.job


def check_bound(sim: Sim, result: Admission, due: bool) -> None:
    """The watched head is admitted at the latest in the pass after every job it waits
    for has ended (`due`), unless a job ahead of it in order (a higher priority) was
    admitted or became the head: then the bound starts again."""
    watch, res = sim.watch, result.reservation
    if watch is None:
        return
    if watch.job in result.admitted:
        sim.bounds_met += due
        sim.watch = None
        return
    head_key = sim.key(watch.job)
    passed = any(sim.key(a) < head_key for a in result.admitted)
    if res is not None and res.job != watch.job:
        assert sim.key(res.job) < head_key, f"{res.job} took {watch.job}'s place"
        passed = True
    if passed:
        sim.watch = None
        return
    assert res is not None and res.hosts == watch.hosts, f"{watch.job} moved"
    assert not due, f"{watch.job} still waits after {sorted(watch.waits_for)} ended"


def start_watch(sim: Sim, result: Admission, before: dict[str, Running]) -> None:
    """Watch a new head from this pass: the jobs holding its hosts are those that ran
    before the pass and those admitted ahead of it in this one (not the backfill)."""
    res = result.reservation
    if sim.watch is not None or res is None:
        return
    head_key = sim.key(res.job)
    holders = [*before.values()] + [
        Running(a, p.hosts, sim.waiting[a].ask.gpus_per_node)
        for a, p in result.admitted.items()
        if sim.key(a) < head_key
    ]
    on_h = frozenset(r.job for r in holders if r.gpus_per_node and set(r.hosts) & set(res.hosts))
    sim.watch = Watch(res.job, res.hosts, on_h)


def step(sim: Sim, now: int) -> None:
    sim.end_some()
    sim.arrive(now)
    due = sim.watch is not None and not (sim.watch.waits_for & sim.running.keys())
    before = dict(sim.running)
    result = admit(HOSTS, list(before.values()), list(sim.waiting.values()), sim.reservation)
    check_whole(sim, result)
    check_refused(sim, result)
    check_bound(sim, result, due)
    if (res := result.reservation) is not None:
        behind = [p for a, p in result.admitted.items() if sim.key(a) > sim.key(res.job)]
        sim.backfilled_on_h += sum(bool(set(res.hosts) & set(p.hosts)) for p in behind)
    start_watch(sim, result, before)
    for name, placement in result.admitted.items():
        ask = sim.waiting.pop(name).ask
        sim.running[name] = Running(name, placement.hosts, ask.gpus_per_node)
    for v in result.verdicts:
        if v.state == "refused":
            del sim.waiting[v.job]
    sim.reservation = result.reservation


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_arrivals_and_ends_keep_the_rules(seed: int) -> None:
    """Over 300 steps: no host over its count, jobs admitted whole, the head's wait
    bounded; and the run exercised both the bound and backfill on reserved hosts."""
    sim = Sim(random.Random(seed))
    for now in range(300):
        step(sim, now)
    assert sim.bounds_met > 0, "no head was admitted as its bound came due"
    assert sim.backfilled_on_h > 0, "no job was backfilled onto reserved hosts"
