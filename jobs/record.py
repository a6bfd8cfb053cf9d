"""A job's run record as a stack's state holds it: the TrainingRun resource under the
launch, its outputs as the last `up` or refresh read them (jobs/command.py reads a run's
state from there, never from the stack's outputs, which only an `up` computes). `job
list` and the queue's release of ended runs (jobs/release.py) read it the same way
(`read_record`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi import automation as auto

from infra.components.clusterref import provider_name, ref_name, reference_name
from infra.layout import DYNAMIC_TYPE, LAUNCH_TYPE, RUN_RECORD_SUFFIX, STACK_TYPE
from infra.providers.fit import FIT_SUFFIX
from jobs.table import failure_words

# How the engine writes a secret value in a state it exports with --show-secrets.
_SECRET_SIG = "4dabf18193072939515e22adb298388d"


def _plain(value: Any) -> Any:
    """A state value, its secret wrapper (if any) taken off."""
    if isinstance(value, dict) and _SECRET_SIG in value and "plaintext" in value:
        return json.loads(value["plaintext"])
    return value


DOCKER_PROVIDER = "pulumi:providers:docker"
STACK_REFERENCE = "pulumi:pulumi:StackReference"

_RUN_RECORD_TYPE = f"{LAUNCH_TYPE}${DYNAMIC_TYPE}"
"""The run record's type in its URN: a dynamic resource that is a child of the launch."""


def _live(deployment: Mapping[str, Any] | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each resource of a stack's state (its `deployment`) with its name (the URN's
    last part), but a replaced copy the engine has yet to delete."""
    for res in (deployment or {}).get("resources") or []:
        if not res.get("delete"):
            yield str(res.get("urn", "")).rsplit("::", 1)[-1], res


def run_record(deployment: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The run record's outputs in a stack's state (its `deployment`): the TrainingRun
    resource under the launch, as the last `up` or refresh (this command's, or a
    `pulumi refresh` typed by hand) read it: `state`, `reason`, `step`, `checkpoint`,
    `restarts`, `relaunches`. None when the state has none (a job never up, stopped, or
    whose `up` failed before its launch)."""
    found = None
    for name, res in _live(deployment):
        # urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>
        parts = str(res.get("urn", "")).split("::", 3)
        if (
            len(parts) == 4
            and parts[2].endswith(_RUN_RECORD_TYPE)
            and name.endswith(RUN_RECORD_SUFFIX)
        ):
            found = res
    if found is None:
        return None
    return {k: _plain(v) for k, v in (found.get("outputs") or {}).items()}


def read_state(stack: Any, refresh: bool = False) -> Mapping[str, Any] | None:
    """Job stack `stack`'s state (an Automation API stack's export): after a refresh,
    which reads its resources now, when `refresh`; else as the last `up` or refresh
    left it."""
    if refresh:
        stack.refresh(color="never")
    deployment: Mapping[str, Any] | None = stack.export_stack().deployment
    return deployment


def read_record(stack: Any, refresh: bool = False) -> dict[str, Any] | None:
    """Job stack `stack`'s run record in its state (`read_state`). None as `run_record`
    says."""
    return run_record(read_state(stack, refresh))


def listed_state(stack: Any, job: str, refresh: bool) -> tuple[Mapping[str, Any] | None, str]:
    """Job `job`'s state for `job list` (`read_state` of its `stack`), and why it is not
    read now: empty, or, when the refresh asked for failed (its manager or a host not
    reached), the manager its state goes through and the engine's words, the state
    then as the last `up` or refresh left it. One job's failed refresh does not keep
    the others from being listed."""
    try:
        return read_state(stack, refresh), ""
    except auto.CommandError as e:
        deployment = read_state(stack)
        how = f"through manager {m}" if (m := state_manager(deployment, job)) else "its refresh"
        return deployment, f"not read now ({how}): {failure_words(e)}"


def listed_record(stack: Any, job: str, refresh: bool) -> tuple[dict[str, Any] | None, str]:
    """`listed_state`'s run record (`run_record`) and why it is not read now."""
    deployment, why = listed_state(stack, job, refresh)
    return run_record(deployment), why


def exported_run(deployment: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The verdict a released job's stack exports as its `run` (__main__.py), from the
    stack resource in its state (its `deployment`). None where the state has a launch
    (a job not released: its `run` output is what its last `up` computed, stale after
    a refresh; `run_record` reads its run) or no such output (queued, stopped)."""
    resources = (deployment or {}).get("resources") or []
    if any(res.get("type") == LAUNCH_TYPE for res in resources):
        return None
    for res in resources:
        if res.get("type") == STACK_TYPE:
            run = (res.get("outputs") or {}).get("run")
            return {k: _plain(v) for k, v in run.items()} if isinstance(run, dict) else None
    return None


def state_manager(deployment: Mapping[str, Any] | None, job: str) -> str | None:
    """The manager job `job`'s state went through: the host its cluster reference's
    docker provider is named for (infra/components/clusterref.py `provider_name`, the
    reference named `<job>-cluster` by __main__.py); None: no such provider."""
    prefix = provider_name(ref_name(job), "")
    for name, res in _live(deployment):
        if res.get("type") == DOCKER_PROVIDER and name.startswith(prefix):
            return name.removeprefix(prefix)
    return None


def state_hosts(deployment: Mapping[str, Any] | None, job: str) -> list[str] | None:
    """The hosts job `job`'s state places its GPU tasks on, master first: the `hosts`
    input of its GPU check (GpuFit, `<job>-train-fit`: infra/components/services.py),
    which is its file's `training.hosts` (StackConfig.master, then its workers). None:
    no such check (a CPU job, or a job never up in its full form)."""
    for name, res in _live(deployment):
        inputs = res.get("inputs") or {}
        hosts = inputs.get("hosts")
        fit = res.get("type") == DYNAMIC_TYPE and name.endswith(FIT_SUFFIX)
        if fit and inputs.get("job") == job and isinstance(hosts, list):
            return [str(h) for h in hosts]
    return None


def state_cluster(deployment: Mapping[str, Any] | None, job: str) -> str | None:
    """The cluster stack job `job`'s state runs on: the last part of its cluster
    reference's stack reference (`<org>/<project>/<cluster>`: infra/components/
    clusterref.py `stack_path`), so a command with no file of the job here still knows
    its cluster. None: no such reference (a job never up, or stopped)."""
    want = reference_name(ref_name(job))
    for name, res in _live(deployment):
        if res.get("type") == STACK_REFERENCE and name == want:
            path = (res.get("inputs") or {}).get("name") or res.get("id")
            if isinstance(path, str) and path:
                return path.rsplit("/", 1)[-1]
    return None
