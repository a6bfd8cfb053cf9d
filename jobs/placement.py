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
  holds the GPUs; there is no queue yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config import ConfigError, StackConfig, Training
from infra.config.rules.placement import host_slots
from infra.layout import training_service_names
from infra.placement import Ask, Placement, candidates, plan
from infra.providers.fit import SwarmGpus, fit_problems


def holds_gpus(swarm: SwarmGpus, job: str) -> bool:
    """Job `job`'s services hold GPUs now (its tasks run)."""
    return any(h.job == job for holders in swarm.held.values() for h in holders)


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
