"""A job's way in moved off a lost manager (docs/jobs.md, "When a manager is lost").

A job's services, GPU check and roster are made and read through one manager. Its
state names that manager in two kinds of places: its cluster reference's docker
provider is named for it and holds its engine (`host`, `sshOpts`), and the dynamic
resources that read the swarm hold its endpoint (`leader_endpoint`). While that
manager is lost, every `up` and `destroy` of the job fails on it, though the job's
services are in Raft, on every manager, and another manager may act for it.

`way_in` moves a job whose manager does not answer to the manager the command went
through: those places in its state are written as the program makes them for that
manager (`provider_args`, `endpoint`, `provider_name`). `moved_job`, which the commands
call, then has the job's file here name the manager its state goes through (`manager`).
The next preview through it is then a no-op: no resource is replaced, no task restarts,
and `stop`, the queue's release, a resize or any submit go on through it. The state is
changed by the engine's own export and import; a file backend keeps the state before
it (`<stack>.json.bak`) until the next update, as for each update.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from pulumi import automation as auto

from infra.components.clusterref import provider_name, ref_name
from infra.components.swarm import endpoint, provider_args
from infra.config import ConfigError, Host, StackConfig
from jobs.jobfile import file_values, write_values
from jobs.leader import answers
from jobs.record import DOCKER_PROVIDER, state_manager

_STATE_KEYS = {"host": "host", "ssh_opts": "sshOpts"}
"""A docker provider's arguments (`provider_args`) as its state holds them; the
Python SDK writes a list as JSON text."""


def provider_state(args: Mapping[str, Any]) -> dict[str, str]:
    """The inputs a docker provider made with `args` (`provider_args`) has in a state.
    ConfigError for an engine reached with TLS: its key is a secret of the state,
    which only the engine encrypts."""
    other = sorted(set(args) - set(_STATE_KEYS))
    if other:
        raise ConfigError(
            [f"a manager reached with {', '.join(other)} (TLS): its job's state is not "
             "moved to it; allowed: a manager reached over ssh:// or a socket"]
        )  # fmt: skip
    return {_STATE_KEYS[k]: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}


def _renamed(value: Any, old: str, new: str) -> Any:
    """`value` (a URN, a provider reference `URN::id`, or a list of URNs) with URN
    `old` as `new`."""
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    if value == old:
        return new
    if isinstance(value, str) and value.startswith(f"{old}::"):
        return new + value[len(old) :]
    return value


def _moved_resource(
    res: dict[str, Any],
    old_urn: str,
    new_urn: str,
    provider: Mapping[str, str],
    eps: tuple[Mapping[str, Any] | None, Mapping[str, Any]],
) -> None:
    """Resource state `res` moved in place: references to the provider's URN renamed;
    the provider's engine, or a `leader_endpoint` that was the lost manager's, the new
    manager's."""
    for key in ("urn", "parent", "provider", "dependencies", "deletedWith"):
        if key in res:
            res[key] = _renamed(res[key], old_urn, new_urn)
    deps = res.get("propertyDependencies") or {}
    for prop, urns in deps.items():
        deps[prop] = _renamed(urns, old_urn, new_urn)
    lost, to = eps
    for key in ("inputs", "outputs"):
        props = res.get(key)
        if not isinstance(props, dict):
            continue
        if res.get("urn") == new_urn:
            props.update(provider)
        elif lost is not None and props.get("leader_endpoint") == lost:
            props["leader_endpoint"] = copy.deepcopy(to)


def moved_state(
    deployment: Mapping[str, Any],
    job: str,
    lost: str,
    lost_endpoint: Mapping[str, Any] | None,
    to: Host,
    to_args: Mapping[str, Any],
) -> dict[str, Any]:
    """Job `job`'s state (`deployment`, as exported) moved from manager `lost` (its
    endpoint `lost_endpoint`; None: not known, the host left the cluster's file) to
    manager `to`, whose docker provider the program makes with `to_args`
    (`provider_args`). ConfigError: the state has no provider named for `lost`, or
    `to` is reached with TLS (`provider_state`)."""
    provider = provider_state(to_args)
    ref = ref_name(job)
    old_name, new_name = provider_name(ref, lost), provider_name(ref, to.name)
    moved = copy.deepcopy(dict(deployment))
    resources = moved.get("resources") or []
    urns = [
        str(r["urn"])
        for r in resources
        if r.get("type") == DOCKER_PROVIDER and str(r.get("urn", "")).endswith(f"::{old_name}")
    ]
    if not urns:
        raise ConfigError([f"job {job}: its state has no docker provider named {old_name}"])
    old_urn = urns[0]
    new_urn = old_urn.removesuffix(old_name) + new_name
    eps = (lost_endpoint, endpoint(to))
    for res in resources:
        _moved_resource(res, old_urn, new_urn, provider, eps)
    for op in moved.get("pending_operations") or []:
        if isinstance(op.get("resource"), dict):
            _moved_resource(op["resource"], old_urn, new_urn, provider, eps)
    return moved


def way_in(
    stack: auto.Stack,
    job: str,
    cluster: StackConfig,
    out: Callable[[str], Any],
    exported: auto.Deployment | None = None,
) -> str | None:
    """The manager job `job`'s state (its `stack`'s; `exported`: its export, when the
    caller has it already) goes through, moved first to the manager `cluster` was
    reached through (jobs/leader.py `reached`: its leader) when the state's does not
    answer: moved (`moved_state`, said through `out`) only then, so a job keeps its way
    in while it can. None: the job has no state naming one (never up, or stopped).
    ConfigError: as `moved_state` says."""
    deployment = exported or stack.export_stack()
    state: Mapping[str, Any] = deployment.deployment or {}
    was = state_manager(state, job)
    to = cluster.leader
    if was is None or was == to.name:
        return was
    lost = {h.name: h for h in cluster.hosts}.get(was)
    why = answers(cluster, lost) if lost is not None else "not a host of the cluster's file"
    if why is None:
        return was
    ssh = cluster.ssh_for(to) if to.docker_host.startswith("ssh://") else None
    lost_ep = endpoint(lost) if lost is not None else None
    moved = moved_state(state, job, was, lost_ep, to, provider_args(to, ssh))
    stack.import_stack(auto.Deployment(version=deployment.version, deployment=moved))
    out(
        f"job {job}: its manager {was} does not answer ({why}); its state now goes "
        f"through manager {to.name}"
    )
    return to.name


def moved_job(
    stack: auto.Stack,
    job: str,
    cluster: StackConfig | None,
    out: Callable[[str], Any],
    exported: auto.Deployment | None = None,
) -> str | None:
    """`way_in`, and job `job`'s file here (if any) names the manager its state goes
    through: the program then makes the provider its state holds. A file naming
    another (the lost one, or a checkout's file the state moved under) would make
    another provider, and replace what the job's state holds. None: no state naming a
    manager, or `cluster` is None (the caller did not reach the cluster: nothing is
    read or probed)."""
    if cluster is None:
        return None
    now = way_in(stack, job, cluster, out, exported)
    values = file_values(job) if now is not None else None
    if values is not None and (values.get("manager") or cluster.managers[0].name) != now:
        write_values(job, {**values, "manager": now})
    return now
