"""After an interrupted `pulumi up` or `destroy`: what the state and the hosts disagree on,
and the repair Pulumi recommends, done for this stack's kinds of objects.

    scripts/recover STACK            report; exit 1 when there is something to repair
    scripts/recover STACK --apply    repair, then report again (exit 1 if anything is left)

A `pulumi` killed mid-operation (SIGKILL, a runner torn down, a laptop lid) leaves
*pending operations* in the state: objects it had asked a provider for but never heard
back about. The engine only warns about them, and re-creating a pending CREATE of an
object with a fixed name (a service, the overlay) then fails on a name conflict, while an
auto-named secret is leaked silently. Pulumi's repair is `pulumi refresh` with
`--import-pending-creates` (the create happened) or `--clear-pending-creates` (it did
not). This tool decides per object, on the hosts, instead of by hand:

- a Docker service, network, secret or config with a pending create that exists on the swarm is
  removed there, so that the next `up` creates it under the state's control (the Docker
  provider cannot import a secret, and a half-created service ran no training yet: the
  launch depends on it);
- every other pending create (swarm init/join, host facts, the SSH key, the roster, the
  image, the launch) is cleared: those creates adopt what already exists (a node already
  in the swarm, a training run already running), so redoing them is safe;
- `pulumi refresh --clear-pending-creates` then drops the pending operations, updates
  and deletes included, and refreshes the state from the hosts.

It never removes an object the state does not claim as pending: those are reported as
orphans (exit 1), for an operator to look at. A swarm node of a host the stack declares
but holds no node resource for (the leader right after the swarm's init, a join whose
create was cleared) is reported as the next `up`'s to adopt: without --apply that
counts as a difference too, so that after an `up` the exit status says "state and
swarm agree exactly". A backend lock left by a killed `pulumi`
is not touched either: `pulumi cancel` removes it once nobody is deploying.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from infra.layout import (
    CLUSTER_REF_TYPE,
    CONFIG_TYPE,
    JOB_LABEL,
    NETWORK_TYPE,
    SECRET_TYPE,
    SERVICE_TYPE,
)
from infra.providers.hostops import docker_client, node_hostname, ssh_of
from ops.project import Pulumi as PulumiCli

SERVICE = SERVICE_TYPE
NETWORK = NETWORK_TYPE
SECRET = SECRET_TYPE
CONFIG = CONFIG_TYPE
#: Objects whose half-done create is undone on the hosts (the others are adopted), in
#: the order they are removed: services first, then what they use.
REMOVABLE = (SERVICE, NETWORK, SECRET, CONFIG)
#: swarm_objects' kinds, as resource types.
KINDS = {"service": SERVICE, "secret": SECRET, "network": NETWORK, "config": CONFIG}


@dataclass(frozen=True)
class Pending:
    """One pending operation in the state."""

    urn: str
    type: str
    operation: str
    name: str

    @property
    def resource(self) -> str:
        """The resource's Pulumi name (the URN's last segment)."""
        return self.urn.rsplit("::", 1)[-1]


@dataclass
class Report:
    """What the state and the swarm disagree on."""

    pending: list[Pending] = field(default_factory=list)
    #: (kind, name, id) of swarm objects the state does not know.
    orphans: list[tuple[str, str, str]] = field(default_factory=list)
    #: Swarm nodes of declared hosts that no node resource holds yet (the leader right
    #: after the swarm's init, a join whose create was cleared): the next `up` adopts them.
    adopting: list[str] = field(default_factory=list)
    #: What --apply did, one line each.
    done: list[str] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """Nothing for an operator: what is left, the next `up` adopts."""
        return not self.pending and not self.orphans

    @property
    def clean(self) -> bool:
        """The state and the swarm agree exactly."""
        return self.settled and not self.adopting

    def render(self, stack: str) -> str:
        lines = [
            f"stack {stack}: {len(self.pending)} pending operation(s), "
            f"{len(self.orphans)} object(s) on the swarm unknown to the state"
        ]
        lines += [f"  pending  {p.operation:<9} {p.resource}  ({p.type})" for p in self.pending]
        lines += [f"  orphan   {kind:<9} {name}  ({oid})" for kind, name, oid in self.orphans]
        lines += [f"  adopt    node      {h}  (the next up adopts it)" for h in self.adopting]
        lines += [f"  done     {d}" for d in self.done]
        return "\n".join(lines)


class Pulumi(PulumiCli):
    """The `pulumi` CLI for one stack (environment, passphrase and backend inherited)."""

    def __init__(self, stack: str, cwd: str | None) -> None:
        super().__init__(stack, cwd, env=None, timeout=None)

    def __call__(self, *args: str) -> str:
        proc = self.run(*args, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"recover: `pulumi {' '.join(args)}` failed:\n{proc.stderr[-2000:]}")
        return proc.stdout

    def deployment(self) -> dict[str, Any]:
        """The stack's checkpoint (secrets stay encrypted: nothing here needs them)."""
        return dict(json.loads(self("stack", "export"))["deployment"])


