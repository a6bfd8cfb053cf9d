"""What the job command does, as functions the CLI (jobs/__main__.py) and the tests call.

Each engine operation goes through the Automation API on this project's directory
(`LocalWorkspace` over the checkout, the pinned CLI on PATH from scripts/env.sh), so
a job's program is the same `__main__.py` every stack runs, and its stack file is
the one `submit` wrote. What is read from the hosts (a job's newest metrics line, its
launcher log) goes over SSH to the cluster's master host with the cluster's own
settings (`preflight.ssh_private_key_file`, `ssh_known_hosts_file`). A run's state is
read from the job stack's state, where its run record (the TrainingRun resource) holds
what the last `up` or refresh read; never from the stack's outputs, which only an `up`
computes (a refresh leaves them as they were).

What the command prints is jobs/table.py's, the reading of a run record from a state
jobs/record.py's; their names stay importable from here, as the CLI and the tests use
them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from infra.components.hostfacts import ssh_target
from infra.components.swarm import endpoint
from infra.config import ConfigError, StackConfig, Training, parse_job, stack_file_values
from infra.config import job_names as config_job_names
from infra.config import stack_file_yaml as render_stack_file
from infra.config.jobs import job_config
from infra.layout import PROJECT, training_service_names
from infra.providers.fit import SwarmGpus, fit_problems, read_swarm
from infra.providers.hostops import HostError, ssh_argv
from infra.render.launch import metrics_path
from infra.render.runfiles import launcher_log
from jobs.lock import holder_name, submit_lock
from jobs.placement import job_hosts
from jobs.record import run_record as run_record
from jobs.table import GPU_HEADER as GPU_HEADER
from jobs.table import HEADER as HEADER
from jobs.table import GpuRow as GpuRow
from jobs.table import JobRow as JobRow
from jobs.table import gpus as gpus
from jobs.table import list_lines as list_lines
from ops.project import ROOT

Printer = Callable[[str], Any]


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


def _shown(path: Path) -> str:
    """A code dir as the stack file holds it: relative to the project when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def stack_file(name: str) -> Path:
    return ROOT / f"Pulumi.{name}.yaml"


def job_settings(name: str) -> StackConfig:
    """Job `name`'s validated config, its cluster's file included (ConfigError: why not)."""
    return parse_job(stack_file_values(stack_file(name).read_text()), name, ROOT)


def _raw(spec: JobSpec) -> dict[str, Any]:
    """The job stack file's values for `spec`."""
    return {"kind": "job", "cluster": spec.cluster, "training": spec.training()}


def leader_ssh(cfg: StackConfig) -> dict[str, Any] | None:
    """The cluster leader's SSH settings from the stack files (the key, known_hosts and
    jump host of its `ssh:` block), for its Docker client; None: not ssh://."""
    if not cfg.leader.docker_host.startswith("ssh://"):
        return None
    return cfg.ssh_for(cfg.leader).props()


def _swarm_gpus(cfg: StackConfig) -> SwarmGpus:
    """The GPUs of `cfg`'s cluster as its leader answers now (ConfigError: it does not)."""
    try:
        return read_swarm(endpoint(cfg.leader), leader_ssh(cfg))
    except HostError as e:
        raise ConfigError([f"the cluster's GPUs could not be read: {e}"]) from None


def gpus_free(spec: JobSpec) -> StackConfig:
    """The job's validated config, once its cluster's leader says the GPUs it asks
    for are free on each of its hosts (ConfigError: why not)."""
    cfg = parse_job(_raw(spec), spec.name, ROOT)
    check_gpus(cfg)
    return cfg


def placed(spec: JobSpec, cluster: StackConfig, swarm: SwarmGpus) -> JobSpec:
    """`spec` with the hosts it runs on (jobs/placement.py): named, kept or planned from
    the GPUs free in `swarm`. ConfigError: the cluster cannot hold it, or not now."""
    raw, _, problems = job_config(_raw(spec), spec.name, ROOT)
    if problems:
        raise ConfigError(problems)
    path = stack_file(spec.name)
    old = stack_file_values(path.read_text()).get("training") or {} if path.exists() else {}
    training = Training.model_validate(raw["training"])
    keys = job_hosts(spec.name, training, cluster, swarm, old)
    return replace(spec, hosts=keys.get("hosts"), placement=keys.get("placement"))


