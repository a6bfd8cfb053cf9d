"""What a change does to the running training job, decided from types and properties.

Two declarative tables, read top to bottom, first match wins:

- `RULES` (delivery/roles.py): (component type, resource type, property predicate) ->
  `Role`, what the resource is to the training job.
- `VERDICTS`: role + operation + changed property paths -> `Impact` and the reason a
  reviewer reads. Reasons name properties, never values (inputs may hold secrets);
  the one number shown is a service's replica count, and only when it is an integer.

`tests/unit/delivery/test_impact.py` runs the program under mocks and checks that
every resource it registers gets a role of its own, so a new resource or a renamed
input fails there instead of silently becoming "no training resource". The names of
delivery/roles.py that the tests and the harness import stay importable from here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from delivery.roles import MONITORING as MONITORING
from delivery.roles import RULES as RULES
from delivery.roles import SCRAPE as SCRAPE
from delivery.roles import Props
from delivery.roles import Role as Role
from delivery.roles import role_of as role_of
from infra.layout import ROLE_LABEL
from infra.providers.health import HEALTH_KEYS


class Impact(enum.IntEnum):
    """What a change does to the running training job (higher is worse)."""

    NONE = 0
    MOVES = 1
    RESTARTS = 2

    @property
    def label(self) -> str:
        return {
            Impact.NONE: "leaves training alone",
            Impact.MOVES: "moves tasks",
            Impact.RESTARTS: "restarts the running job",
        }[self]


def touches(keys: Iterable[str], *prefixes: str) -> bool:
    """Whether a changed property path is one of `prefixes` or below one."""
    return any(k == p or k.startswith((f"{p}.", f"{p}[")) for k in keys for p in prefixes)


@dataclass(frozen=True)
class Verdict:
    """For ops in `ops` (None: any), when `only` is set every changed path is below it,
    when `touching` is set some changed path is below it: `impact` because `why`.
    `{replicas}` in `why` becomes `<old> -> <new>` (integers only); `{remedy}` the
    resource's own `remedy` input (the host facts': infra/render/remedy.py)."""

    impact: Impact
    why: str
    ops: frozenset[str] | None = None
    only: tuple[str, ...] = ()
    touching: tuple[str, ...] = ()

    def matches(self, op: str, keys: tuple[str, ...]) -> bool:
        if self.ops is not None and op not in self.ops:
            return False
        if self.only and not (keys and all(touches([k], *self.only) for k in keys)):
            return False
        return not self.touching or touches(keys, *self.touching)


def on(*ops: str) -> frozenset[str]:
    return frozenset(ops)


def _alone(what: str) -> tuple[Verdict, ...]:
    return (Verdict(Impact.NONE, f"{what}; training tasks keep running"),)


NO_TRAINING = (Verdict(Impact.NONE, "no training resource"),)

VERDICTS: dict[Role, tuple[Verdict, ...]] = {
    Role.HOST_FACTS: (
        # infra/providers/health.py: the facts read a fault; `up` refuses the host.
        Verdict(
            Impact.NONE,
            "the host reports a GPU health fault (see the drift): `pulumi up` refuses it"
            " until it is dealt with; remedy: {remedy}",
            on("drift", "update"),
            touching=tuple(f"expected.{k}" for k in HEALTH_KEYS),
        ),
        Verdict(Impact.NONE, "host facts are read-only"),
    ),
    Role.SWARM_INIT: (
        Verdict(
            Impact.RESTARTS, "the swarm itself is re-initialised", on("replace", "delete", "drift")
        ),
        Verdict(Impact.NONE, "swarm bootstrap"),
    ),
    Role.SWARM_NODE: (
        Verdict(Impact.MOVES, "node joins the swarm: tasks can be placed on it", on("create")),
        Verdict(Impact.MOVES, "node leaves the swarm: its task moves or stops", on("delete")),
        Verdict(Impact.MOVES, "node labels/role/availability change task placement"),
    ),
    Role.TRAINING_IMAGE: (
        Verdict(Impact.NONE, "old image build removed", on("delete")),
        Verdict(Impact.RESTARTS, "new image: services roll onto its digest"),
    ),
    Role.OVERLAY: (
        Verdict(
            Impact.NONE, "network labels or a new network; no task moves", on("update", "create")
        ),
        Verdict(
            Impact.NONE,
            "network labels or a new network; no task moves",
            on("drift"),
            touching=("labels",),
        ),
        Verdict(Impact.RESTARTS, "overlay replaced: every task on it restarts"),
    ),
    Role.SECRET: (
        Verdict(Impact.NONE, "new secret, not used until a service mounts it", on("create")),
        Verdict(Impact.NONE, "services that mount it roll onto the new one (listed separately)"),
    ),
    Role.SSH_KEY: (
        Verdict(Impact.NONE, "key pair only; services that mount it are listed separately"),
    ),
    Role.TRAINING_SERVICE: (
        Verdict(
            Impact.MOVES,
            "replicas {replicas}: tasks start or stop on nodes",
            on("update"),
            only=("mode",),
        ),
        # Service labels are not in the task spec: Swarm keeps the tasks (with the
        # toolchain's env-order patch, docs/engines.md "Task restarts on service updates").
        Verdict(
            Impact.NONE, "service labels only; its tasks keep running", on("update"), ("labels",)
        ),
        Verdict(Impact.RESTARTS, "new training tasks start", on("create")),
        Verdict(Impact.RESTARTS, "its training tasks stop", on("delete")),
        Verdict(Impact.RESTARTS, "service replaced: its tasks are recreated", on("replace")),
        Verdict(Impact.RESTARTS, "Swarm rolls its tasks", on("update")),
        Verdict(Impact.RESTARTS, "service edited outside Pulumi; `up` rolls its tasks back"),
    ),
    Role.WARMUP_SERVICE: _alone("overlay warm-up tasks only"),
    Role.STANDBY_SERVICE: _alone("the spares' idle standby task only"),
    Role.UNKNOWN_SERVICE: (
        Verdict(
            Impact.RESTARTS,
            f"a service with no known `name` or `{ROLE_LABEL}` label: assumed to run training",
        ),
    ),
    Role.ROSTER: (
        Verdict(Impact.NONE, "task roster record; the launch row says whether the run restarts"),
    ),
    Role.LAUNCH: (
        Verdict(Impact.RESTARTS, "launch command created: the run starts", on("create")),
        Verdict(
            Impact.RESTARTS,
            "launch replaced: the run is stopped (checkpoint) and restarted",
            on("replace"),
        ),
        Verdict(
            Impact.RESTARTS,
            "launch deleted: the run is stopped (SIGTERM, checkpoint)",
            on("delete"),
        ),
        # The launch script changed (an upgrade of the program, e.g. issue 44's: the
        # image's train.py gets its settings as DSS_* variables, not injected flags): the
        # idempotent script runs again, finds the run alive and keeps it.
        Verdict(
            Impact.NONE,
            "no re-run: the launch script changed; the running run keeps its command line"
            " and settings until its next relaunch, which takes the new ones",
            on("update"),
            touching=("create",),
        ),
        Verdict(Impact.NONE, "no re-run: only the launch triggers re-run it"),
    ),
    Role.RUN: (
        Verdict(Impact.NONE, "run state record: reads the run, starts nothing", on("create")),
        Verdict(
            Impact.NONE, "run state record removed; the launch row stops the run", on("delete")
        ),
        # Changed inputs: the launch rows say whether the run restarts; the record re-reads.
        Verdict(
            Impact.NONE,
            "run state record re-reads the run after a launch change",
            on("update"),
            touching=("tasks", "launches", "launched", "target_steps", "run_name", "script"),
        ),
        Verdict(
            Impact.NONE,
            "run state record: new recovery settings",
            on("update"),
            only=("stall_after_s", "max_restarts"),
        ),
        Verdict(
            Impact.RESTARTS,
            "the run is failed or stalled (see its state): `up` relaunches it from the newest"
            " complete checkpoint",
            on("update", "drift"),
        ),
        Verdict(Impact.NONE, "run state record"),
    ),
    # The gate measures only where no run is alive (new tasks, or `skipped`); a failed
    # gate stops `up` before the launch, which is the launch rows' business.
    Role.GATE: (
        Verdict(
            Impact.NONE,
            "collective gate: an all-reduce across the training tasks before the launch"
            " (skipped where training already runs)",
            on("create", "update"),
        ),
        Verdict(Impact.NONE, "collective gate record"),
    ),
    # The code's version on the data dir: copying it touches no task; the launch rows
    # (their triggers hold the digest) say whether the run restarts on it.
    Role.CODE: (
        Verdict(
            Impact.NONE,
            "the training code's files on the data dir differ from the program's (see the"
            " drift): `up` copies them again; the run restarts on them only if the launch"
            " row says so",
            on("drift"),
        ),
        Verdict(
            Impact.NONE,
            "a new version of the training code copied to the data dir (no image build, no"
            " service rolled); the launch row restarts the run on it",
            on("create", "update", "replace"),
        ),
        Verdict(Impact.NONE, "training code record"),
    ),
    Role.JUPYTER_TOKEN: _alone("JupyterLab's login token only"),
    Role.JUPYTER_SERVICE: _alone("JupyterLab on the master only"),
    Role.MONITORING_SERVICE: _alone("monitoring service: Prometheus or the node exporters restart"),
    Role.MONITORING_IMAGE: _alone("monitoring image: only the monitoring services roll onto it"),
    Role.MONITORING_CONFIG: _alone(
        "Prometheus configuration or alert rules: Prometheus restarts with them"
    ),
    Role.MONITORING_OTHER: _alone("monitoring only"),
    Role.OTHER: NO_TRAINING,
}

# Said after the verdict's reason when a changed path is below the prefix.
NOTES: dict[Role, tuple[tuple[str, str], ...]] = {
    Role.TRAINING_SERVICE: (("taskSpec.containerSpec.image", " (image changed)"),),
}


def _replicas(props: Props) -> str:
    mode = props.get("mode")
    replicated = mode.get("replicated") if isinstance(mode, Mapping) else None
    n = replicated.get("replicas") if isinstance(replicated, Mapping) else None
    # A count, never anything else: a secret or unknown value is not printed.
    return str(n) if isinstance(n, int) and not isinstance(n, bool) else "?"


def assess(
    role: Role, op: str, keys: tuple[str, ...], old: Props, new: Props
) -> tuple[Impact, str]:
    """The impact of an `op` on a resource of `role` whose `keys` changed, and why."""
    verdict = next(v for v in (*VERDICTS[role], *NO_TRAINING) if v.matches(op, keys))
    why = verdict.why
    if "{replicas}" in why:
        why = why.replace("{replicas}", f"{_replicas(old)} -> {_replicas(new)}")
    if "{remedy}" in why:
        remedy = (new or old).get("remedy")
        why = why.replace("{remedy}", remedy if isinstance(remedy, str) and remedy else "drain it")
    for prefix, note in NOTES.get(role, ()):
        if touches(keys, prefix):
            why += note
    return verdict.impact, why
