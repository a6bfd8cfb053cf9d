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
jobs/record.py's, what is read on the master host jobs/master.py's, the job's stack
file (its values, reading and writing it) jobs/jobfile.py's; their names stay importable
from here, as the CLI and the tests use them. `stop` and `remove` are jobs/teardown.py's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pulumi import automation as auto

from infra.admission import Admission
from infra.components.swarm import endpoint
from infra.config import (
    ConfigError,
    StackConfig,
    Training,
    parse_job,
    stack_file_values,
    world_size_problems,
)
from infra.config import job_names as config_job_names
from infra.config.jobs import job_config
from infra.layout import training_service_names
from infra.providers.fit import SwarmGpus, fit_problems, read_swarm
from infra.providers.hostops import HostError
from infra.providers.queue import Entry, list_entries
from jobs.jobfile import JobSpec as JobSpec
from jobs.jobfile import carried_code as carried_code
from jobs.jobfile import file_values as file_values
from jobs.jobfile import full_values, ran_settings
from jobs.jobfile import job_settings as job_settings
from jobs.jobfile import job_values as job_values
from jobs.jobfile import kept_manager as kept_manager
from jobs.jobfile import parsed as parsed
from jobs.jobfile import stack_file as stack_file
from jobs.jobfile import write_job as write_job
from jobs.jobfile import write_values as write_values
from jobs.leader import leader_api as leader_api
from jobs.leader import leader_ssh as leader_ssh
from jobs.leader import quiet
from jobs.leader import reached as reached
from jobs.lock import holder_name as holder_name
from jobs.lock import submit_lock as submit_lock
from jobs.master import host_path as host_path
from jobs.master import last_metrics as last_metrics
from jobs.master import logs_command as logs_command
from jobs.master import metrics_script as metrics_script
from jobs.master import on_master as on_master
from jobs.master import task_address as task_address
from jobs.placement import queued_hosts, started_elsewhere
from jobs.queue import queued_row, record, revision, waiting_words
from jobs.queuemetrics import publish
from jobs.record import exported_run, listed_record, listed_state, state_hosts, state_manager
from jobs.record import run_record as run_record
from jobs.repoint import moved_job
from jobs.table import GPU_HEADER as GPU_HEADER
from jobs.table import HEADER as HEADER
from jobs.table import GpuRow as GpuRow
from jobs.table import JobRow as JobRow
from jobs.table import gpus as gpus
from jobs.table import list_lines as list_lines
from jobs.table import released_row, unread_row
from ops.project import ROOT

Printer = Callable[[str], Any]


def leader_gpus(cfg: StackConfig) -> SwarmGpus:
    """The GPUs of `cfg`'s cluster as its leader answers now (ConfigError: it does not)."""
    try:
        return read_swarm(endpoint(cfg.leader), leader_ssh(cfg))
    except HostError as e:
        raise ConfigError([f"the cluster's GPUs could not be read: {e}"]) from None


def gpus_free(spec: JobSpec) -> StackConfig:
    """The job's validated config, once its cluster's leader says the GPUs it asks
    for are free on each of its hosts (ConfigError: why not)."""
    cfg = parse_job(spec.values(), spec.name, ROOT)
    check_gpus(cfg)
    return cfg


def placed(
    spec: JobSpec, cluster: StackConfig, swarm: SwarmGpus, entries: Sequence[Entry] = ()
) -> tuple[JobSpec, Admission | None]:
    """`spec` with the hosts it runs on (jobs/placement.py): named, kept, or admitted by
    a pass over the cluster's queue `entries` and the GPUs free in `swarm`; and the pass
    (None: none was made). The pass's verdict says whether the job waits. ConfigError:
    the cluster can never hold it."""
    raw, _, problems = job_config(spec.values(), spec.name, ROOT)
    if problems:
        raise ConfigError(problems)
    path = stack_file(spec.name)
    old = stack_file_values(path.read_text()).get("training") or {} if path.exists() else {}
    if started_elsewhere(spec.name, old, swarm, {e.job for e in entries}):
        # Not adopted (`adopt`: its stack says no hosts). Planned afresh it could move,
        # and a move restarts the run.
        raise ConfigError([
            f"job {spec.name}: runs on cluster {spec.cluster} (a pass from another checkout "
            f"started it), while {path.name} here still says queued and its stack names "
            "no hosts; nothing was changed; allowed: submit it from the checkout that "
            f"started it, or `scripts/job stop {spec.name}` and submit it again (it "
            "resumes from its checkpoint)"
        ])  # fmt: skip
    training = Training.model_validate(raw["training"])
    keys, adm = queued_hosts(spec.name, training, cluster, swarm, old, entries, time.time())
    return replace(spec, hosts=keys.get("hosts"), placement=keys.get("placement")), adm