def _props(res: dict[str, Any]) -> dict[str, Any]:
    return {**(res.get("inputs") or {}), **(res.get("outputs") or {})}


def _all_resources(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    """The checkpoint's resources, those of its pending operations included."""
    return [
        *(deployment.get("resources") or []),
        *(op["resource"] for op in deployment.get("pending_operations") or []),
    ]


def pending_operations(deployment: dict[str, Any]) -> list[Pending]:
    """The pending operations of a checkpoint, in state order."""
    return [
        Pending(
            urn=op["resource"]["urn"],
            type=op["resource"]["type"],
            operation=op["type"],
            name=str(_props(op["resource"]).get("name") or ""),
        )
        for op in deployment.get("pending_operations") or []
    ]


def leader_endpoint(deployment: dict[str, Any]) -> dict[str, Any] | None:
    """The swarm leader's Docker endpoint, as the swarm resources recorded it."""
    resources = _all_resources(deployment)
    for res in resources:
        props = _props(res)
        if isinstance(props.get("leader_endpoint"), dict):
            return dict(props["leader_endpoint"])
    for res in resources:
        props = _props(res)
        if res["urn"].endswith("-swarm-init") and isinstance(props.get("endpoint"), dict):
            return dict(props["endpoint"])
    return None


def leader_ssh(deployment: dict[str, Any], endpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The leader's SSH settings as the program gave them to the dynamic resources
    (their `ssh_hosts`, by URL): the stack's key, known_hosts and jump host. None (a
    state without them, a host that is not ssh://): the URL's own user and port,
    strict keys against OpenSSH's default file (hostops.docker_client)."""
    for res in _all_resources(deployment):
        found = ssh_of(_props(res), endpoint)
        if found:
            return found
    return None


def known_ids(deployment: dict[str, Any]) -> set[str]:
    """Every Docker object id and swarm node id the state holds."""
    ids: set[str] = set()
    for res in deployment.get("resources") or []:
        if res.get("id"):
            ids.add(str(res["id"]))
        node_id = (res.get("outputs") or {}).get("node_id")
        if isinstance(node_id, str):
            ids.add(node_id)
    return ids


def swarm_objects(leader: Any) -> list[tuple[str, str, str]]:
    """(kind, name, id) of the swarm's nodes, services, secrets, configs (Prometheus'
    with monitoring on) and swarm networks."""
    objects = [("node", node_hostname(n.attrs), n.id) for n in leader.nodes.list()]
    objects += [("service", s.name, s.id) for s in leader.services.list()]
    objects += [("secret", s.name, s.id) for s in leader.secrets.list()]
    objects += [("config", c.name, c.id) for c in leader.configs.list()]
    objects += [
        ("network", n.name, n.id)
        for n in leader.networks.list()
        # ingress is Swarm's own routing mesh; local networks are the hosts' business.
        if n.attrs.get("Scope") == "swarm" and not n.attrs.get("Ingress")
    ]
    return objects


def job_services(leader: Any) -> dict[str, str]:
    """Service id -> the job stack it belongs to (its `dss.job` label), for the
    services of job stacks (docs/jobs.md)."""
    out = {}
    for s in leader.services.list():
        job = ((s.attrs.get("Spec") or {}).get("Labels") or {}).get(JOB_LABEL)
        if job:
            out[s.id] = str(job)
    return out


def stack_job(deployment: dict[str, Any], stack: str) -> str | None:
    """`stack` when the state is a job stack's (it holds a ClusterRef), else None."""
    types = {res.get("type") for res in deployment.get("resources") or []}
    return stack if CLUSTER_REF_TYPE in types else None


def elsewhere(kind: str, oid: str, jobs: dict[str, str], job: str | None) -> bool:
    """Whether a swarm object is another stack's business, not an orphan of this one:
    for a cluster or single stack, a job's service; for a job stack, everything but
    its own services (the swarm, network and secrets are its cluster's)."""
    if job is None:
        return oid in jobs
    return not (kind == "service" and jobs.get(oid) == job)


def declared_hosts(deployment: dict[str, Any]) -> set[str]:
    """The hosts the state's resources are about (facts, swarm init and nodes)."""
    hosts = (_props(res).get("host") for res in _all_resources(deployment))
    return {h for h in hosts if isinstance(h, str)}


def survey(pulumi: Pulumi) -> tuple[Report, Any]:
    """Compare the state with the swarm; returns the report and a leader client."""
    deployment = pulumi.deployment()
    report = Report(pending=pending_operations(deployment))
    adoptable = declared_hosts(deployment)
    endpoint = leader_endpoint(deployment)
    leader = docker_client(endpoint, leader_ssh(deployment, endpoint)) if endpoint else None
    if leader is not None and leader.info()["Swarm"].get("ControlAvailable"):
        known = known_ids(deployment)
        pending_names = {(p.type, p.name) for p in report.pending}
        jobs, job = job_services(leader), stack_job(deployment, pulumi.stack)
        for kind, name, oid in swarm_objects(leader):
            if oid in known or (KINDS.get(kind), name) in pending_names:
                continue
            if elsewhere(kind, oid, jobs, job):
                continue
            if kind == "node" and name in adoptable:
                report.adopting.append(name)
            else:
                report.orphans.append((kind, name, oid))
    return report, leader


def _remove(leader: Any, kind: str, name: str) -> str | None:
    """Remove a swarm object by exact name; Docker refuses while tasks still detach."""
    if kind == SERVICE:
        listing = leader.services.list(filters={"name": name})
    elif kind == NETWORK:
        listing = leader.networks.list(names=[name])
    elif kind == CONFIG:
        listing = leader.configs.list(filters={"name": name})
    else:
        listing = leader.secrets.list(filters={"name": name})
    found = [o for o in listing if o.name == name]
    if not found:
        return None
    for attempt in range(45):
        try:
            found[0].remove()
            return found[0].id  # type: ignore[no-any-return]  # docker's models are untyped
        except Exception:
            if attempt == 44:
                raise
            time.sleep(2)
    return None


def apply(pulumi: Pulumi, report: Report, leader: Any) -> None:
    """Undo the half-done creates on the swarm, then clear the pending operations."""
    # Services before what they use: a network, secret or config in use cannot be removed.
    order = sorted(
        (p for p in report.pending if p.operation == "creating" and p.type in REMOVABLE),
        key=lambda p: REMOVABLE.index(p.type),
    )
    for p in order:
        if leader is None:
            raise SystemExit(f"recover: no swarm leader known; cannot check {p.resource}")
        removed = _remove(leader, p.type, p.name)
        what = f"removed {p.name} ({removed})" if removed else f"{p.name} was never created"
        report.done.append(f"{p.resource}: {what}")
    if report.pending:
        pulumi("refresh", "--yes", "--skip-preview", "--clear-pending-creates")
        report.done.append("pulumi refresh --clear-pending-creates: pending operations cleared")


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/recover", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="the stack to check, e.g. dev")
    parser.add_argument("--apply", action="store_true", help="repair, then report again")
    parser.add_argument("--cwd", default=os.environ.get("DSS_ROOT"), help="the Pulumi project")
    args = parser.parse_args(list(argv) if argv is not None else None)
    pulumi = Pulumi(args.stack, args.cwd)
    report, leader = survey(pulumi)
    print(report.render(args.stack))
    if args.apply and not report.clean:
        apply(pulumi, report, leader)
        done = report.done
        report, _ = survey(pulumi)
        report.done = done
        print(f"after --apply:\n{report.render(args.stack)}")
    # After a repair, nodes left to adopt are the next `up`'s job, not the operator's.
    return 0 if (report.settled if args.apply else report.clean) else 1


if __name__ == "__main__":
    sys.exit(main())
