"""GpuFit: the swarm's GPUs read from the leader's lists, and a job refused, naming
hosts and holders, when another job holds the GPUs it asks for."""

from __future__ import annotations

from typing import Any

import pytest

from infra.providers import fit
from infra.providers.fit import GpuFitProvider, fit_problems, swarm_gpus
from infra.providers.hostops import HostError

pytestmark = pytest.mark.unit


def _node(
    id_: str, host: str, gpus: int, state: str = "ready", availability: str = "active"
) -> dict[str, Any]:
    """A node as `GET /nodes` lists it, its GPUs as named generic resources (the lab's
    and the NVIDIA runtime's way: one UUID each)."""
    named = [
        {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": f"GPU-{i}"}} for i in range(gpus)
    ]
    return {
        "ID": id_,
        "Description": {"Hostname": host, "Resources": {"GenericResources": named}},
        "Spec": {"Availability": availability},
        "Status": {"State": state},
    }


def _service(id_: str, name: str, job: str | None = None) -> dict[str, Any]:
    labels = {"dss.job": job} if job else {}
    return {"ID": id_, "Spec": {"Name": name, "Labels": labels}}


def _task(service: str, node: str | None, gpus: int, desired: str = "running") -> dict[str, Any]:
    """A task as `GET /tasks` lists it, reserving `gpus` GPUs as a discrete resource."""
    reserve = [{"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": gpus}}] if gpus else []
    t: dict[str, Any] = {
        "ServiceID": service,
        "DesiredState": desired,
        "Spec": {"Resources": {"Reservations": {"GenericResources": reserve}}},
    }
    if node:
        t["NodeID"] = node
    return t


NODES = [_node("n1", "lab-h1", 2), _node("n2", "lab-h2", 2)]
SERVICES = [
    _service("s1", "exp-a-master", "exp-a"),
    _service("s2", "exp-a-worker", "exp-a"),
    _service("s3", "ds-standby"),
]


def test_capacity_counts_named_gpus_of_ready_active_nodes() -> None:
    """A node's GPUs are its named resources; a down or drained node has no capacity."""
    nodes = [
        *NODES,
        _node("n3", "lab-h3", 2, state="down"),
        _node("n4", "lab-h4", 2, "ready", "drain"),
    ]
    swarm = swarm_gpus(nodes, [], [])
    assert swarm.capacity == {"lab-h1": 2, "lab-h2": 2}


def test_held_counts_placed_tasks_swarm_wants_running() -> None:
    """A placed task that Swarm wants running holds its reservation; a task being shut
    down, one not placed yet, and one reserving no GPU hold none."""
    tasks = [
        _task("s1", "n1", 2),
        _task("s2", "n2", 1, desired="shutdown"),
        _task("s2", None, 2),
        _task("s3", "n2", 0),
    ]
    swarm = swarm_gpus(NODES, SERVICES, tasks)
    assert [(h.service, h.job, h.gpus) for h in swarm.held["lab-h1"]] == [
        ("exp-a-master", "exp-a", 2)
    ]
    assert "lab-h2" not in swarm.held


def test_a_job_fits_where_gpus_are_free() -> None:
    """One GPU left free on each host: a job asking for one per node fits."""
    swarm = swarm_gpus(NODES, SERVICES, [_task("s1", "n1", 1), _task("s2", "n2", 1)])
    assert (
        fit_problems(swarm, "exp-b", ["exp-b-master", "exp-b-worker"], ["lab-h1", "lab-h2"], 1)
        == []
    )


def test_a_job_is_refused_naming_host_free_gpus_and_holder() -> None:
    """Another job holding a host's GPUs refuses the job: key, host, free count, holder,
    and the command that frees them."""
    swarm = swarm_gpus(NODES, SERVICES, [_task("s1", "n1", 2)])
    (problem,) = fit_problems(
        swarm, "exp-b", ["exp-b-master", "exp-b-worker"], ["lab-h1", "lab-h2"], 2
    )
    assert problem.startswith("training.gpus_per_node: job 'exp-b' needs 2 GPU(s)")
    assert "lab-h1 has 0 of 2 free (held by exp-a-master, job exp-a: 2)" in problem
    assert "lab-h2" in problem and "lab-h2 has" not in problem
    assert "scripts/job stop exp-a" in problem
    assert "Nothing was changed" in problem


def test_the_jobs_own_tasks_do_not_count() -> None:
    """Submitting a running job again: the GPUs its own tasks hold are its to use."""
    swarm = swarm_gpus(NODES, SERVICES, [_task("s1", "n1", 2), _task("s2", "n2", 2)])
    assert (
        fit_problems(swarm, "exp-a", ["exp-a-master", "exp-a-worker"], ["lab-h1", "lab-h2"], 2)
        == []
    )


def test_a_host_that_is_down_is_left_to_the_gate() -> None:
    """A host Swarm has down has no capacity here and refuses nothing: its task goes to
    a spare, which the preflight and the gate judge."""
    nodes = [_node("n1", "lab-h1", 2, state="down"), NODES[1]]
    assert fit_problems(swarm_gpus(nodes, SERVICES, []), "exp-b", [], ["lab-h1", "lab-h2"], 2) == []


def test_no_gpus_asked_nothing_to_check() -> None:
    """A CPU job (gpus_per_node 0) is never refused for GPUs."""
    swarm = swarm_gpus(NODES, SERVICES, [_task("s1", "n1", 2)])
    assert fit_problems(swarm, "exp-b", [], ["lab-h1"], 0) == []


PROPS = {
    "leader_endpoint": {"url": "unix:///leader.sock"},
    "job": "exp-b",
    "services": ["exp-b-master", "exp-b-worker"],
    "hosts": ["lab-h1", "lab-h2"],
    "gpus": 2.0,  # as the engine sends an int
}


def test_check_fails_with_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider's Check returns the refusal as a failure (the engine stops there,
    in a preview too) and the inputs unchanged."""
    monkeypatch.setattr(
        fit, "read_swarm", lambda _ep, ssh=None: swarm_gpus(NODES, SERVICES, [_task("s1", "n1", 2)])
    )
    result = GpuFitProvider().check({}, dict(PROPS))
    (failure,) = result.failures
    assert "lab-h1 has 0 of 2 free" in failure.reason
    assert result.inputs["gpus"] == 2 and result.inputs["job"] == "exp-b"


def test_check_passes_when_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free GPUs: no failure."""
    monkeypatch.setattr(fit, "read_swarm", lambda _ep, ssh=None: swarm_gpus(NODES, SERVICES, []))
    assert GpuFitProvider().check({}, dict(PROPS)).failures == []


def test_check_fails_when_the_leader_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unreadable leader refuses the job too, saying so (never a silent pass)."""

    def down(_ep: dict[str, Any], ssh: Any = None) -> Any:
        raise HostError("docker unix:///leader.sock: connection refused")

    monkeypatch.setattr(fit, "read_swarm", down)
    (failure,) = GpuFitProvider().check({}, dict(PROPS)).failures
    assert failure.reason.startswith(
        "the cluster's GPUs could not be read: docker unix:///leader.sock"
    )


def test_diff_is_quiet_for_the_same_inputs() -> None:
    """The resource holds only its inputs: the same inputs are no change."""
    props = {**PROPS, "gpus": 2}
    assert not GpuFitProvider().diff("fit-exp-b", props, dict(props)).changes
