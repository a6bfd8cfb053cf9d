"""Where a submitted job runs: the `hosts` and `placement` keys `scripts/job submit`
writes into the job's stack file (docs/design/sharing.md, 3.1).

- Hosts the person names (`--hosts a,b`, master first): `placement: named`; the config
  rules and the GPU check judge them.
- A job whose stack file already has hosts keeps them while its services hold GPUs
  (a code push never moves a running job), and keeps named hosts always. A running
  job whose file has none (submitted before hosts existed) and a CPU job (no GPU to
  plan by) get none: the cluster's master host and the next hosts, as before.
- Otherwise (a new job, or a planned one stopped) the planner (infra/placement.py)
  picks them from the GPUs the cluster's leader reports free now: `placement:
  planned`. A job that does not fit now is refused, naming the shortfall and who
  holds the GPUs (`job_hosts`).
- Under the queue (`queued_hosts`, what `scripts/job submit` uses): a job that is not
  running and asks for GPUs is decided by an admission pass over the cluster's queue
  entries and itself (jobs/queue.py): admitted, its hosts are the pass's (or its named
  ones); else it waits, and the pass says its state, place and reason.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from infra.admission import Admission, Waiting
from infra.config import ConfigError, StackConfig, Training
from infra.config.rules.placement import host_slots
from infra.layout import training_service_names
from infra.placement import Ask, Placement, candidates, plan
from infra.providers.fit import SwarmGpus, fit_problems
from infra.providers.queue import Entry
from jobs.queue import admission


def holds_gpus(swarm: SwarmGpus, job: str) -> bool:
    """Job `job`'s services hold GPUs now (its tasks run)."""
    return any(h.job == job for holders in swarm.held.values() for h in holders)


def started_elsewhere(
    job: str, training: Mapping[str, Any], swarm: SwarmGpus, waiting: Collection[str]
) -> bool:
    """Job `job`, whose file here has `training`, was started by a pass from another
    checkout (jobs/entryfile.py): the file is still queued, its services hold GPUs, and
    its entry is gone from the queue (not among the `waiting` jobs; a job whose entry
    is still there has tasks left by a failed start)."""
    return "queued" in training and holds_gpus(swarm, job) and job not in waiting


def job_hosts(
    job: str,
    training: Training,
    cluster: StackConfig,
    swarm: SwarmGpus,
    old: Mapping[str, Any],
) -> dict[str, Any]:
    """The `hosts` and `placement` keys for job `job` whose merged `training` has none
    of them unless the person named hosts, on `cluster` as its leader reports `swarm`;
    `old`: the `training` of the job's stack file as it is (empty for a new job).
    ConfigError: the cluster cannot hold the job, or not now."""
    if training.hosts:
        return {"hosts": list(training.hosts), "placement": "named"}
    kept, running = old.get("hosts"), holds_gpus(swarm, job)
    if kept and (old.get("placement") != "planned" or running):
        return {"hosts": list(kept), "placement": old.get("placement") or "named"}
    if running or not training.gpus_per_node:
        # A job placed before hosts existed keeps its placement while it runs (pinning
        # it would replace its tasks); a CPU job holds no GPU to plan by.
        return {}
    own = training_service_names(job)
    free = {h: swarm.free(h, own) for h in swarm.capacity}
    nodes = training.nodes or len(cluster.eligible_hosts)
    ask = Ask(job, nodes, training.gpus_per_node, training.gpu_model)
    slots = host_slots(cluster)
    result = plan(slots, free, ask)
    if isinstance(result, Placement):
        return {"hosts": list(result.hosts), "placement": "planned"}
    problems = [f"{result.message}. Nothing was changed"]
    if not result.never and ask.gpus_per_node:
        # Who holds the GPUs, as the GPU check names them.
        names = [h.name for h in candidates(slots, ask)]
        problems += fit_problems(swarm, job, own, names, ask.gpus_per_node)
    raise ConfigError(problems)


def queued_hosts(
    job: str,
    training: Training,
    cluster: StackConfig,
    swarm: SwarmGpus,
    old: Mapping[str, Any],
    entries: Sequence[Entry],
    now: float,
) -> tuple[dict[str, Any], Admission | None]:
    """The `hosts` and `placement` keys as `job_hosts` gives them, for a job the queue
    decides (module doc), and the pass when one was made: admitted, the keys of its
    placement; waiting, its named hosts or none (the pass's verdict says why).
    `entries`: the cluster's queue; `now`: the job's first submit when it has no entry.
    ConfigError: the cluster can never hold the job."""
    if holds_gpus(swarm, job) or not training.gpus_per_node:
        return job_hosts(job, training, cluster, swarm, old), None
    kept = old.get("hosts") if old.get("placement") != "planned" else None
    named = list(training.hosts or kept or [])
    nodes = training.nodes or len(named) or len(cluster.eligible_hosts)
    ask = Ask(job, nodes, training.gpus_per_node, training.gpu_model, tuple(named))
    own = next((e for e in entries if e.job == job), None)
    since = own.since if own is not None else now
    adm = admission(cluster, swarm, entries, Waiting(ask, training.priority, since))
    verdict = adm.verdict(job)
    if verdict.state == "refused":
        raise ConfigError([f"{verdict.reason}. Nothing was changed"])
    if verdict.state == "admitted":
        hosts = list(adm.admitted[job].hosts)
        return {"hosts": hosts, "placement": "named" if named else "planned"}, adm
    return ({"hosts": named, "placement": "named"} if named else {}), adm