def check_gpus(cfg: StackConfig, swarm: SwarmGpus | None = None) -> None:
    """The check every preview of a job makes (infra/providers/fit.py), made before
    anything is written: the GPUs it asks for free on each of its hosts (`swarm`: as
    the leader answered already)."""
    gpus = cfg.training.gpus_per_node
    if gpus and cfg.job_name is not None:
        problems = fit_problems(
            swarm or _swarm_gpus(cfg),
            cfg.job_name,
            training_service_names(cfg.job_name),
            [h.name for h in cfg.training_hosts],
            gpus,
        )
        if problems:
            raise ConfigError(problems)


def write_job(spec: JobSpec) -> Path:
    """Write the job's stack file after validating it with its cluster's, keeping the
    encryption salt a stack init wrote. Nothing is written when the config is refused."""
    raw = _raw(spec)
    parse_job(raw, spec.name, ROOT)
    path = stack_file(spec.name)
    text = render_stack_file({f"{PROJECT}:{k}": v for k, v in raw.items()})
    if path.exists():
        import yaml

        old = yaml.safe_load(path.read_text()) or {}
        if "encryptionsalt" in old:
            text += yaml.safe_dump({"encryptionsalt": old["encryptionsalt"]})
    path.write_text(text)
    return path


def workspace_stack(name: str, env: Mapping[str, str] | None = None) -> auto.Stack:
    """Stack `name` of this project (created if new, with the passphrase provider)."""
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(ROOT), env_vars=dict(env or {}), secrets_provider="passphrase"
    )
    return auto.create_or_select_stack(stack_name=name, work_dir=str(ROOT), opts=opts)


def submit(spec: JobSpec, env: Mapping[str, str] | None = None, out: Printer = print) -> Any:
    """Write the job's stack file and `pulumi up` it; the engine's lines go to `out`.
    Returns the stack's outputs. Nothing is written when the config is refused or the
    GPUs it asks for are held by another job. From the GPU check to the end of `up` it
    holds the cluster's submit lock (jobs/lock.py), so that two submits cannot both
    pass the check before either has its services."""
    cluster = cluster_settings(spec.cluster)
    with submit_lock(
        endpoint(cluster.leader), holder_name(spec.name), out, ssh=leader_ssh(cluster)
    ):
        swarm = _swarm_gpus(cluster)
        spec = placed(spec, cluster, swarm)
        check_gpus(parse_job(_raw(spec), spec.name, ROOT), swarm)
        path = write_job(spec)
        out(f"job {spec.name}: {path.name} written; pulumi up on cluster {spec.cluster}")
        stack = workspace_stack(spec.name, env)
        # The outputs `up` read already: reading them again is two more CLI calls.
        result = stack.up(on_output=out, color="never")
    outputs = {k: v.value for k, v in result.outputs.items()}
    run = outputs.get("run", {})
    out(f"job {spec.name}: run {run.get('state')} at step {run.get('step')}")
    return outputs


def cluster_settings(cluster: str) -> StackConfig:
    """Cluster stack `cluster`'s config as its jobs read it (a job with no `training`
    of its own: the cluster's hosts, leader and defaults; no secret value is read).
    ConfigError: why not."""
    return parse_job({"kind": "job", "cluster": cluster}, cluster, ROOT)


def cluster_gpus(cluster: str) -> list[GpuRow]:
    """Each host of cluster stack `cluster`, in its file's order: the GPUs its leader
    says are free now and the tasks holding the rest (what a job's submit is checked
    against, infra/providers/fit.py). ConfigError when the leader does not answer."""
    cfg = cluster_settings(cluster)
    swarm = _swarm_gpus(cfg)
    spares = {h.name for h in cfg.spares}
    return [
        GpuRow(
            host=h.name,
            role="spare" if h.name in spares else "",
            free=swarm.free(h.name, ()) if h.name in swarm.capacity else None,
            total=swarm.capacity.get(h.name),
            held=tuple(swarm.held.get(h.name, [])),
        )
        for h in cfg.hosts
    ]


def job_names(cluster: str | None = None) -> list[str]:
    """The job stacks of this project, or those of cluster stack `cluster` only."""
    return config_job_names(ROOT, cluster)


