"""jobs.resize: a running job's node count, through its stack file and `up`."""

from __future__ import annotations

import contextlib
import json
import types
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, stack_file_values
from infra.placement import Ask, HostSlot
from infra.providers.fit import Holder, SwarmGpus
from jobs import command, repoint, resize
from jobs.record import state_manager
from tests.unit.infra.providers.fakeconfigs import FakeConfigs
from tests.unit.jobs.conftest import provider, spec, three_managers, through

pytestmark = pytest.mark.unit

SLOTS = [
    HostSlot("h1", 0, 8, "a"),
    HostSlot("h2", 1, 8, "a"),
    HostSlot("h3", 2, 8, "a"),
    HostSlot("h4", 3, 4, "b"),
    HostSlot("h5", 4, 8, "a", spare=True),
]
FREE = {"h1": 8, "h2": 8, "h3": 8, "h4": 4, "h5": 8}


def test_shrink_keeps_the_first_hosts_and_the_master() -> None:
    """Shrinking drops the last hosts; the first (the master) stays first."""
    ask = Ask("j", 1, 4)
    assert resize.resized_hosts(ask, ["h2", "h1"], SLOTS, FREE, ["waits"]) == ["h2"]


def test_grow_adds_free_hosts_after_the_ones_it_has() -> None:
    """Growing keeps every host it has, in order, and adds the best fit among the
    others with GPUs free (here h4, whose 4 GPUs it fills), never a spare."""
    ask = Ask("j", 3, 4)
    assert resize.resized_hosts(ask, ["h2", "h1"], SLOTS, FREE, []) == ["h2", "h1", "h4"]


def test_grow_keeps_to_the_jobs_model() -> None:
    """A job of model `a` grows only onto model-`a` hosts, however free another is."""
    ask = Ask("j", 2, 4, "a")
    assert resize.resized_hosts(ask, ["h1"], SLOTS, FREE, []) == ["h1", "h2"]


def test_grow_is_refused_while_jobs_wait() -> None:
    """While a job waits in the queue the free GPUs are its first: a grow is refused
    naming the waiting jobs, and what is allowed."""
    with pytest.raises(ConfigError, match=r"while jobs wait in the queue \(w1, w2\)") as e:
        resize.resized_hosts(Ask("j", 3, 4), ["h1", "h2"], SLOTS, FREE, ["w1", "w2"])
    assert "allowed: at most 2 node(s) now" in str(e.value)


def test_grow_past_the_free_gpus_is_refused_naming_the_shortfall() -> None:
    """More hosts than are free now: refused, naming the job, the hosts it keeps and the
    shortfall; nothing was changed."""
    free = {**FREE, "h3": 0, "h4": 0}
    with pytest.raises(ConfigError) as e:
        resize.resized_hosts(Ask("j", 3, 4), ["h1", "h2"], SLOTS, free, [])
    text = str(e.value)
    assert "job 'j' grows from 2 to 3 node(s) only with 1 more host(s) beside h1, h2" in text
    assert "free now" in text and text.endswith("Nothing was changed")


def test_grow_past_what_the_cluster_has_is_refused() -> None:
    """More hosts of the model than the cluster has: refused as never, with what the
    cluster has."""
    with pytest.raises(ConfigError, match="the cluster has none"):
        resize.resized_hosts(Ask("j", 2, 4, "b"), ["h4"], SLOTS, FREE, [])


def test_only_other_jobs_waiting_count() -> None:
    """The job's own entry (it is being resized, not waiting) and started ones do not
    count as waiting."""
    api = FakeConfigs()
    for job, state in (("j", "queued"), ("w", "reserved"), ("s", "admitted")):
        api.create_config(f"dss-queue.{job}", b"{}", labels={"dss.queue.state": state})
    from infra.providers.queue import list_entries

    assert resize.waiting_jobs(list_entries(api), "j") == ["w"]