def check_gpus(cfg: StackConfig, swarm: SwarmGpus | None = None) -> None:
    """The check every preview of a job makes (infra/providers/fit.py), made before
    anything is written: the GPUs it asks for free on each of its hosts (`swarm`: as
    the leader answered already)."""
    gpus = cfg.training.gpus_per_node
    if gpus and cfg.job_name is not None:
        problems = fit_problems(
            swarm or leader_gpus(cfg),
            cfg.job_name,
            training_service_names(cfg.job_name),
            [h.name for h in cfg.training_hosts],
            gpus,
        )
        if problems:
            raise ConfigError(problems)


def _workspace(env: Mapping[str, str] | None) -> auto.LocalWorkspaceOptions:
    """This project's workspace, with the passphrase provider and `env` for the CLI."""
    return auto.LocalWorkspaceOptions(
        work_dir=str(ROOT), env_vars=dict(env or {}), secrets_provider="passphrase"
    )


def workspace_stack(name: str, env: Mapping[str, str] | None = None) -> auto.Stack:
    """Stack `name` of this project (created if new, with the passphrase provider)."""
    return auto.create_or_select_stack(stack_name=name, work_dir=str(ROOT), opts=_workspace(env))


def existing_stack(name: str, env: Mapping[str, str] | None = None) -> auto.Stack:
    """Stack `name` of this project when it is in the state backend already
    (auto.StackNotFoundError: it is not, and none is made)."""
    return auto.select_stack(stack_name=name, work_dir=str(ROOT), opts=_workspace(env))


def submit(spec: JobSpec, env: Mapping[str, str] | None = None, out: Printer = print) -> Any:
    """Write the job's stack file and `pulumi up` it; the engine's lines go to `out`.
    Returns the stack's outputs. Under the cluster's submit lock (jobs/lock.py), from
    the GPU check to the end of `up`, so two submits cannot both pass the check before
    either has its services: one admission pass over the cluster's queue and this job
    (jobs/placement.py `queued_hosts`); admitted, its full form; else its queued form
    (`training.queued`: its entry, no GPU), its place and reason printed and written
    into the entries. Nothing is written when the config is refused."""
    ran = ran_settings(spec.name)
    cluster = cluster_reached(spec.cluster, out)
    with cluster_lock(cluster, holder_name(spec.name), out):
        swarm = leader_gpus(cluster)
        api = leader_api(cluster)
        entries = list_entries(api)
        adopt(spec.name, swarm, {e.job for e in entries}, env, out)
        # A running job whose manager is lost goes on through this one (its file then
        # names it, which kept_manager reads): jobs/repoint.py. Only with a file here: a
        # stack selected with none gets one holding only the encryption salt.
        if file_values(spec.name) is not None:
            moved_job(workspace_stack(spec.name, env), spec.name, cluster, out)
        spec, adm = placed(spec, cluster, swarm, entries)
        spec = replace(spec, manager=kept_manager(spec.name, cluster, swarm))
        waits = adm is not None and adm.verdict(spec.name).state != "admitted"
        if waits:
            spec = replace(spec, extra={**spec.extra, "queued": {"revision": revision(ROOT)}})
        new = parse_job(spec.values(), spec.name, ROOT)
        if ran is not None:  # its run's checkpoints were saved at its world size then
            resumes = world_size_problems(new.training, ran.world_size, new.world_size)
            if resumes:
                raise ConfigError([f"job {spec.name!r}: {p}" for p in resumes])
        if not waits:
            check_gpus(new, swarm)
        path = write_job(spec)
        out(f"job {spec.name}: {path.name} written; pulumi up on cluster {spec.cluster}")
        # The outputs `up` read already: reading them again is two more CLI calls.
        result = workspace_stack(spec.name, env).up(on_output=out, color="never")
        if adm is not None:
            record(api, adm)
            publish(cluster, spec.cluster, list_entries(api), out)
    outputs = {k: v.value for k, v in result.outputs.items()}
    if adm is not None and waits:
        v = adm.verdict(spec.name)
        out(f"job {waiting_words(spec.name, spec.cluster, v.state, v.position, v.reason)}")
        return outputs
    run = outputs.get("run", {})
    out(f"job {spec.name}: run {run.get('state')} at step {run.get('step')}")
    return outputs


