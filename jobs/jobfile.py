"""A job's stack file: what a person submits (`JobSpec`), the file's values
(`job_values`), where it lives, how it is read and written (validated with its
cluster's file first, the encryption salt a stack init wrote kept), and which manager
a job keeps through a submit (`kept_manager`). jobs/command.py re-exports these names,
as the CLI and the tests use them from there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.config import ConfigError, StackConfig, parse_job, stack_file_values
from infra.config import stack_file_yaml as render_stack_file
from infra.layout import PROJECT
from infra.providers.fit import SwarmGpus
from jobs.placement import holds_gpus
from ops.project import ROOT


@dataclass(frozen=True)
class JobSpec:
    """What a person submits: a code dir and the flags of one experiment."""

    name: str
    cluster: str
    code_dir: Path
    script: str = "train.py"
    args: Sequence[str] = ()
    command: Sequence[str] | None = None
    """training.command, as typed after `--` (then `script` and `args` are not written)."""
    steps: int | None = None
    checkpoint_every: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    ds_config: str | None = None
    fork_server: bool = False
    """training.fork_server; written only when on (a job without it keeps its file)."""
    hosts: Sequence[str] | None = None
    """training.hosts, master first: named by the person (`--hosts`), or planned by
    `submit` (jobs/placement.py); written only when set."""
    placement: str | None = None
    """training.placement with `hosts`: `named` (default) or `planned`."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More `training` keys, as `--set key=json` gives them."""
    manager: str | None = None
    """The cluster manager the job goes through (`manager`); written only when set:
    `submit` sets it when the cluster's first manager does not answer."""

    def training(self) -> dict[str, Any]:
        """The job's `training` section: what the spec sets, nothing else (the rest is
        the cluster's defaults, infra/config/jobs.py)."""
        out: dict[str, Any] = {"code": {"dir": _shown(self.code_dir)}}
        if self.command is not None:
            out["command"] = list(self.command)
        else:
            out["script"] = self.script
        if self.args and self.command is None:
            out["args"] = list(self.args)
        keys = ("steps", "checkpoint_every", "nodes", "gpus_per_node", "gpu_model", "ds_config")
        for key in keys:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.fork_server:
            out["fork_server"] = True
        if self.hosts:
            out["hosts"] = list(self.hosts)
            out["placement"] = self.placement or "named"
        return {**out, **self.extra}

    def values(self) -> dict[str, Any]:
        """The job stack file's values for this spec (`job_values`)."""
        return job_values(self.cluster, self.training(), self.manager)


def _shown(path: Path) -> str:
    """A code dir as the stack file holds it: relative to the project when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def stack_file(name: str) -> Path:
    return ROOT / f"Pulumi.{name}.yaml"


CARRIED_DIR = ".dss-queued-code"
"""Where a queue pass unpacks the code a job's queue entry carries, in the checkout it
runs from (git-ignored; jobs/entryfile.py)."""


def carried_code(name: str) -> Path:
    """Job `name`'s versions of carried code unpacked in this checkout (`CARRIED_DIR`)."""
    return ROOT / CARRIED_DIR / name


def file_values(name: str) -> dict[str, Any] | None:
    """Job `name`'s stack file values (`job_values`) in this checkout; None: it has no
    file, or one holding none of the project's keys (the engine writes a file with only
    the encryption salt for a stack selected with no file: jobs/release.py)."""
    path = stack_file(name)
    if not path.exists():
        return None
    text = path.read_text()
    if not (yaml.safe_load(text) or {}).get("config"):
        return None
    return stack_file_values(text)


def job_settings(name: str) -> StackConfig:
    """Job `name`'s validated config, its cluster's file included (ConfigError: why not)."""
    return parse_job(stack_file_values(stack_file(name).read_text()), name, ROOT)


def ran_settings(name: str) -> StackConfig | None:
    """Job `name`'s config as its file here says it ran (or runs): None when it has no
    file, a queued one (it never ran from here) or one the rules refuse now."""
    values = file_values(name)
    if values is None:
        return None
    try:
        cfg = parse_job(values, name, ROOT)
    except ConfigError:
        return None
    return None if cfg.queued else cfg


def job_values(cluster: Any, training: Mapping[str, Any], manager: Any = None) -> dict[str, Any]:
    """A job stack file's values: its cluster, its `training`, and its `manager` when
    it has one (a job without one goes through its cluster's first manager)."""
    out = {"kind": "job", "cluster": cluster, "training": dict(training)}
    return {**out, "manager": manager} if manager else out


def full_values(
    values: Mapping[str, Any], hosts: Sequence[str], manager: str | None
) -> dict[str, Any]:
    """The full form of a queued job's stack file values `values`, on `hosts` (master
    first) through `manager` (None: the cluster's first): without the `queued` mark,
    its hosts `named` where the queued file named them, else `planned`."""
    training = dict(values.get("training") or {})
    training.pop("queued", None)
    named = training.get("hosts") and training.get("placement") != "planned"
    training["hosts"] = list(hosts)
    training["placement"] = "named" if named else "planned"
    return job_values(values.get("cluster"), training, manager)


def kept_manager(name: str, cluster: StackConfig, swarm: SwarmGpus) -> str | None:
    """The manager job `name` goes through after a submit: the one its file names while
    it may have services (a running job keeps its way in: its services, roster and
    launch were made through it); else, new, queued, released or a GPU job holding no
    GPU (stopped), the one `cluster` reached (None: its first). A CPU job in its full
    form keeps its file's: nothing tells whether it runs."""
    path = stack_file(name)
    if not path.exists():
        return cluster.manager
    try:
        old = job_settings(name)
    except ConfigError:  # a file the submit replaces: nothing was made by it
        return cluster.manager
    idle = old.queued or old.training.released is not None
    if idle or (old.training.gpus_per_node and not holds_gpus(swarm, name)):
        return cluster.manager
    return old.manager


def write_job(spec: JobSpec) -> Path:
    """Write the job's stack file after validating it with its cluster's, keeping the
    encryption salt a stack init wrote. Nothing is written when the config is refused."""
    return write_values(spec.name, spec.values())


def parsed(name: str, raw: Mapping[str, Any]) -> StackConfig:
    """Job `name`'s stack file values `raw` (`job_values`) validated with its
    cluster's. ConfigError: why not."""
    return parse_job(dict(raw), name, ROOT)


def write_values(name: str, raw: Mapping[str, Any]) -> Path:
    """`write_job` for the stack file's values `raw` (`job_values`)."""
    parsed(name, raw)
    path = stack_file(name)
    text = render_stack_file({f"{PROJECT}:{k}": v for k, v in raw.items()})
    if path.exists():
        old = yaml.safe_load(path.read_text()) or {}
        if "encryptionsalt" in old:
            text += yaml.safe_dump({"encryptionsalt": old["encryptionsalt"]})
    path.write_text(text)
    return path