@pytest.fixture
def running(project: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Job exp1 on both hosts of cluster c1 (2 x 1 GPU, planned), its services holding
    the GPUs; `up` records the stack file it saw. The test may set `seen["swarm"]`."""
    command.write_job(spec(project, nodes=2, gpus_per_node=1, hosts=["lab-h1", "lab-h2"],
                           placement="planned", extra={"launch_mode": "no_ssh"}))  # fmt: skip
    seen: dict[str, Any] = {
        "swarm": SwarmGpus(
            capacity={"lab-h1": 2, "lab-h2": 2},
            held={
                "lab-h1": [Holder("exp1-master", "exp1", 1)],
                "lab-h2": [Holder("exp1-worker", "exp1", 1)],
            },
        ),
        "ups": [],
        "state": {},
    }
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: seen["swarm"])
    monkeypatch.setattr(command, "submit_lock", lambda *_a, **_k: contextlib.nullcontext())

    class Stack:
        def export_stack(self) -> Any:
            return types.SimpleNamespace(version=3, deployment=seen["state"])

        def import_stack(self, deployment: Any) -> None:
            seen["state"] = dict(deployment.deployment)

        def up(self, **_k: Any) -> Any:
            path = project / "Pulumi.exp1.yaml"
            seen["ups"].append(stack_file_values(path.read_text())["training"])
            return types.SimpleNamespace(outputs={})

    monkeypatch.setattr(command, "workspace_stack", lambda _name, _env=None: Stack())
    return seen


def test_resize_shrinks_through_the_stack_file_and_up(running: dict[str, Any]) -> None:
    """Shrinking to 1 writes nodes 1 and the master's host alone, then runs `up`."""
    said: list[str] = []
    resize.resize("exp1", 1, out=said.append)
    ((t),) = running["ups"]
    assert (t["nodes"], t["hosts"], t["placement"]) == (1, ["lab-h1"], "planned")
    assert any("2 -> 1 node(s) (lab-h1)" in line for line in said), said


def test_a_resize_whose_manager_is_lost_goes_through_the_one_that_answers(
    running: dict[str, Any], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's state went through lab-h1, which does not answer; the resize reached
    lab-h3: the state moves there first (jobs/repoint.py) and the resized file names
    lab-h3."""
    three_managers(project)
    running["state"] = {"resources": [provider("exp1", "lab-h1")]}
    monkeypatch.setattr(command, "reached", through("lab-h3"))
    monkeypatch.setattr(
        repoint, "answers", lambda _c, h: "timed out" if h.name == "lab-h1" else None
    )
    resize.resize("exp1", 1, out=lambda _l: None)
    assert state_manager(running["state"], "exp1") == "lab-h3"
    values = stack_file_values((project / "Pulumi.exp1.yaml").read_text())
    assert (values["manager"], values["training"]["nodes"]) == ("lab-h3", 1)


def test_a_shrink_the_config_refuses_writes_nothing(running: dict[str, Any], project: Path) -> None:
    """A pdsh job shrunk to one host (pdsh needs workers): the config rules' refusal,
    naming the key; the file as it was and no `up`."""
    command.write_job(spec(project, nodes=2, gpus_per_node=1, hosts=["lab-h1", "lab-h2"],
                           placement="planned", extra={"launch_mode": "pdsh"}))  # fmt: skip
    before = (project / "Pulumi.exp1.yaml").read_text()
    with pytest.raises(ConfigError, match=r"training\.launch_mode: 'pdsh' is a multi-node"):
        resize.resize("exp1", 1, out=lambda _l: None)
    assert (project / "Pulumi.exp1.yaml").read_text() == before and running["ups"] == []


def test_resize_to_the_same_count_changes_nothing(running: dict[str, Any]) -> None:
    """The count it has: said, nothing written, no `up`."""
    said: list[str] = []
    resize.resize("exp1", 2, out=said.append)
    assert running["ups"] == [] and "nothing to do" in said[-1]


def test_resize_of_a_stopped_job_is_refused(running: dict[str, Any], project: Path) -> None:
    """A job whose services hold no GPU is refused (submit it again instead); the file
    is as it was."""
    before = (project / "Pulumi.exp1.yaml").read_text()
    running["swarm"] = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    with pytest.raises(ConfigError, match="holds no GPU"):
        resize.resize("exp1", 1, out=lambda _l: None)
    assert (project / "Pulumi.exp1.yaml").read_text() == before and running["ups"] == []


def test_resize_of_a_queued_job_is_refused(project: Path) -> None:
    """A job queued here has no run to resize from here: refused, naming it and what to
    do, also when a pass from another checkout started it (a submit takes it over)."""
    command.write_job(spec(project, extra={"queued": {"revision": "abc"}}))
    with pytest.raises(ConfigError, match="job 'exp1' is queued here: only a running job") as e:
        resize.resize("exp1", 1)
    assert "submit it again as it is, which takes it over here, then resize it" in str(e.value)


def test_resize_of_an_unknown_job_is_refused(project: Path) -> None:
    """No stack file: refused naming the job."""
    with pytest.raises(ConfigError, match=r"job 'nope' has no stack file Pulumi\.nope\.yaml"):
        resize.resize("nope", 1)


def test_resize_to_no_nodes_is_refused(running: dict[str, Any]) -> None:
    """Zero nodes is not a size: stop the job instead."""
    with pytest.raises(ConfigError, match="--nodes 0; allowed: 1 or more"):
        resize.resize("exp1", 0)
    assert running["ups"] == []


def test_cli_resize_passes_name_and_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`scripts/job resize NAME --nodes N` reaches `resize`."""
    from jobs import __main__ as cli

    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(resize, "resize", lambda name, nodes: seen.append((name, nodes)))
    assert cli.main(["resize", "exp1", "--nodes", "3"]) == 0
    assert seen == [("exp1", 3)]


def zero_command_job(project: Path, **ds: Any) -> None:
    """exp1 as the running fixture has it, its command the tutorial's: a ds_config.json
    with ZeRO stage 2 (and `ds`) in its code dir."""
    code = project.parent / "code"
    (code / "ds_config.json").write_text(
        json.dumps({"train_batch_size": 4, "zero_optimization": {"stage": 2}, **ds})
    )
    command.write_job(spec(project, nodes=2, gpus_per_node=1, hosts=["lab-h1", "lab-h2"],
                           placement="planned", extra={"launch_mode": "no_ssh"},
                           command=["deepspeed", "train.py", "--deepspeed_config",
                                    "ds_config.json"]))  # fmt: skip


def test_a_resize_its_scripts_zero_checkpoints_cannot_follow_is_refused(
    running: dict[str, Any], project: Path
) -> None:
    """The script's ZeRO checkpoints load only at their world size (2): a shrink to 1 is
    refused before anything is touched, naming the job and the key; the file as it was
    and no `up`."""
    zero_command_job(project)
    before = (project / "Pulumi.exp1.yaml").read_text()
    with pytest.raises(ConfigError) as e:
        resize.resize("exp1", 1, out=lambda _l: None)
    ((problem),) = e.value.problems
    assert problem.startswith("job 'exp1': ")
    assert "key zero_optimization.stage: 2 partitions the optimizer state" in problem
    assert (project / "Pulumi.exp1.yaml").read_text() == before and running["ups"] == []


def test_a_script_loading_universal_checkpoints_is_resized(
    running: dict[str, Any], project: Path
) -> None:
    """With checkpoint.load_universal the same shrink goes on to its `up`."""
    zero_command_job(project, checkpoint={"load_universal": True})
    resize.resize("exp1", 1, out=lambda _l: None)
    assert [t["nodes"] for t in running["ups"]] == [1]
