"""jobs.release: the release of ended runs, with the engine's stacks faked (a refresh,
the state's export, an `up`) and the leader's GPUs given as it would report them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult  # the SDK's own result: its error's text

from infra.config import stack_file_values
from infra.providers.fit import Holder, SwarmGpus
from jobs import command, release, repoint
from jobs.record import state_hosts, state_manager
from tests.unit.jobs.conftest import provider, spec, three_managers
from tests.unit.jobs.test_command import (
    BUDGET_SPENT,
    FAILED,
    RUNNING,
    FakeStack,
    job_state,
)

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parents[1] / "infra" / "golden"
"""The program's golden renders (tests/unit/infra/test_program_resources.py)."""

FINISHED = {**RUNNING, "state": "finished", "step": 100.0}


def holding(*jobs: str) -> SwarmGpus:
    """The leader's answer: each of `jobs` holds 2 GPUs on lab-h1 and on lab-h2."""
    held = {h: [Holder(f"{j}-task", j, 2) for j in jobs] for h in ("lab-h1", "lab-h2")}
    return SwarmGpus(capacity={"lab-h1": 8, "lab-h2": 8}, held=held)


class Stack(FakeStack):
    """A job stack: refresh and export as `job list` has them, and an `up` that records
    the job's stack file's `training` as the program would read it (or fails)."""

    def __init__(self, project: Path, job: str, run: dict[str, Any] | None, fail: bool = False):
        super().__init__(job_state(run))
        self.path, self.fail = project / f"Pulumi.{job}.yaml", fail
        self.upped: list[dict[str, Any]] = []

    def up(self, **_kw: Any) -> Any:
        self.calls.append("up")
        self.upped.append(stack_file_values(self.path.read_text())["training"])
        if self.fail:
            raise auto.CommandError(CommandResult("", "error: lab-h2: no answer\n", 255))


@pytest.fixture
def stacks(project: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Stack]:
    """Job exp1 written in its full form on c1; the test puts each job's Stack here."""
    command.write_job(spec(project))
    seen: dict[str, Stack] = {}
    monkeypatch.setattr(command, "workspace_stack", lambda name, _env=None: seen[name])
    return seen


def training(project: Path, job: str = "exp1") -> dict[str, Any]:
    return dict(stack_file_values((project / f"Pulumi.{job}.yaml").read_text())["training"])


def test_an_ended_run_is_released_with_its_verdict(project: Path, stacks: dict[str, Stack]) -> None:
    """A job holding GPUs whose refreshed record says failed: its file gains the verdict
    (its other keys kept), then its `up` runs on that file."""
    before = training(project)
    stacks["exp1"] = stack = Stack(project, "exp1", FAILED)
    done = release.release_ended("c1", holding("exp1"), out=lambda _l: None)
    assert done.jobs == ("exp1",) and not done.problems
    verdict = {"state": "failed", "step": 0, "reason": BUDGET_SPENT}
    assert training(project) == {**before, "released": verdict}
    assert stack.calls == ["refresh", "export", "up"]
    assert stack.upped == [training(project)]


def test_a_released_job_keeps_its_manager(project: Path, stacks: dict[str, Stack]) -> None:
    """A job going through another manager than the cluster's first is released through
    it: its released file keeps `manager`."""
    three_managers(project)
    path = project / "Pulumi.exp1.yaml"
    command.write_values("exp1", {**stack_file_values(path.read_text()), "manager": "lab-h3"})
    stacks["exp1"] = Stack(project, "exp1", FAILED)
    assert release.release_ended("c1", holding("exp1"), out=lambda _l: None).jobs == ("exp1",)
    assert stack_file_values(path.read_text())["manager"] == "lab-h3"


def test_a_finished_runs_step_is_a_whole_number(project: Path, stacks: dict[str, Stack]) -> None:
    """The state's step (a float as the engine may keep it) is written whole."""
    stacks["exp1"] = Stack(project, "exp1", FINISHED)
    release.release_ended("c1", holding("exp1"), out=lambda _l: None)
    assert training(project)["released"] == {"state": "finished", "step": 100, "reason": ""}


@pytest.mark.parametrize("state", ["running", "stalled", "unknown"])
def test_a_run_that_has_not_ended_is_kept(
    project: Path, stacks: dict[str, Stack], state: str
) -> None:
    """Running, stalled (its `up` relaunches it) or unknown: read, nothing written or up."""
    before = training(project)
    stacks["exp1"] = stack = Stack(project, "exp1", {**RUNNING, "state": state})
    assert release.release_ended("c1", holding("exp1"), out=lambda _l: None).jobs == ()
    assert stack.calls == ["refresh", "export"] and training(project) == before


