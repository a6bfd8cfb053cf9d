"""GpuFit: a job's GPUs checked against what the swarm's other tasks hold, before the
job's services exist.

Swarm reserves GPUs as generic resources and never over-commits a node: a task that
does not fit stays pending. For a job on a shared cluster that is a half-applied
submit: its services are created, the docker provider waits for their tasks
(`converge_config`) until its timeout, and the pending task takes the GPUs the moment
another job frees them, with no `up` and no review. So every preview and `up` of a job
stack asks the cluster's leader first, in this resource's Check (the engine calls it
for a preview too): each node the job's GPU tasks go to must have `gpus_per_node` GPUs
that no other service's task holds. Otherwise Check fails naming the hosts, the GPUs
free and who holds them, and the job's services, which depend on this resource, are
never registered. The job's own tasks do not count against it, so submitting a
running job again (a code push) passes.

What this cannot see: a host that is down (its tasks go to a spare, which the
preflight and the gate judge); a task another `up` creates between this Check and the
job's own services (the engine locks one stack, not the swarm). The job command runs
the same check before it writes the stack file, and holds the cluster's submit lock
from that check to the end of its `up` (jobs/command.py, jobs/lock.py), so two
submits do not race; an `up` typed by hand takes no lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    UpdateResult,
)

from infra.layout import GPU_RESOURCE, JOB_LABEL
from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import HostError, docker_client, node_hostname, ssh_of

KEYS = ("leader_endpoint", "job", "services", "hosts", "gpus")
FIT_SUFFIX = "-fit"
"""A job's GpuFit is named its services' component name and this (infra/components/
services.py): jobs/record.py reads the job's hosts from a state by it."""


@dataclass(frozen=True)
class Holder:
    """A task that holds GPUs on a node: its service, the job it belongs to, how many."""

    service: str
    job: str | None
    gpus: int

    def words(self) -> str:
        owner = f", job {self.job}" if self.job else ""
        return f"{self.service}{owner}: {self.gpus}"


@dataclass
class SwarmGpus:
    """The swarm's GPUs as its leader sees them: each ready node's capacity and the
    tasks that hold some of it."""

    capacity: dict[str, int] = field(default_factory=dict)
    held: dict[str, list[Holder]] = field(default_factory=dict)

    def free(self, host: str, own: Iterable[str]) -> int:
        """GPUs of `host` that no task outside the services `own` holds."""
        mine = set(own)
        taken = sum(h.gpus for h in self.held.get(host, []) if h.service not in mine)
        return self.capacity.get(host, 0) - taken


def _gpu_count(resources: Sequence[dict[str, Any]] | None) -> int:
    """NVIDIA-GPU units in a list of Swarm generic resources: a named resource is one
    GPU (a node's UUIDs), a discrete one its value (a task's reservation)."""
    n = 0
    for r in resources or []:
        named = r.get("NamedResourceSpec") or {}
        discrete = r.get("DiscreteResourceSpec") or {}
        if named.get("Kind") == GPU_RESOURCE:
            n += 1
        if discrete.get("Kind") == GPU_RESOURCE:
            n += int(discrete.get("Value") or 0)
    return n


def swarm_gpus(
    nodes: Sequence[dict[str, Any]],
    services: Sequence[dict[str, Any]],
    tasks: Sequence[dict[str, Any]],
) -> SwarmGpus:
    """The GPUs of ready, active nodes and the running or starting tasks holding them,
    from the leader's node, service and task lists (the Docker API's shapes)."""
    out = SwarmGpus()
    names: dict[str, str] = {}
    for node in nodes:
        ready = (node.get("Status") or {}).get("State") == "ready"
        active = (node.get("Spec") or {}).get("Availability") == "active"
        host = node_hostname(node)
        names[str(node["ID"])] = host
        if ready and active and host:
            res = (node.get("Description") or {}).get("Resources") or {}
            out.capacity[host] = _gpu_count(res.get("GenericResources"))
    by_id = {str(s["ID"]): s.get("Spec") or {} for s in services}
    for t in tasks:
        # Swarm wants it running and has placed it: it holds its reservation.
        if t.get("DesiredState") != "running" or not t.get("NodeID"):
            continue
        spec = t.get("Spec") or {}
        gpus = _gpu_count(
            ((spec.get("Resources") or {}).get("Reservations") or {}).get("GenericResources")
        )
        on = names.get(str(t["NodeID"]))
        if not gpus or on is None:
            continue
        svc = by_id.get(str(t.get("ServiceID")), {})
        job = (svc.get("Labels") or {}).get(JOB_LABEL)
        out.held.setdefault(on, []).append(Holder(str(svc.get("Name", "?")), job, gpus))
    return out


