"""TrainingRun: the run itself as a resource whose read tells the truth (dynamic provider).

The launch commands (infra/components/launch.py) start the run; this resource reads
it. Its read runs a probe (infra/render/probe.py) in the tasks the launch started the
run in, through each host's Docker API, and records the run's state: `running`,
`finished` (at its last step), `failed` (with the reason and the last step) or
`stalled` (live processes, no step for `training.recovery.stall_after`).

- Drift: the diff asks the tasks every time (so a plain `pulumi preview` sees a dead
  run without a refresh, as the roster sees a moved task); a failed or stalled run is
  a change, so `refresh --preview-only --expect-no-changes` and
  `preview --expect-no-changes` fail on it, and the refresh shows the state and the
  reason. A finished run, and a running one however far it got, are no change: the
  outputs of a healthy run hold no step count.
- `pulumi up` on a failed or stalled run relaunches it: what is left of it on each
  node is killed, and its supervisor (the file the launch wrote beside the hostfile)
  starts again; the training script resumes from the newest complete checkpoint.
- Automatic restarts are the supervisor's (within `training.recovery.max_restarts`
  per launch); the resource counts them from the run's restarts file (`restarts`), and
  its own relaunches (`relaunches`). Neither is part of the diff: a run that recovered
  by itself is running, and its next preview is a no-op.
- A task it cannot reach reads as `unknown`: neither drift nor relaunched (the host
  facts and the roster name an unreachable host).
"""

from __future__ import annotations

import time
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from infra.layout import TRAIN_UID
from infra.providers.boundary import BoundaryProvider
from infra.providers.hostops import each, service_container, ssh_of
from infra.providers.reach import settle
from infra.render.run import (
    BAD_STATES,
    Probe,
    RunState,
    parse_probe,
    probe_env,
    probe_script,
    stop_marker,
    supervisor_prefix,
    verdict,
)

# The inputs that, changed, make the run's record re-read (the relaunch itself is the
# launch commands' work; `launched` is their ids, new when they re-ran).
CONFIG_KEYS = (
    "tasks",
    "launches",
    "run_name",
    "script",
    "target_steps",
    "stall_after_s",
    "max_restarts",
    "launched",
    # training.command only (absent, as before, elsewhere: equal in olds and news).
    "exit_records",
)
RELAUNCH_WAIT_S = 60

# `sh -c` in each training task on a relaunch: kills the run's supervisors ($SUP, their
# files' prefix) first, which would restart what is killed next, then its ranks ($PAT,
# the training script); the patterns come through the environment. Never stored.
KILL_SCRIPT = 'pkill -KILL -f "$SUP" || true; pkill -KILL -f "$PAT" || true'


def clear_stop_script(run_name: str) -> str:
    """`sh -c` in a launch target's task before its supervisor starts again: the stop
    marker removed, so that the supervisor restarts what fails. Never stored."""
    return f"rm -f {stop_marker(run_name)}"


def _container(props: dict[str, Any], task: dict[str, Any]) -> Any:
    """The running container of the task's service on its node, or None. With
    training.recovery.follow_master the master task may have moved (a spare took the
    run over, infra/task/takeover.py): when its node has none, or does not answer, it is
    looked for on every other host."""
    movable = bool(props.get("follow_master")) and task["service"] == props["tasks"][0]["service"]
    try:
        ctr = service_container(
            props["host_endpoints"][task["node"]],
            task["service"],
            ssh=ssh_of(props, props["host_endpoints"][task["node"]]),
        )
    except Exception as e:
        if not movable:
            raise
        # Looked for elsewhere only when its host is known lost (reach.py).
        _settle(props, task["node"], e)
        ctr = None
    if ctr is None and movable:
        return _moved_container(props, task)
    return ctr


def _moved_container(props: dict[str, Any], task: dict[str, Any]) -> Any:
    """The first running container of the task's service on another host, or None."""
    for node, endpoint in props["host_endpoints"].items():
        if node == task["node"]:
            continue
        try:
            ctr = service_container(endpoint, task["service"], ssh=ssh_of(props, endpoint))
        except Exception as e:
            # A host known lost holds no task the run can use; any other that does not
            # answer fails the read, naming it (reach.py).
            _settle(props, node, e)
            continue
        if ctr is not None:
            return ctr
    return None


def _settle(props: dict[str, Any], node: str, error: BaseException) -> None:
    """`reach.settle` for `node`'s endpoint: returns when passing over it is right."""
    settle(props, node, str(props["host_endpoints"][node].get("url")), error)


def _exec(ctr: Any, script: str, env: dict[str, str] | None = None, user: str = "") -> str:
    out = ctr.exec_run(["sh", "-c", script], environment=env or {}, user=user).output
    return out.decode(errors="replace") if isinstance(out, bytes) else ""


