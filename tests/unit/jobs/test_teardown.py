"""jobs.teardown: a job's stop and remove, and the queue metrics a waiting job's stop
writes again (the engine's destroy and the leader's configs faked: test_queue.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError
from jobs import command, teardown
from tests.unit.infra.providers.fakeconfigs import FakeConfigs
from tests.unit.jobs.conftest import Stateless, spec, written
from tests.unit.jobs.test_queue import entry, queued

pytestmark = pytest.mark.unit
__all__ = ["queued"]  # the fixture, shared with test_queue.py


class Destroyed:
    """A job stack's destroy as the engine runs it: the queued form's entry goes."""

    def __init__(self, api: FakeConfigs | None = None) -> None:
        self.api = api

    def stack(self, name: str, _env: Any = None) -> Any:
        api = self.api

        class Stack(Stateless):
            def destroy(self, **_k: Any) -> None:
                if api is not None:
                    api.remove_config(api.configs({"name": f"dss-queue.{name}"})[0]["ID"])

        return Stack()


def test_a_stopped_queued_job_leaves_the_queue_metrics(
    queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping the only waiting job writes the cluster's queue metrics again: none
    waits (else DssQueueNotRun would fire with no watch, for a job that is gone)."""
    monkeypatch.setattr(command, "workspace_stack", Destroyed(queued["api"]).stack)
    teardown.stop("exp1", out=print)
    (script,) = written()
    assert 'dss_queue_jobs{cluster="c1",state="reserved"} 0\n' in script, script
    assert "exp1" not in script, script


def test_a_stopped_running_job_leaves_the_queue_metrics_alone(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job in its full form waited in no queue: its stop writes no metrics."""
    command.write_job(spec(project))
    monkeypatch.setattr(command, "workspace_stack", Destroyed().stack)
    teardown.stop("exp1", out=print)
    assert written() == []


def test_a_queue_not_reached_after_a_stop_is_said(
    queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No manager answers once the job is stopped: the stop stands, the metrics not
    written is said with why."""
    monkeypatch.setattr(command, "workspace_stack", Destroyed(queued["api"]).stack)

    def lost(_cfg: Any, *_a: Any, **_k: Any) -> Any:
        raise ConfigError(["cluster c1: no manager answers: lab-h1 (ssh://...) does not answer"])

    monkeypatch.setattr(command, "reached", lost)
    said: list[str] = []
    teardown.stop("exp1", out=said.append)
    assert said[-1] == (
        "cluster c1: queue metrics not written: cluster c1: no manager answers: lab-h1 "
        "(ssh://...) does not answer"
    ), said
    assert written() == []


def test_a_stop_leaves_the_others_waits_to_the_next_pass(
    queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """exp2 waits on after exp1's stop: nothing is written, so the file keeps its last
    pass's time (a pass that did not run would put off DssQueueNotRun for exp2)."""
    entry(queued["api"], "exp2", 2.0, position="2", reason="ahead of it: exp1")
    monkeypatch.setattr(command, "workspace_stack", Destroyed(queued["api"]).stack)
    teardown.stop("exp1", out=print)
    assert written() == []
