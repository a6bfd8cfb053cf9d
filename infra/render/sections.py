"""The parts of the stack config each renderer reads, as protocols.

A renderer names the sections it reads rather than taking the whole `StackConfig`:
the config satisfies every protocol here, and so does a component's `Args`
dataclass holding those sections, so a component renders from exactly what it
was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from infra.config import Host, Monitoring, Network, Training

if TYPE_CHECKING:
    from infra.config import StackConfig


class HasTraining(Protocol):
    """The training job."""

    @property
    def training(self) -> Training: ...


class HasMaster(Protocol):
    """The host that runs `ds-master` (rank 0)."""

    @property
    def master(self) -> Host: ...


class LaunchSource(HasTraining, HasMaster, Protocol):
    """The training job and its master host (log paths, the logs command)."""


class TaskEnvSource(HasTraining, Protocol):
    """What the training tasks' environment is made of."""

    @property
    def monitoring(self) -> Monitoring: ...

    @property
    def network(self) -> Network: ...

    @property
    def hosts(self) -> Sequence[Host]: ...


class TaskSpecSource(TaskEnvSource, Protocol):
    """What the training tasks are made of (the task-spec digest)."""

    @property
    def secret_names(self) -> Sequence[str]: ...


class MonitoringSource(HasTraining, Protocol):
    """What Prometheus' configuration and rules are rendered from."""

    @property
    def monitoring(self) -> Monitoring: ...

    @property
    def network(self) -> Network: ...

    @property
    def active_hosts(self) -> Sequence[Host]: ...

    @property
    def workers(self) -> Sequence[Host]: ...


def _stack_config_is_every_source(
    cfg: StackConfig,
) -> tuple[LaunchSource, TaskSpecSource, MonitoringSource]:
    """Never called: mypy checks here that the whole config satisfies every protocol,
    as the scripts outside infra/ (bench, the lab tests) rely on."""
    return cfg, cfg, cfg