def on_master(cfg: StackConfig, script: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run shell `script` on the cluster's master host over SSH, as the preflight
    reaches it (the cluster's key file and known_hosts); its output goes where `kw`
    says (the terminal unless captured)."""
    argv = ssh_argv(ssh_target(cfg, cfg.master))
    return subprocess.run(argv, input=script, text=True, check=False, **kw)


def host_path(cfg: StackConfig, task_path: str) -> str:
    """A path under the tasks' /data as the hosts see it (training.data_dir)."""
    return cfg.training.data_dir + task_path.removeprefix("/data")


def metrics_script(cfg: StackConfig) -> str:
    """Shell, on the master host, for the job's newest metrics line (nothing if none)."""
    return f"tail -n1 {shlex.quote(metrics_path(cfg))} 2>/dev/null"


def last_metrics(cfg: StackConfig) -> dict[str, Any]:
    """The job's newest metrics line (step, loss), read on the master host; {} if none."""
    proc = on_master(cfg, metrics_script(cfg), capture_output=True)
    try:
        return dict(json.loads(proc.stdout.strip() or "{}"))
    except ValueError:
        return {}


def list_jobs(env: Mapping[str, str] | None = None, refresh: bool = False) -> list[JobRow]:
    """Every job with its run's state and reason (its run record as the last `up` or
    refresh read it; with `refresh`, a refresh now), its newest step and loss (read on
    the hosts now; the record's step where none is logged), and its GPUs. The stack's
    `run` output is not read: only an `up` computes it, so after a refresh it still says
    what the last `up` saw (a run whose budget was spent since read `running`)."""
    rows = []
    for name in job_names():
        cfg = job_settings(name)
        stack = workspace_stack(name, env)
        if refresh:
            stack.refresh(color="never")
        record = run_record(stack.export_stack().deployment)
        run = record or {}
        metrics = last_metrics(cfg) if record is not None else {}
        rows.append(
            JobRow(
                name=name,
                cluster=cfg.cluster or "",
                state="stopped" if record is None else str(run.get("state") or "unknown"),
                step=metrics.get("step", run.get("step")),
                loss=metrics.get("loss"),
                gpus=gpus(cfg),
                reason=str(run.get("reason") or ""),
            )
        )
    return rows


def task_address(
    rank_map: Sequence[Mapping[str, Any]], node: str | None = None, rank: int | None = None
) -> str:
    """The address of the task that runs global rank `rank`, or the task on swarm node
    `node` (the job's `rankMap` output): what pdsh prefixes that task's lines with."""
    for entry in rank_map:
        if entry["node"] == node or (rank is not None and rank in entry["ranks"]):
            return str(entry["address"])
    nodes = ", ".join(str(e["node"]) for e in rank_map)
    ranks = sum(len(e["ranks"]) for e in rank_map)
    key, value = ("--node", node) if node is not None else ("--rank", rank)
    raise ConfigError(
        [f"{key}: {value!r} is not in the job; allowed: nodes {nodes}, ranks 0-{ranks - 1}"]
    )


def logs_command(cfg: StackConfig, address: str | None, lines: int, follow: bool) -> str:
    """Shell, on the master host, for the job's launcher log: every rank's lines, or
    one task's (pdsh prefixes each of its lines with the task's address)."""
    path = host_path(cfg, launcher_log(cfg.training.run_name))
    tail = f"tail -n {lines} {'-F ' if follow else ''}{shlex.quote(path)}"
    if address is None:
        return tail
    return f"{tail} | grep --line-buffered -F -- {shlex.quote(address + ': ')}"


def logs(
    name: str,
    node: str | None = None,
    rank: int | None = None,
    lines: int = 50,
    follow: bool = False,
    env: Mapping[str, str] | None = None,
) -> int:
    """Print the job's log (or one node's or rank's task) from its master host; the
    exit status of ssh."""
    cfg = job_settings(name)
    address = None
    if node is not None or rank is not None:
        outputs = workspace_stack(name, env).outputs()
        address = task_address(outputs["rankMap"].value if "rankMap" in outputs else [],
                               node, rank)  # fmt: skip
    return on_master(cfg, logs_command(cfg, address, lines, follow)).returncode


def stop(name: str, env: Mapping[str, str] | None = None, out: Printer = print) -> None:
    """Destroy the job's resources: its launch stops the run (the ranks checkpoint on
    SIGTERM), then its services go. Its stack, stack file, checkpoints and logs stay,
    so `submit` again resumes it."""
    stack = workspace_stack(name, env)
    stack.destroy(on_output=out, color="never")
    out(f"job {name}: stopped; its checkpoints and logs stay on the data dir")


def remove(name: str, env: Mapping[str, str] | None = None, out: Printer = print) -> None:
    """Stop the job, then remove its stack and its stack file."""
    stop(name, env, out)
    stack = workspace_stack(name, env)
    stack.workspace.remove_stack(name)
    stack_file(name).unlink(missing_ok=True)
    out(f"job {name}: stack and {stack_file(name).name} removed")
