"""A job stack's configuration: its own `training` over its cluster stack's file.

A job stack file holds `kind: job`, `cluster` (the cluster stack's name),
`training`, and `manager` where the job goes through another of the cluster's managers
than its first. Everything else a job needs to place and launch its tasks (hosts, the
network, preflight, monitoring, the secrets' names, the image settings) is the
cluster's and is read from the cluster's stack file in this project, never copied: a
job follows its cluster's file as the repository has it. The cluster's `training`
section holds the defaults every job starts from (its data dir, launcher, shm size); a
job's keys replace them key by key. The cluster's resources themselves (image, network,
secret ids) reach the job through a stack reference (infra/components/clusterref.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.command import CommandError, split_command
from infra.config.stackfile import stack_file_values

JOB_KEYS = ("kind", "cluster", "manager", "training")
"""The keys a job stack's file may hold."""
CLUSTER_ONLY = ("kind", "training", "secrets", "jupyter", "manager")
"""The cluster's keys a job does not take as they are (its kind, its job defaults,
its secret values, what only the cluster deploys, a job's own `manager`). A job takes
the cluster's `monitoring` as it is: its ranks serve metrics when the cluster's
Prometheus scrapes."""


def job_names(project_dir: Path, cluster: str | None = None) -> list[str]:
    """The job stacks of the project in `project_dir` (stack files with `kind: job`),
    or those of cluster stack `cluster` only."""
    names = []
    for path in sorted(project_dir.glob("Pulumi.*.yaml")):
        try:
            values = stack_file_values(path.read_text())
        except (KeyError, TypeError, ValueError):
            continue
        if values.get("kind") == "job" and cluster in (None, values.get("cluster")):
            names.append(path.name.removeprefix("Pulumi.").removesuffix(".yaml"))
    return names


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over`'s keys over `base`'s, objects merged key by key, lists replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def command_defaults(defaults: dict[str, Any], training: Any) -> dict[str, Any]:
    """The cluster's job defaults for a job's `training`: with a `command`, without the
    cluster's `script` and `args` (the project's trainer's, which the command replaces:
    the rules refuse them beside a command), nor its `launcher` where the command names
    one (the command's launcher is the run's)."""
    if not isinstance(training, dict) or training.get("command") is None:
        return defaults
    drop = {"script", "args"}
    try:
        if split_command(training["command"]).launcher != "python":
            drop.add("launcher")
    except (CommandError, TypeError, AttributeError):
        pass  # the model names what is wrong with the command
    return {k: v for k, v in defaults.items() if k not in drop}


def job_config(
    job: dict[str, Any], stack: str, project_dir: Path
) -> tuple[dict[str, Any], set[str], list[str]]:
    """The raw config of job stack `stack` (its file's values `job`) with its cluster's.

    Returns the merged raw values, the keys to treat as secret, and the problems found
    (each naming key, value and what is allowed); with problems, the values are `job`.
    """
    # Pulumi.yaml's defaults ({} and [] for every object key) reach every stack's
    # program: only a value someone set is a cluster's key in the wrong file.
    problems = [
        f"{k}: belongs to the cluster stack, not a job stack; allowed in a job stack: "
        + ", ".join(JOB_KEYS)
        for k in sorted(set(job) - set(JOB_KEYS))
        if job[k] not in ({}, [], None)
    ]
    training = job.get("training") or {}
    run_name = training.get("run_name") if isinstance(training, dict) else None
    if run_name not in (None, stack):
        problems.append(
            f"training.run_name: {run_name!r} in job stack {stack!r}; allowed: unset or "
            f"{stack!r} (a job's run, checkpoints and services are named after its stack)"
        )
    name = job.get("cluster")
    if not isinstance(name, str) or not name:
        problems.append(
            f"cluster: {name!r}; allowed: the name of a stack of this project with kind: cluster"
        )
        return job, set(), problems
    path = project_dir / f"Pulumi.{name}.yaml"
    if not path.is_file():
        problems.append(
            f"cluster: {name!r} has no stack file {path.name} beside Pulumi.yaml; allowed: "
            "a stack of this project with kind: cluster"
        )
        return job, set(), problems
    cluster = stack_file_values(path.read_text())
    if cluster.get("kind") != "cluster":
        problems.append(
            f"cluster: {name!r} has kind {cluster.get('kind', 'single')!r}; allowed: a "
            "stack with kind: cluster"
        )
    if problems:
        return job, set(), problems
    raw = {k: v for k, v in cluster.items() if k not in CLUSTER_ONLY}
    defaults = command_defaults(cluster.get("training") or {}, training)
    raw["training"] = merged(defaults, {**training, "run_name": stack})
    raw["kind"], raw["cluster"] = "job", name
    if job.get("manager") is not None:
        raw["manager"] = job["manager"]
    # Only the secrets' names: their values stay encrypted in the cluster's file and
    # in the swarm; the job mounts them by the ids the cluster exports.
    secrets = cluster.get("secrets") or {}
    encrypted = all(isinstance(v, dict) and "secure" in v for v in secrets.values())
    raw["secrets"] = {k: None for k in secrets}
    return raw, {"secrets"} if encrypted else set(), problems
