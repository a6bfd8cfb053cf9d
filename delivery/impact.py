"""What a change does to the running training job, decided from types and properties.

Two declarative tables, read top to bottom, first match wins:

- `RULES`: (component type, resource type, property predicate) -> `Role`. The
  component is the nearest `deepspeed-swarm:<module>:<Class>` in the resource's URN;
  the type is the resource's own token (infra/layout.py). Every dynamic resource has
  the one type `pulumi-python:dynamic:Resource` (it cannot change: the URN would), so
  those are told apart by their component and the inputs their provider reads
  (infra/providers/: hostfacts.py, swarm.py, roster.py, secrets.py, ...). Docker services by their
  Swarm `name` property or their `dss.role` label, never by the Pulumi resource name,
  which a stack or component rename changes.
- `VERDICTS`: role + operation + changed property paths -> `Impact` and the reason a
  reviewer reads. Reasons name properties, never values (inputs may hold secrets);
  the one number shown is a service's replica count, and only when it is an integer.

`tests/unit/delivery/test_impact.py` runs the program under mocks and checks that
every resource it registers gets a role of its own, so a new resource or a renamed
input fails there instead of silently becoming "no training resource".
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.layout import (
    COMMAND_TYPE,
    CONFIG_TYPE,
    DYNAMIC_TYPE,
    GPU_ROLES,
    IMAGE_TYPE,
    JUPYTER_SERVICE,
    NETWORK_TYPE,
    PROJECT,
    ROLE_LABEL,
    SECRET_TYPE,
    SERVICE_TYPE,
    STANDBY_SERVICE,
    TRAINING_SERVICES,
    WARMUP_SERVICE,
)
from infra.providers.health import HEALTH_KEYS


def component(module: str, cls: str) -> str:
    """A component type token of this project: `deepspeed-swarm:<module>:<Class>`."""
    return f"{PROJECT}:{module}:{cls}"


HOSTFACTS = component("hostfacts", "HostFacts")
SWARM = component("swarm", "SwarmCluster")
IMAGE = component("image", "TrainingImage")
NETWORK = component("network", "OverlayNetwork")
SECRETS = component("secrets", "ClusterSecrets")
SERVICES = component("services", "TrainingServices")
LAUNCH = component("launch", "TrainingLaunch")
GATE = component("gate", "BandwidthGate")
CODE = component("code", "TrainingCode")
JUPYTER = component("jupyter", "JupyterLab")
MONITORING = component("monitoring", "Monitoring")
SCRAPE = component("scrape", "JobScrape")
COMPONENTS = (
    HOSTFACTS, SWARM, IMAGE, NETWORK, SECRETS, SERVICES, LAUNCH, GATE, CODE, JUPYTER,
    MONITORING, SCRAPE,
)  # fmt: skip


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


class Role(enum.Enum):
    """What a resource is to the training job."""

    HOST_FACTS = "host facts"
    SWARM_INIT = "swarm init"
    SWARM_NODE = "swarm node"
    TRAINING_IMAGE = "training image"
    OVERLAY = "overlay network"
    SECRET = "swarm secret"
    SSH_KEY = "ssh key pair"
    TRAINING_SERVICE = "training service"
    WARMUP_SERVICE = "warm-up service"
    STANDBY_SERVICE = "standby service"
    UNKNOWN_SERVICE = "unknown service"
    ROSTER = "task roster"
    LAUNCH = "launch command"
    RUN = "training run"
    GATE = "collective gate"
    CODE = "training code"
    JUPYTER_TOKEN = "jupyter token"
    JUPYTER_SERVICE = "jupyter service"
    MONITORING_SERVICE = "monitoring service"
    MONITORING_IMAGE = "monitoring image"
    MONITORING_CONFIG = "monitoring config"
    MONITORING_OTHER = "monitoring other"
    OTHER = "other"


Props = Mapping[str, Any]
Predicate = Callable[[Props], bool]


def any_props(_props: Props) -> bool:
    return True


def has(*keys: str) -> Predicate:
    """Every one of `keys` is an input."""
    return lambda props: all(k in props for k in keys)


def has_any(*keys: str) -> Predicate:
    """At least one of `keys` is an input."""
    return lambda props: any(k in props for k in keys)


def named(*names: str) -> Predicate:
    """The `name` input (a Swarm object's own name, not the Pulumi name) is one of `names`."""
    return lambda props: props.get("name") in names


def labelled(key: str, *values: str) -> Predicate:
    """The docker `labels` input (`[{label, value}]`) has `key` set to one of `values`."""

    def check(props: Props) -> bool:
        labels = props.get("labels")
        return isinstance(labels, list) and any(
            isinstance(x, Mapping) and x.get("label") == key and x.get("value") in values
            for x in labels
        )

    return check


def either(*predicates: Predicate) -> Predicate:
    return lambda props: any(p(props) for p in predicates)


@dataclass(frozen=True)
class Rule:
    """Resources under `component` (None: any) of type `type` (None: any) whose inputs
    satisfy `when` have `role`."""

    component: str | None
    type: str | None
    when: Predicate
    role: Role


RULES: tuple[Rule, ...] = (
    # Nothing of monitoring is part of a training task (infra/components/monitoring.py).
    Rule(MONITORING, SERVICE_TYPE, any_props, Role.MONITORING_SERVICE),
    Rule(MONITORING, IMAGE_TYPE, any_props, Role.MONITORING_IMAGE),
    Rule(MONITORING, CONFIG_TYPE, any_props, Role.MONITORING_CONFIG),
    Rule(MONITORING, None, any_props, Role.MONITORING_OTHER),
    # A job's scrape config (infra/components/scrape.py): a file Prometheus reads.
    Rule(SCRAPE, None, any_props, Role.MONITORING_OTHER),
    # Dynamic resources: by component and the inputs their provider reads.
    Rule(HOSTFACTS, DYNAMIC_TYPE, has("expected"), Role.HOST_FACTS),
    # A node carries the spec it converges; the init (the leader's swarm) does not.
    Rule(SWARM, DYNAMIC_TYPE, has_any("labels", "role", "availability"), Role.SWARM_NODE),
    Rule(SWARM, DYNAMIC_TYPE, has("advertise_addr"), Role.SWARM_INIT),
    Rule(SECRETS, DYNAMIC_TYPE, has("comment"), Role.SSH_KEY),
    Rule(LAUNCH, DYNAMIC_TYPE, has("expected_tasks"), Role.ROSTER),
    Rule(LAUNCH, DYNAMIC_TYPE, has("stall_after_s"), Role.RUN),
    Rule(GATE, DYNAMIC_TYPE, has("min_busbw_MBps"), Role.GATE),
    Rule(CODE, DYNAMIC_TYPE, has("digest"), Role.CODE),
    Rule(JUPYTER, DYNAMIC_TYPE, has("rotation"), Role.JUPYTER_TOKEN),
    # Services: by their Swarm name or dss.role label.
    Rule(SERVICES, SERVICE_TYPE, named(WARMUP_SERVICE), Role.WARMUP_SERVICE),
    Rule(SERVICES, SERVICE_TYPE, named(STANDBY_SERVICE), Role.STANDBY_SERVICE),
    Rule(
        SERVICES,
        SERVICE_TYPE,
        either(named(*TRAINING_SERVICES), labelled(ROLE_LABEL, *GPU_ROLES)),
        Role.TRAINING_SERVICE,
    ),
    Rule(JUPYTER, SERVICE_TYPE, named(JUPYTER_SERVICE), Role.JUPYTER_SERVICE),
    # A service this table does not know: assume the worst.
    Rule(None, SERVICE_TYPE, any_props, Role.UNKNOWN_SERVICE),
    # The other docker and command types say what they are by type alone.
    Rule(None, IMAGE_TYPE, any_props, Role.TRAINING_IMAGE),
    Rule(None, NETWORK_TYPE, any_props, Role.OVERLAY),
    Rule(None, SECRET_TYPE, any_props, Role.SECRET),
    Rule(None, COMMAND_TYPE, any_props, Role.LAUNCH),
)


def role_of(component: str, type_: str, props: Props) -> Role:
    """The first rule of `RULES` that matches; `Role.OTHER` when none does."""
    for rule in RULES:
        if rule.component not in (None, component) or rule.type not in (None, type_):
            continue
        if rule.when(props):
            return rule.role
    return Role.OTHER


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