def test_a_job_holding_no_gpus_is_not_asked(project: Path, stacks: dict[str, Stack]) -> None:
    """Its services hold nothing (stopped, or a CPU job): its stack is not refreshed."""
    stacks["exp1"] = stack = Stack(project, "exp1", FAILED)
    assert release.release_ended("c1", holding("other"), out=lambda _l: None).jobs == ()
    assert stack.calls == []


def test_a_waiting_job_is_not_asked(project: Path, stacks: dict[str, Stack]) -> None:
    """A queued job whose entry is in the queue (tasks of it left by a failed start):
    not its run to release."""
    command.write_job(spec(project, extra={"queued": {"revision": ""}}))
    stacks["exp1"] = stack = Stack(project, "exp1", FAILED)
    done = release.release_ended("c1", holding("exp1"), out=lambda _l: None, waiting={"exp1"})
    assert done.jobs == () and stack.calls == []


def test_a_queued_file_whose_job_was_started_elsewhere_is_released(
    project: Path, stacks: dict[str, Stack]
) -> None:
    """The submitter's file is still queued, but its entry is gone and its job holds
    GPUs (a pass from another checkout started it): its ended run is released, the
    mark dropped and its other keys kept."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    before = {k: v for k, v in training(project).items() if k != "queued"}
    stacks["exp1"] = stack = Stack(project, "exp1", FINISHED)
    assert release.release_ended("c1", holding("exp1"), out=lambda _l: None).jobs == ("exp1",)
    verdict = {"state": "finished", "step": 100, "reason": ""}
    assert training(project) == {**before, "released": verdict}
    assert stack.calls == ["refresh", "export", "up"]


def test_a_job_with_no_file_here_is_released_from_its_stack(
    project: Path, stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job holding GPUs whose file is not in this checkout (another watch started it):
    its stack, selected (never made), says its run finished; its file is written in the
    released form naming its cluster and the verdict only, and its `up` runs."""
    selected: list[str] = []

    def existing(name: str, _env: Any = None) -> Stack:
        selected.append(name)
        return stacks[name]

    monkeypatch.setattr(command, "existing_stack", existing)
    stacks["exp9"] = stack = Stack(project, "exp9", FINISHED)
    lines: list[str] = []
    assert release.release_ended("c1", holding("exp9"), out=lines.append).jobs == ("exp9",)
    assert selected == ["exp9"] and stack.calls == ["refresh", "export", "up"]
    values = stack_file_values((project / "Pulumi.exp9.yaml").read_text())
    verdict = {"state": "finished", "step": 100, "reason": ""}
    assert values == {"kind": "job", "cluster": "c1", "training": {"released": verdict}}
    assert "job exp9: released; its GPUs are free" in lines