def adopt(
    name: str,
    swarm: SwarmGpus,
    waiting: Collection[str],
    env: Mapping[str, str] | None = None,
    out: Printer = print,
) -> bool:
    """Take over job `name` when a pass from another checkout started it (its file
    here still queued: `started_elsewhere`): its file written in the full form on the
    hosts and through the manager its stack's state names (jobs/record.py), as that
    pass wrote it, so the submit that follows keeps both and its run is not moved or
    restarted by it. Written before the submit's own settings are judged: refused,
    the file still says where the job runs. False: not such a job, or its state names
    no hosts (`placed` then refuses it); nothing written."""
    values = file_values(name)
    if values is None or not started_elsewhere(name, values.get("training") or {}, swarm, waiting):
        return False
    at = started_at(name, env)
    if at is None:
        return False
    hosts, manager = at
    write_values(name, full_values(values, hosts, manager))
    through = f" through manager {manager}" if manager else ""
    out(f"job {name}: started by a pass from another checkout on {', '.join(hosts)}{through}; "
        f"{stack_file(name).name} written in its full form from its stack")  # fmt: skip
    return True


def started_at(
    name: str, env: Mapping[str, str] | None = None
) -> tuple[list[str], str | None] | None:
    """The hosts (master first) and the manager job `name`'s stack's state names
    (jobs/record.py `state_hosts`, `state_manager`); None: no such stack (none is made),
    or its state names no hosts (not started: no GPU check in it)."""
    try:
        deployment = existing_stack(name, env).export_stack().deployment
    except auto.StackNotFoundError:
        return None
    hosts = state_hosts(deployment, name)
    return (hosts, state_manager(deployment, name)) if hosts else None


def cluster_lock(cfg: StackConfig, holder: str, out: Printer) -> Any:
    """Cluster `cfg`'s submit lock (jobs/lock.py), taken on its leader for `holder`: what
    a submit and a pass of the queue hold while they decide and start."""
    return submit_lock(endpoint(cfg.leader), holder, out, ssh=leader_ssh(cfg))


def cluster_settings(cluster: str) -> StackConfig:
    """Cluster stack `cluster`'s config as its jobs read it (a job with no `training`
    of its own: the cluster's hosts, leader and defaults; no secret value is read).
    ConfigError: why not."""
    # No job's ask: the cluster's default GPUs per node (and model) on its default node
    # count may be more than hosts with different counts can hold at once, which only
    # a job that asks for it is refused for (infra/config/rules/placement.py).
    ask = {"gpus_per_node": 0, "gpu_model": None}
    return parse_job({"kind": "job", "cluster": cluster, "training": ask}, cluster, ROOT)


def cluster_reached(cluster: str, out: Printer = quiet, prefer: str | None = None) -> StackConfig:
    """`cluster_settings(cluster)` going through the first of its managers that answers,
    `prefer` asked first (jobs/leader.py `reached`; each one passed over said through
    `out`)."""
    return reached(cluster_settings(cluster), out, prefer=prefer)


