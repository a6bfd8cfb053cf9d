"""`scripts/job resize NAME --nodes N`: a running job's node count changed through its
own stack (issue 47, item 4; docs/design/sharing.md, 3.4), the seed guide's `docker
service scale` as code.

The job's stack file gets the new `training.nodes` (and `training.hosts`, where it has
hosts), then `pulumi up` of its stack, under the cluster's submit lock as a submit:

- **Shrink** keeps the first N of its hosts: the master (the first) never moves.
- **Grow** keeps every host it has and adds hosts whose GPUs (of its model) are free
  now, best fit as a submit plans (infra/placement.py). While any job waits in the
  cluster's queue a grow is refused: the GPUs it would take are owed to the waiting
  jobs in order (the starvation bound of 3.3 holds); a shrink is always allowed.
- What cannot be had now, or ever, is refused naming the job and the shortfall, before
  anything is written.

The `up` replaces the workers (their constraints or replica count changed), the roster
changes, and the launch stops the run (SIGTERM: the ranks checkpoint) and relaunches it
at the new world size. The project's train.py re-shards the newest checkpoint through
DeepSpeed's universal checkpoint (`--on-resize universal`, its default); a command's
own script loads its checkpoint itself: where its DeepSpeed config loads universal
checkpoints, each start first makes the newest one universal (infra/task/universal.py);
where it partitions the optimizer state (ZeRO) without that, the resize is refused, as
the script's load would fail at the new size (infra/config/resume.py
`world_size_problems`; docs/jobs.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infra.config import ConfigError, stack_file_values, world_size_problems
from infra.config.rules.placement import host_slots
from infra.layout import training_service_names
from infra.placement import NODES_KEY, Ask, HostSlot, Placement, plan
from infra.providers.fit import SwarmGpus
from infra.providers.queue import Entry, list_entries
from jobs import command
from jobs.placement import holds_gpus
from jobs.repoint import moved_job

WAITING = ("queued", "reserved")
"""The entry states of a job that waits for GPUs."""


def resized_hosts(
    ask: Ask,
    hosts: Sequence[str],
    slots: Sequence[HostSlot],
    free: Mapping[str, int],
    waiting: Sequence[str],
) -> list[str]:
    """Job `ask.job`'s hosts at `ask.nodes` nodes, from its `hosts` now (master first),
    the cluster's `slots`, the GPUs free on each host (`free`: held by no other job) and
    the jobs that wait in its queue (module doc). ConfigError: why not."""
    nodes, job = ask.nodes, ask.job
    if nodes <= len(hosts):
        return list(hosts[:nodes])
    if waiting:
        raise ConfigError([
            f"{NODES_KEY}: job {job!r} cannot grow to {nodes} node(s) while jobs wait in "
            f"the queue ({', '.join(waiting)}): the GPUs free now are theirs first; "
            f"allowed: at most {len(hosts)} node(s) now, or grow once the queue is empty. "
            "Nothing was changed"
        ])  # fmt: skip
    mine = set(hosts)
    more = Ask(job, nodes - len(mine), ask.gpus_per_node, ask.gpu_model)
    others = [s for s in slots if s.name not in mine]
    result = plan(others, {h: n for h, n in free.items() if h not in mine}, more)
    if not isinstance(result, Placement):
        raise ConfigError([
            f"job {job!r} grows from {len(hosts)} to {nodes} node(s) only with "
            f"{more.nodes} more host(s) beside {', '.join(hosts)}: {result.message}. "
            "Nothing was changed"
        ])  # fmt: skip
    return [*hosts, *result.hosts]


def waiting_jobs(entries: Sequence[Entry], job: str) -> list[str]:
    """The jobs other than `job` that wait in the queue `entries`."""
    return [e.job for e in entries if e.job != job and e.state in WAITING]


def resize(
    name: str, nodes: int, env: Mapping[str, str] | None = None, out: command.Printer = print
) -> dict[str, Any]:
    """Change job `name`'s node count to `nodes` and `pulumi up` it (module doc); the
    stack's outputs. ConfigError: refused, nothing written."""
    path = command.stack_file(name)
    if not path.exists():
        raise ConfigError([f"job {name!r} has no stack file {path.name}; allowed: "
                           f"{', '.join(command.job_names()) or 'none submitted'}"])  # fmt: skip
    cfg = command.job_settings(name)
    if cfg.queued or cfg.released:
        form = "queued here" if cfg.queued else "released (its run ended)"
        allowed = "submit it again with --nodes"
        if cfg.queued:  # it may run all the same: started by a pass from another checkout
            allowed += ("; or, if a pass from another checkout started it (`scripts/job "
                        "list`), submit it again as it is, which takes it over here, then "
                        "resize it")  # fmt: skip
        raise ConfigError([f"{NODES_KEY}: job {name!r} is {form}: only a running job is "
                           f"resized; allowed: {allowed}"])  # fmt: skip
    if nodes < 1:
        raise ConfigError([f"--nodes {nodes}; allowed: 1 or more"])
    values = stack_file_values(path.read_text())
    training = dict(values.get("training") or {})
    before = [h.name for h in cfg.training_hosts]
    if nodes == len(before):
        out(f"job {name}: already on {nodes} node(s) ({', '.join(before)}); nothing to do")
        return {}
    # A script whose ZeRO checkpoints load only at their world size: refused before
    # anything is touched, not a run that fails at its next start.
    resumes = world_size_problems(cfg.training, cfg.world_size, nodes * cfg.training.ranks_per_node)
    if resumes:
        raise ConfigError([f"job {name!r}: {p}" for p in resumes])
    cluster = command.cluster_reached(str(values.get("cluster")), out)
    with command.cluster_lock(cluster, command.holder_name(name), out):
        # Its manager lost: the resize goes through the one reached (jobs/repoint.py).
        stack = command.workspace_stack(name, env)
        manager = moved_job(stack, name, cluster, out) or values.get("manager")
        swarm = command.leader_gpus(cluster)
        t = cfg.training
        if t.gpus_per_node and not holds_gpus(swarm, name):
            raise ConfigError([f"job {name!r} holds no GPU (its services do not run); "
                               "allowed: resize a running job, or submit it again with "
                               "--nodes"])  # fmt: skip
        training["nodes"] = nodes
        if training.get("hosts"):
            ask = Ask(name, nodes, t.gpus_per_node, t.gpu_model)
            waiting = waiting_jobs(list_entries(command.leader_api(cluster)), name)
            hosts = resized_hosts(ask, before, host_slots(cluster), _free(swarm, name), waiting)
            training["hosts"] = hosts
        raw = command.job_values(values.get("cluster"), training, manager)
        resized = command.parsed(name, raw)
        command.check_gpus(resized, swarm)
        command.write_values(name, raw)
        after = [h.name for h in resized.training_hosts]
        out(f"job {name}: {path.name} written, {len(before)} -> {nodes} node(s) "
            f"({', '.join(after)}); pulumi up")  # fmt: skip
        result = stack.up(on_output=out, color="never")
    outputs = {k: v.value for k, v in result.outputs.items()}
    run = outputs.get("run", {})
    out(f"job {name}: run {run.get('state')} at step {run.get('step')} on {nodes} node(s)")
    return outputs


def _free(swarm: SwarmGpus, job: str) -> dict[str, int]:
    """The GPUs on each host no other job holds (the job's own count as free)."""
    own = training_service_names(job)
    return {h: swarm.free(h, own) for h in swarm.capacity}