def test_a_job_with_no_file_is_released_through_the_manager_its_state_names(
    project: Path, stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file here, and its state went through lab-h2 (started while lab-h1 was lost):
    the released file names lab-h2, so its `up` does not need the first manager."""
    three_managers(project)
    monkeypatch.setattr(command, "existing_stack", lambda name, _env=None: stacks[name])
    stacks["exp9"] = stack = Stack(project, "exp9", FINISHED)
    stack.deployment["resources"].append(provider("exp9", "lab-h2"))
    assert release.release_ended("c1", holding("exp9"), out=lambda _l: None).jobs == ("exp9",)
    values = stack_file_values((project / "Pulumi.exp9.yaml").read_text())
    assert values["manager"] == "lab-h2" and stack.calls == ["refresh", "export", "up"]


def test_a_job_whose_manager_is_lost_is_released_through_the_one_the_pass_reached(
    project: Path, stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its state went through lab-h1, which does not answer; the pass reached lab-h3: the
    job's state moves there before its refresh (jobs/repoint.py), and its released file
    names lab-h3, so its refresh and its `up` go through lab-h3."""
    three_managers(project)
    monkeypatch.setattr(
        repoint, "answers", lambda _cfg, h: "timed out" if h.name == "lab-h1" else None
    )
    stacks["exp1"] = stack = Stack(project, "exp1", FAILED)
    stack.deployment["resources"].append(provider("exp1", "lab-h1"))
    way = command.cluster_settings("c1").model_copy(update={"manager": "lab-h3"})
    done = release.release_ended("c1", holding("exp1"), out=lambda _l: None, way=way)
    assert done.jobs == ("exp1",), done.problems
    assert stack.calls == ["export", "import", "refresh", "export", "up"]
    assert state_manager(stack.deployment, "exp1") == "lab-h3"
    values = stack_file_values((project / "Pulumi.exp1.yaml").read_text())
    assert values["manager"] == "lab-h3" and values["training"]["released"]["state"] == "failed"


def test_the_manager_in_a_state_is_its_own_providers_not_a_deleted_one() -> None:
    """Another job's provider and a replaced copy pending deletion are not read."""
    state = {"resources": [provider("exp9", "lab-h1", delete=True), provider("exp10", "lab-h3"),
                           provider("exp9", "lab-h2")]}  # fmt: skip
    assert state_manager(state, "exp9") == "lab-h2"
    assert state_manager({"resources": [provider("exp10", "lab-h3")]}, "exp9") is None


def test_the_manager_is_read_by_the_name_the_program_gives_its_provider() -> None:
    """The job stack's golden resources (the program under mocks, stack `unit` on
    lab-h1): its cluster reference's provider is the one `state_manager` reads."""
    golden = json.loads((GOLDEN / "resources-lab8-job.json").read_text())
    state = {"resources": [{"urn": f"urn:pulumi:unit::p::{r['type']}::{r['name']}",
                            "type": r["type"]} for r in golden]}  # fmt: skip
    assert state_manager(state, "unit") == "lab-h1"


def test_the_hosts_are_read_from_the_gpu_check_the_program_makes() -> None:
    """The job stack's golden resources, planned on lab-h5 and lab-h6: its GPU check's
    `hosts` input, master first, is what `state_hosts` reads."""
    golden = json.loads((GOLDEN / "resources-lab8-job.json").read_text())
    state = {"resources": [{"urn": f"urn:pulumi:unit::p::{r['type']}::{r['name']}",
                            "type": r["type"], "inputs": r.get("inputs")}
                           for r in golden]}  # fmt: skip
    assert state_hosts(state, "unit") == ["lab-h5", "lab-h6"]
    assert state_hosts(state, "other") is None


def test_a_file_holding_only_the_salt_is_no_file(
    project: Path, stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file with only `encryptionsalt` (the engine's, for a stack selected with no
    file) is released from as none, and the salt is kept in the released file."""
    monkeypatch.setattr(command, "existing_stack", lambda name, _env=None: stacks[name])
    (project / "Pulumi.exp9.yaml").write_text("encryptionsalt: v1:abc\n")
    stacks["exp9"] = Stack(project, "exp9", FINISHED)
    assert release.release_ended("c1", holding("exp9"), out=lambda _l: None).jobs == ("exp9",)
    text = (project / "Pulumi.exp9.yaml").read_text()
    assert stack_file_values(text)["cluster"] == "c1" and "encryptionsalt: v1:abc" in text


def test_a_job_with_no_file_and_no_stack_here_is_named(
    project: Path, stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file and no stack in this backend: named, nothing written or made."""

    def missing(name: str, _env: Any = None) -> Stack:
        raise auto.StackNotFoundError(CommandResult("", f"no stack named '{name}' found", 255))

    monkeypatch.setattr(command, "existing_stack", missing)
    done = release.release_ended("c1", holding("exp9"), out=lambda _l: None)
    assert done.jobs == () and not (project / "Pulumi.exp9.yaml").exists()
    assert done.problems["exp9"].startswith("job exp9: not released: it holds GPUs on c1, but")


def test_a_released_job_still_holding_gpus_gets_its_up_again(
    project: Path, stacks: dict[str, Stack]
) -> None:
    """Released before, its services still there: its `up` again, no refresh (the
    verdict is its file's), and the file as it was."""
    command.write_job(spec(project, extra={"released": {"state": "finished", "step": 7}}))
    before = training(project)
    stacks["exp1"] = stack = Stack(project, "exp1", None)
    lines: list[str] = []
    assert release.release_ended("c1", holding("exp1"), out=lines.append).jobs == ("exp1",)
    assert stack.calls == ["up"] and training(project) == before
    assert lines[0].startswith("job exp1: released (finished), but its services still hold")


def test_a_failed_up_keeps_the_released_file(project: Path, stacks: dict[str, Stack]) -> None:
    """The released form's `up` fails: the file stays released, so the next pass runs
    that `up` again; the failure is the job's line, not raised."""
    stacks["exp1"] = Stack(project, "exp1", FAILED, fail=True)
    done = release.release_ended("c1", holding("exp1"), out=lambda _l: None)
    assert done.jobs == ()
    assert done.problems == {"exp1": "job exp1: not released: error: lab-h2: no answer"}
    assert training(project)["released"]["state"] == "failed"


def test_one_jobs_failure_does_not_stop_the_others(project: Path, stacks: dict[str, Stack]) -> None:
    """exp1's `up` fails, exp2 (after it in name order) is released all the same."""
    command.write_job(dataclasses.replace(spec(project), name="exp2"))
    stacks["exp1"] = Stack(project, "exp1", FAILED, fail=True)
    stacks["exp2"] = Stack(project, "exp2", FINISHED)
    done = release.release_ended("c1", holding("exp1", "exp2"), out=lambda _l: None)
    assert done.jobs == ("exp2",) and list(done.problems) == ["exp1"]