def _probe(props: dict[str, Any], task: dict[str, Any]) -> Probe:
    ctr = _container(props, task)
    if ctr is None:  # the task is gone: nothing of the run runs there
        return parse_probe("")
    env = probe_env(props["run_name"], props["script"])
    # training.command: the probe also reads the exit records (only where set).
    script = probe_script(props["run_name"], command=bool(props.get("exit_records")))
    return parse_probe(_exec(ctr, script, env))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:200]


def observe(props: dict[str, Any]) -> RunState:
    """The run's state now, from every training task (the master's first: its metrics,
    checkpoints and logs are rank 0's). An unreachable master is `unknown`; another
    unreachable task adds nothing (its host's loss is the roster's to report). Either
    only when the swarm knows the host lost (reach.py, with a warning); a host that
    cannot be reached and is not known lost fails the read, naming it."""
    tasks = props["tasks"]
    if not tasks:
        return RunState("unknown", "no training task in the roster")
    # Every task asked at once: this runs in every preview's diff, on every host.
    master, *others = each(tasks, lambda t: _attempt(props, t))
    for task, probe in zip(tasks, [master, *others], strict=True):
        if isinstance(probe, Exception):
            _settle(props, task["node"], probe)
    if isinstance(master, Exception):
        return RunState("unknown", f"cannot read the master task: {_first_line(master)}")
    # One host's loss must not hide the others.
    alive = [p for p in others if not isinstance(p, Exception)]
    return verdict(
        master,
        alive,
        props["target_steps"],
        props["stall_after_s"],
        props.get("exit_records") or (),
    )


def _attempt(props: dict[str, Any], task: dict[str, Any]) -> Probe | Exception:
    """`_probe`, or what it raised (a host that does not answer)."""
    try:
        return _probe(props, task)
    except Exception as e:  # returned, not raised: the caller tells master from others
        return e


def relaunch(props: dict[str, Any]) -> RunState:
    """Kill what is left of the run in every training task (supervisors first, which
    would restart what is killed next; then the ranks, a stalled one included), start
    the launch targets' supervisors again, and wait until training processes run (the
    script resumes from the newest complete checkpoint); the running state it saw."""
    run = props["run_name"]
    kill = {"SUP": supervisor_prefix(run), "PAT": props["script"]}
    for task in props["tasks"]:
        try:
            ctr = _container(props, task)
        except Exception as e:
            # Its host does not answer (lost: with follow_moves the roster keeps the
            # launch's placement): nothing of the run is left to kill there. Only a
            # host the swarm knows lost; any other fails the relaunch (reach.py).
            _settle(props, task["node"], e)
            continue
        if ctr is not None:
            _exec(ctr, KILL_SCRIPT, kill)
    for launch in props["launches"]:
        ctr = _container(props, launch)
        if ctr is None:
            raise Exception(
                f"run {run}: no running task of {launch['service']} on {launch['node']} "
                "to relaunch in; see `docker service ps ds-master ds-worker`"
            )
        _exec(ctr, clear_stop_script(run), user=TRAIN_UID)
        ctr.exec_run(["sh", launch["supervisor"]], user=TRAIN_UID, detach=True)
    deadline = time.monotonic() + RELAUNCH_WAIT_S
    while time.monotonic() < deadline:
        state = observe(props)
        if state.state == "running":
            return state
        time.sleep(2)
    raise Exception(
        f"run {run}: relaunched, but no training process runs after {RELAUNCH_WAIT_S}s; "
        f"see /data/logs/{run}/launcher.log"
    )


class TrainingRunProvider(BoundaryProvider):
    """Reads the run from its tasks; relaunches a failed or stalled one on update."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        state = observe(props)
        return CreateResult(
            id_=f"run-{props['run_name']}", outs={**props, **state.outputs(), "relaunches": 0}
        )

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs={**props, **observe(props).outputs()})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        if any(olds.get(k) != news.get(k) for k in CONFIG_KEYS):
            return DiffResult(changes=True)
        # Asked every time: a run that died since the last `up` is a change now.
        return DiffResult(changes=observe(news).state in BAD_STATES)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        relaunches = int(olds.get("relaunches") or 0)
        state = observe(news)
        if state.state in BAD_STATES:
            state = relaunch(news)
            relaunches += 1
        return UpdateResult(outs={**news, **state.outputs(), "relaunches": relaunches})


class TrainingRun(Resource):
    """The training run's state, read from its tasks (dynamic resource)."""

    state: pulumi.Output[str]
    reason: pulumi.Output[str]
    step: pulumi.Output[int | None]
    checkpoint: pulumi.Output[str | None]
    restarts: pulumi.Output[int]
    relaunches: pulumi.Output[int]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        outputs = dict.fromkeys(("state", "reason", "step", "checkpoint", "restarts", "relaunches"))
        super().__init__(TrainingRunProvider(), name, {**props, **outputs}, opts)