def read_swarm(leader_endpoint: dict[str, Any], ssh: dict[str, Any] | None = None) -> SwarmGpus:
    """`swarm_gpus` as the cluster's leader answers now (its SSH settings `ssh`,
    hostops.ssh_of)."""
    try:
        api = docker_client(leader_endpoint, ssh).api
        return swarm_gpus(
            api.nodes(), api.services(), api.tasks(filters={"desired-state": "running"})
        )
    except HostError:
        raise
    except Exception as e:  # the Docker SDK's errors: name the leader, not a traceback
        raise HostError(f"docker {leader_endpoint.get('url')}: {e}") from None


def fit_problems(
    swarm: SwarmGpus, job: str, own: Sequence[str], hosts: Sequence[str], gpus: int
) -> list[str]:
    """Why job `job` (services `own`) cannot have `gpus` GPUs on each of `hosts` now,
    each problem naming the key, the value, what is free and who holds the rest."""
    if gpus <= 0:
        return []
    short = []
    for host in hosts:
        if host not in swarm.capacity:
            continue  # down or drained: its task goes elsewhere (preflight, gate)
        free = swarm.free(host, own)
        if free < gpus:
            others = [h for h in swarm.held.get(host, []) if h.service not in set(own)]
            holders = "; ".join(h.words() for h in others) or "no task"
            short.append(
                f"{host} has {max(free, 0)} of {swarm.capacity[host]} free (held by {holders})"
            )
    if not short:
        return []
    mine = set(own)
    jobs = sorted(
        {
            h.job
            for host in hosts
            for h in swarm.held.get(host, [])
            if h.job and h.service not in mine
        }
    )
    stop = ", ".join(f"scripts/job stop {j}" for j in jobs)
    stop = f"; stop a job that holds them ({stop})" if stop else ""
    return [
        f"training.gpus_per_node: job {job!r} needs {gpus} GPU(s) on each of "
        f"{', '.join(hosts)}, but {'; '.join(short)}; allowed: at most the GPUs free on "
        f"each of the job's hosts now{stop}, or ask for fewer "
        "(--gpus-per-node, --nodes). Nothing was changed"
    ]


def check_fit(props: dict[str, Any]) -> list[str]:
    """`fit_problems` for a GpuFit's properties, read from the leader now."""
    swarm = read_swarm(props["leader_endpoint"], ssh=ssh_of(props, props["leader_endpoint"]))
    return fit_problems(swarm, props["job"], props["services"], props["hosts"], int(props["gpus"]))


class GpuFitProvider(BoundaryProvider):
    """Check asks the leader whether the job's GPUs are free; the resource itself holds
    only its inputs, so it never shows a diff of its own."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        try:
            problems = check_fit(news)
        except HostError as e:
            problems = [f"the cluster's GPUs could not be read: {e}"]
        return CheckResult(news, [CheckFailure("", p) for p in problems])

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"fit-{props['job']}", {k: props[k] for k in KEYS})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({k: news[k] for k in KEYS})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, KEYS)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """A check only: nothing to remove."""


class GpuFit(Resource):
    """A job's GPUs on its hosts, checked free at every preview and `up` (module doc)."""

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(GpuFitProvider(), name, props, opts)
