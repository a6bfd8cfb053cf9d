"""The training job: its image, mounts, restart policy and launch."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from infra.command import Command, CommandError, split_command
from infra.config.models.base import MODEL_CONFIG, Port
from infra.config.models.cluster import user_labels
from infra.config.units import duration_seconds, size_bytes


class _Model(BaseModel):
    model_config = MODEL_CONFIG


class Image(_Model):
    """How the training image is built and distributed."""

    context: str = "images"
    """Build context, relative to the project. Default `images`."""
    dockerfile: str = "Dockerfile"
    """Dockerfile, relative to the context. Default `Dockerfile`."""
    build_args: dict[str, str] = {}
    """Build args: only ARGs the Dockerfile declares (images/Dockerfile: BASE_IMAGE,
    BUILD_IMAGE, TORCH_SPEC, PIP_OFFLINE, ...; see the rules below), e.g. `BASE_IMAGE:
    nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04` and `TORCH_SPEC: torch==2.6.0`.
    Default none."""
    repository: str = "deepspeed-swarm/train"
    """Repository name (without registry). Default `deepspeed-swarm/train`."""
    registry: str | None = None
    """Registry host[:port] to push to; services pin the pushed digest. Default none:
    the image is built on every host instead."""
    build_host: str = "unix:///var/run/docker.sock"
    """Docker endpoint that builds (and pushes) the image. Default the local engine."""
    builder: Literal["BuilderV1", "BuilderBuildKit"] = "BuilderBuildKit"
    """Docker builder the provider asks the engine for. Default BuildKit."""


class Mount(_Model):
    """A host path bind-mounted into every training task."""

    source: str
    """Host path (the same on every host, e.g. an NFS mount)."""
    target: str
    """Path inside the task."""
    read_only: bool = True
    """Mount read-only. Default true."""


class RestartPolicy(_Model):
    """Swarm restart policy of the training tasks."""

    condition: Literal["none", "on-failure", "any"] = "on-failure"
    """When Swarm restarts a task. Default `on-failure`."""
    delay: str = "10s"
    """Wait between restarts. Default `10s`."""
    max_attempts: Annotated[int, Field(ge=0)] = 3
    """Restarts within `window` before giving up (0 = unlimited). Default 3."""
    window: str = "120s"
    """Window over which restarts are counted. Default `120s`."""

    @field_validator("delay", "window")
    @classmethod
    def _duration(cls, v: str) -> str:
        duration_seconds(v)
        return v


class Recovery(_Model):
    """What happens when the run stops before its last step (infra/providers/run.py).

    A supervisor in the master task (one per task for SSH-less launches) restarts a
    launcher that exited with an error, from the newest complete checkpoint, up to
    `max_restarts` times per launch; each restart is recorded in
    `/data/logs/<run>/restarts.jsonl` and counted in the `run` stack output. A run
    that spent its budget, or is stalled, is drift: refresh names it, and `pulumi up`
    relaunches it."""

    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    """Automatic restarts of a crashed launcher per launch (0: none, the run fails at
    its first crash). Default 3."""
    restart_delay: str = "10s"
    """Wait before an automatic restart (a crashed peer's ports are freed). Default `10s`."""
    stall_after: str = "15m"
    """A run with live processes and no new step for this long is stalled (at least
    `30s`; count the model's build and the first checkpoint load). Default `15m`."""
    follow_moves: bool = False
    """The run follows its tasks: when a worker task stops answering (its host lost)
    the master task's supervisor stops the blocked launcher and, once Swarm has moved
    the task (to a spare), restarts it on the tasks that answer, from the newest
    complete checkpoint, with no `pulumi up` (each such restart counts against
    `max_restarts`; the hostfile's change is recorded in the restarts file). The
    roster keeps the placement the run was launched on while one of its tasks still
    runs, so the next preview is a no-op (every task re-created is read again).
    Needs launcher `deepspeed` with launch_mode `pdsh`; a lost master still needs
    `pulumi up` unless `follow_master` is set. Default false: a stack deployed without
    it keeps its launch (docs/run.md)."""
    follow_master: bool = False
    """The run follows its master task too (with `follow_moves`, in a single stack with
    a spare): the master may run on its host or on a spare (node label
    `dss.master_ok`), and when its task starts again anywhere with the same spec (its
    host lost, drained, or the container died) it takes the run over once the old
    supervisor's lease has lapsed: it stops the ranks left on the workers, puts its own
    address first in the hostfile and restarts the launcher from the newest complete
    checkpoint, with no `pulumi up`. Each takeover counts against `max_restarts`. An
    update that replaces the tasks never takes over (the launch relaunches). Default
    false: turning it on changes the master service's placement and command, which
    restarts the run once (docs/run.md, "A lost master")."""

    @field_validator("restart_delay")
    @classmethod
    def _delay(cls, v: str) -> str:
        duration_seconds(v)
        return v

    @field_validator("stall_after")
    @classmethod
    def _stall(cls, v: str) -> str:
        if duration_seconds(v) < 30:
            raise ValueError("allowed: a duration of at least 30s")
        return v


class Code(_Model):
    """The training code, synced to the tasks instead of baked into the image."""

    dir: str | None = None
    """A directory on the machine that runs Pulumi, relative to the project (or
    absolute), holding the training code. Set: its files, content-hashed, are copied
    to `/data/code/<run_name>/<digest>/` on the shared data dir and run on the
    cluster's image, `training.script` is a path inside it, and a code change
    relaunches the run without a new image or a rolled service. At most 64 MiB and
    10000 files. Default none: the image's own code."""
    exclude: list[str] = [".git", "__pycache__", "*.pyc", ".ipynb_checkpoints", ".venv"]
    """Names (globs, matched against every path component) left out of the bundle.
    Default `.git`, `__pycache__`, `*.pyc`, `.ipynb_checkpoints`, `.venv`."""


class Queued(_Model):
    """A job waiting in its cluster's queue, as `scripts/job submit` writes it."""

    revision: str = ""
    """The project's git commit the job was submitted from, recorded in its queue
    entry. Default empty (not a git checkout)."""


class Released(_Model):
    """A job whose run ended, released from its GPUs: the run's last verdict, as
    `scripts/job queue CLUSTER --run` read it from the job's run record."""

    state: Literal["finished", "failed"]
    """How the run ended: `finished` (its last step the target) or `failed`."""
    step: int | None = None
    """The run's last logged step. Default none (none was logged)."""
    reason: str = ""
    """Why it failed, as its run record says. Default empty (a finished run)."""


class Training(_Model):
    """The training job."""

    launcher: Literal["deepspeed", "torchrun"] = "deepspeed"
    """Launcher. Default `deepspeed`."""
    launch_mode: Literal["pdsh", "no_ssh"] = "pdsh"
    """How the deepspeed launcher reaches the workers: `pdsh` over SSH from the
    master, or `no_ssh` (one launcher per node with its node rank; torchrun always
    runs this way). Default `pdsh`. (No OpenMPI: the image ships no mpirun.)"""
    fork_server: bool = False
    """Start the launchers and ranks as forks of one interpreter per task that has
    imported torch (and DeepSpeed, where the image's torch has no CUDA) once, instead
    of each importing them anew: a code change or an automatic restart reaches its
    first step sooner. Python is run as before for anything it cannot serve. Needs
    launcher `deepspeed`. Turning it on or off relaunches the run once. Default false
    (docs/code.md, "The fork server")."""
    script: str = "/opt/dss/train.py"
    """Training script inside the image; with `code.dir` set, a path relative to that
    directory (e.g. `train.py`). Default `/opt/dss/train.py`."""
    code: Code = Code()
    """Training code synced from a directory instead of the image's. Default none."""
    args: list[str] = []
    """The script's arguments, after the launcher's flags: nothing else is added (the
    run's settings reach the script as DSS_* variables, docs/jobs.md). Default none."""
    command: list[str] | str | None = None
    """The job's command line as typed on one node, a list of words or a shell string:
    `deepspeed [options] train.py [args]`, `torchrun [options] train.py [args]`,
    `python -m torch.distributed.run ...`, or `python[3] [-u] train.py|-m module [args]`
    (run under `launcher`). The program adds only what the launcher needs to span the
    cluster (hostfile, master address and port, node count and rank, processes per
    node) and refuses those options here; the script and its arguments are the user's
    (a script path is relative to `code.dir`). Sets `launcher` (which may only agree);
    not with `script` or `args`. Default none: `script` with `args`, launched the same way."""
    ds_config: dict[str, Any] | str = "/opt/dss/ds_config.json"
    """DeepSpeed config: an inline object, or a path inside the image. Default the image's."""
    gpus_per_node: Annotated[int, Field(ge=0, le=16)] = 8
    """GPUs each node's task reserves and launches ranks on (0 = CPU ranks): at most
    every training host's count; in a cluster stack its jobs' default, at most the
    largest count (a job is placed on hosts that have it). Default 8."""
    gpu_model: str | None = None
    """The GPU model every training task needs (a `hosts[].gpus.model`): every training
    host must have it, and Swarm places a task, or moves one to a spare, only onto a
    node labelled with it. Default none (any model)."""
    nodes: int | None = Field(default=None, ge=1, le=64)
    """Training hosts the run uses: the master host and the next `nodes - 1` active
    training hosts in `hosts` order; the others get none of its tasks (a moved task
    may still go to a spare). Default every active training host."""
    hosts: list[str] | None = None
    """A job's hosts, master first (`kind: job` only): its master task runs on the first,
    one worker task on each of the others, and no task of it on another training host
    (a moved task may still go to a spare). `scripts/job submit` writes them: planned
    from the GPUs free now, or the ones given with `--hosts`. Each an active, non-spare
    cluster host with `gpus_per_node` GPUs (of `gpu_model` when set), as many as
    `nodes` when that is set. Default none: the cluster's master host and the next
    `nodes - 1` training hosts in `hosts` order."""
    placement: Literal["planned", "named"] | None = None
    """How `hosts` was chosen (`kind: job`, with `hosts` only): `planned` by `scripts/job
    submit` from the GPUs free (planned afresh after a stop), or `named` by the person.
    Default none (`named` when `hosts` is set)."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """A job's priority among the cluster's jobs: waiting jobs are admitted higher first,
    then by first submit (docs/jobs.md, "Queued jobs"). Default 0."""
    queued: Queued | None = None
    """Written by `scripts/job submit` when the job does not fit now (`kind: job`
    only), with the project revision it was submitted from (`revision`): the job's
    stack then holds its cluster reference and its queue entry (the Swarm config
    `dss-queue.<job>`) and no service and no launch, until `scripts/job queue CLUSTER
    --run` admits it and writes the file without this key (docs/jobs.md, "Queued
    jobs"). Default none: the job runs."""
    released: Released | None = None
    """Written by `scripts/job queue CLUSTER --run` once the job's run has ended
    (`kind: job` only): the run's verdict, `state` (`finished` or `failed`), `step` and
    `reason`, as its run record read it. The job's stack then holds its cluster
    reference only and exports the verdict as its `run` output: its services, standby,
    launch and scrape are deleted, so their GPUs are free for the queue; its
    checkpoints and logs stay. `scripts/job submit` writes the file without this key
    and the job resumes from its newest checkpoint, as a stopped one does (docs/jobs.md,
    "Released jobs"). Not with `queued`. Default none: the job runs."""
    procs_per_node: int | None = Field(default=None, ge=1, le=64)
    """Ranks per node on CPU (`cpu_only`, or `gpus_per_node` 0). Default 1; on GPUs
    the launcher starts one rank per reserved GPU."""
    master_port: Port = 29500
    """torch.distributed rendezvous port on the master. Default 29500."""
    sshd_port: Port = 2222
    """Port of the tasks' sshd (pdsh). Default 2222."""
    env: dict[str, str] = {}
    """Extra environment (NCCL_*, ...). Default none."""
    secret_env: dict[str, str] = {}
    """With `command`: variables every rank gets from the stack's secrets, `VAR: <secret
    name>` (a name under `secrets`). The launch's environment file reads each as
    `VAR=$(cat /run/secrets/<name>)` on the rank's node, so no value enters a file, the
    state or a log. Default none."""
    data_dir: str = "/data"
    """Host path of the shared file system, mounted read-write at /data. Default `/data`."""
    datasets: list[Mount] = []
    """Read-only dataset mounts. Default none."""
    run_name: str = "run"
    """Run name: checkpoints in /data/checkpoints/<run>, logs in /data/logs/<run>.
    Default `run`."""
    checkpoint_every: Annotated[int, Field(ge=1)] = 50
    """Checkpoint every K steps. Default 50."""
    steps: Annotated[int, Field(ge=1)] = 1000
    """Total training steps. Default 1000."""
    shm_size: str = "1g"
    """Size of the tmpfs mounted at /dev/shm (NCCL needs it). Default `1g`."""
    stop_grace_period: str = "120s"
    """Time between SIGTERM and SIGKILL, for the final checkpoint. Default `120s`."""
    restart_policy: RestartPolicy = RestartPolicy()
    """Swarm restart policy. Default on-failure, 3 attempts."""
    recovery: Recovery = Recovery()
    """Automatic restarts of a crashed run, and when a run counts as stalled. Default
    3 restarts, `10s` apart; stalled after `15m` without a step."""
    cpu_only: bool = False
    """Train on CPU with gloo (the lab). Default false."""
    service_labels: dict[str, str] = {}
    """Extra labels on the `ds-master` and `ds-worker` services (a team, a cost centre,
    a ticket). Service labels only, not the tasks' containers: changing them restarts
    no task. Keys lower-case, none in `dss.`. Default none."""

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | str | None) -> list[str] | str | None:
        if v is not None:
            try:
                split_command(v)
            except CommandError as e:
                raise ValueError(str(e)) from None
        return v

    @model_validator(mode="before")
    @classmethod
    def _launcher_of_command(cls, data: Any) -> Any:
        # The command's launcher is the run's, where `launcher` is not given: every
        # rule and the launch plan read `launcher`. Given and different, the command
        # rule (infra/config/rules/command.py) refuses it naming both.
        if not isinstance(data, dict) or data.get("command") is None or "launcher" in data:
            return data
        try:
            parsed = split_command(data["command"])
        except (CommandError, TypeError, AttributeError):
            return data  # the field's own validation names the problem
        if parsed.launcher == "python":
            return data
        return {**data, "launcher": parsed.launcher}

    @property
    def parsed_command(self) -> Command | None:
        """`command` taken apart (infra/command.py); None without one."""
        return None if self.command is None else split_command(self.command)

    @field_validator("service_labels")
    @classmethod
    def _service_labels(cls, v: dict[str, str]) -> dict[str, str]:
        return user_labels(v)

    @field_validator("stop_grace_period")
    @classmethod
    def _grace(cls, v: str) -> str:
        duration_seconds(v)
        return v

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str) -> str:
        size_bytes(v)
        return v

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", v):
            raise ValueError("allowed: letters, digits, '_', '.', '-' (used as a directory name)")
        return v

    @property
    def ranks_per_node(self) -> int:
        """Processes the launcher starts on every node."""
        if self.cpu_only:
            return self.procs_per_node or 1
        if self.gpus_per_node:
            return self.gpus_per_node
        return self.procs_per_node or 1
