"""What a resource is to the training job (`Role`), decided from its type and properties.

`RULES`, read top to bottom, first match wins: (component type, resource type, property
predicate) -> `Role`. The component is the nearest `deepspeed-swarm:<module>:<Class>` in
the resource's URN; the type is the resource's own token (infra/layout.py). Every
dynamic resource has the one type `pulumi-python:dynamic:Resource` (it cannot change:
the URN would), so those are told apart by their component and the inputs their
provider reads (infra/providers/: hostfacts.py, swarm.py, roster.py, secrets.py, ...).
Docker services by their Swarm `name` property or their `dss.role` label, never by the
Pulumi resource name, which a stack or component rename changes. What a change does to
a resource of each role is delivery/impact.py's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
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