def cluster_gpus(cluster: str, out: Printer = quiet) -> list[GpuRow]:
    """Each host of cluster stack `cluster`, in its file's order: the GPUs its leader
    says are free now and the tasks holding the rest (what a job's submit is checked
    against, infra/providers/fit.py); through `out`, the manager they were read through
    when the cluster's first does not answer. ConfigError when no manager answers."""
    cfg = cluster_reached(cluster, out)
    swarm = leader_gpus(cfg)
    spares = {h.name for h in cfg.spares}
    return [
        GpuRow(
            host=h.name,
            role="spare" if h.name in spares else "",
            model=h.gpus.model or "-",
            free=swarm.free(h.name, ()) if h.name in swarm.capacity else None,
            total=swarm.capacity.get(h.name),
            held=tuple(swarm.held.get(h.name, [])),
        )
        for h in cfg.hosts
    ]


def job_names(cluster: str | None = None) -> list[str]:
    """The job stacks of this project, or those of cluster stack `cluster` only."""
    return config_job_names(ROOT, cluster)


def list_jobs(env: Mapping[str, str] | None = None, refresh: bool = False) -> list[JobRow]:
    """Every job with its run's state and reason (its run record as the last `up` or
    refresh read it; with `refresh`, a refresh now), its newest step and loss (read on
    the hosts now; the record's step where none is logged), and its GPUs; a released
    job's state, step and reason are its file's verdict, nothing asked. The stack's
    `run` output is not read: only an `up` computes it, so after a refresh it still says
    what the last `up` saw (a run whose budget was spent since read `running`). A job
    whose refresh fails is listed `unknown`, saying why (`listed_record`, `unread_row`)."""
    rows = []
    queues: dict[str, Any] = {}
    for name in job_names():
        cfg = job_settings(name)
        if cfg.queued:  # where it stands in its cluster's queue, or started elsewhere
            started = functools.partial(started_run, name, env, refresh)
            rows.append(queued_row(name, cfg, queues, lambda c: leader_api(reached(c)), started))
            continue
        if cfg.training.released is not None:  # its run ended: the verdict its file keeps
            rows.append(released_row(name, cfg, cfg.training.released))
            continue
        record, unread = listed_record(workspace_stack(name, env), name, refresh)
        run = record or {}
        metrics = last_metrics(cfg) if record is not None else {}
        row = JobRow(
            name=name,
            cluster=cfg.cluster or "",
            state="stopped" if record is None else str(run.get("state") or "unknown"),
            step=metrics.get("step", run.get("step")),
            loss=metrics.get("loss"),
            gpus=gpus(cfg),
            reason=str(run.get("reason") or ""),
        )
        rows.append(unread_row(row, unread) if unread else row)
    return rows


def started_run(
    name: str, env: Mapping[str, str] | None = None, refresh: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """The run in job `name`'s stack, for a job whose file here is queued with no entry
    on the leader (a pass from another checkout started it): its run record
    (`read_record`), or the verdict a released job's stack exports; and why it is not
    read now (`listed_state`: its refresh failed). None: no such stack (none is made),
    or a state with neither (its entry was lost, or it was stopped)."""
    try:
        stack = existing_stack(name, env)
    except auto.StackNotFoundError:
        return None, ""
    deployment, why = listed_state(stack, name, refresh)
    return run_record(deployment) or exported_run(deployment), why


def logs(
    name: str,
    node: str | None = None,
    rank: int | None = None,
    lines: int = 50,
    follow: bool = False,
    env: Mapping[str, str] | None = None,
) -> int:
    """Print the job's log (or one node's or rank's task) from its master host; the
    exit status of ssh. A job whose file here is queued while its stack's state names
    hosts (a pass from another checkout started it) is read where that state says it
    runs, its file left as it is (a submit takes it over: `adopt`)."""
    cfg = job_settings(name)
    if cfg.queued and (at := started_at(name, env)) is not None:
        cfg = parsed(name, full_values(file_values(name) or {}, *at))
    address = None
    if node is not None or rank is not None:
        outputs = workspace_stack(name, env).outputs()
        address = task_address(outputs["rankMap"].value if "rankMap" in outputs else [],
                               node, rank)  # fmt: skip
    return on_master(cfg, logs_command(cfg, address, lines, follow)).returncode
