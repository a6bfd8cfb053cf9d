"""jobs.repoint: a job's state moved off a lost manager, as the program makes it for the
manager the command reached; nothing moves while the job's manager answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from infra.components.clusterref import provider_name
from infra.components.swarm import endpoint, provider_args
from infra.config import ConfigError, StackConfig, stack_file_values
from infra.layout import CLUSTER_REF_TYPE, DYNAMIC_TYPE, STACK_TYPE
from infra.render.ssh import docker_ssh_opts
from jobs import command, repoint, teardown
from jobs.record import DOCKER_PROVIDER, STACK_REFERENCE, state_manager
from tests.unit.jobs.conftest import spec, three_managers

pytestmark = pytest.mark.unit

URN = "urn:pulumi:exp1::deepspeed-swarm::"
SERVICE_TYPE = "docker:index/service:Service"


def job_state(manager: str, cluster: StackConfig) -> dict[str, Any]:
    """Job exp1's state as `pulumi stack export` gives it, made through `manager`: its
    cluster reference's stack reference (to cluster c1) and provider (as the program
    makes it), a service made through it, its GPU check holding the manager's endpoint,
    and a resource holding another host's."""
    hosts = {h.name: h for h in cluster.hosts}
    host = hosts[manager]
    stack = f"{URN}{STACK_TYPE}::deepspeed-swarm-exp1"
    ref = f"{URN}{CLUSTER_REF_TYPE}::exp1-cluster"
    name = provider_name("exp1-cluster", manager)
    provider = f"{URN}{CLUSTER_REF_TYPE}${DOCKER_PROVIDER}::{name}"
    # As the Python SDK registers a docker provider: a list as JSON text.
    ssh_opts = json.dumps(docker_ssh_opts(cluster.ssh_for(host)))
    inputs = {"host": host.docker_host, "sshOpts": ssh_opts, "version": "5.1.0"}
    pid = "555a3e2f-99f7-4ab7-902a-fb7d35d2b381"
    master = f"{URN}{SERVICE_TYPE}::exp1-train-master"
    # A stack reference is read, not made: the engine keeps it as an external resource.
    path = "organization/deepspeed-swarm/c1"
    return {
        "manifest": {},
        "resources": [
            {"urn": stack, "type": STACK_TYPE, "custom": False},
            {"urn": ref, "type": CLUSTER_REF_TYPE, "parent": stack},
            {"urn": f"{URN}{CLUSTER_REF_TYPE}${STACK_REFERENCE}::exp1-cluster-stack",
             "type": STACK_REFERENCE, "custom": True, "external": True, "id": path,
             "parent": ref, "inputs": {"name": path}, "outputs": {"name": path}},
            {"urn": provider, "type": DOCKER_PROVIDER, "custom": True, "id": pid,
             "parent": ref, "inputs": dict(inputs), "outputs": dict(inputs)},
            {"urn": master, "type": SERVICE_TYPE, "custom": True, "id": "svc1",
             "parent": stack, "provider": f"{provider}::{pid}", "dependencies": [provider],
             "propertyDependencies": {"name": [provider]},
             "inputs": {"name": "exp1-master"}, "outputs": {"name": "exp1-master"}},
            {"urn": f"{URN}{DYNAMIC_TYPE}::exp1-train-fit", "type": DYNAMIC_TYPE,
             "custom": True, "id": "fit", "parent": stack, "dependencies": [master],
             "inputs": {"leader_endpoint": endpoint(host), "job": "exp1"},
             "outputs": {"leader_endpoint": endpoint(host), "job": "exp1"}},
            {"urn": f"{URN}{DYNAMIC_TYPE}::exp1-code", "type": DYNAMIC_TYPE,
             "custom": True, "id": "code", "parent": stack,
             "inputs": {"leader_endpoint": endpoint(hosts["lab-h2"])},
             "outputs": {"leader_endpoint": endpoint(hosts["lab-h2"])}},
        ],
    }  # fmt: skip


@pytest.fixture
def cluster(project: Path) -> StackConfig:
    """Cluster c1 with three managers lab-h1..h3, as a command reached it through lab-h3."""
    three_managers(project)
    return command.cluster_settings("c1").model_copy(update={"manager": "lab-h3"})


def _host(cluster: StackConfig, name: str) -> Any:
    return next(h for h in cluster.hosts if h.name == name)


def _moved(cluster: StackConfig, state: dict[str, Any]) -> dict[str, Any]:
    h1, h3 = _host(cluster, "lab-h1"), _host(cluster, "lab-h3")
    args = provider_args(h3, cluster.ssh_for(h3))
    return repoint.moved_state(state, "exp1", "lab-h1", endpoint(h1), h3, args)


def test_the_moved_state_holds_the_provider_the_program_makes(cluster: StackConfig) -> None:
    """Moved from lab-h1 to lab-h3: the state holds the provider the program makes for a
    job going through lab-h3 (its name, its engine), and every reference to it is renamed."""
    moved = _moved(cluster, job_state("lab-h1", cluster))
    want = job_state("lab-h3", cluster)
    assert moved == want
    assert state_manager(moved, "exp1") == "lab-h3"


def test_the_exported_state_is_left_as_it_was(cluster: StackConfig) -> None:
    """The state given is not changed: a failed import leaves nothing half moved."""
    state = job_state("lab-h1", cluster)
    before = copy.deepcopy(state)
    _moved(cluster, state)
    assert state == before


def test_another_hosts_endpoint_stays(cluster: StackConfig) -> None:
    """Only the lost manager's endpoint moves; a resource holding another host's keeps it."""
    moved = _moved(cluster, job_state("lab-h1", cluster))
    code = next(r for r in moved["resources"] if r["urn"].endswith("::exp1-code"))
    assert code["inputs"]["leader_endpoint"] == endpoint(_host(cluster, "lab-h2"))


def test_the_provider_keeps_its_id_and_what_else_it_holds(cluster: StackConfig) -> None:
    """The provider keeps its id (the resources' references name it) and its version;
    its engine is lab-h3's, its SSH options as the SDK writes a list (JSON text)."""
    moved = _moved(cluster, job_state("lab-h1", cluster))
    (prov,) = [r for r in moved["resources"] if r["type"] == DOCKER_PROVIDER]
    assert prov["id"] == "555a3e2f-99f7-4ab7-902a-fb7d35d2b381"
    assert prov["inputs"]["version"] == "5.1.0"
    assert prov["inputs"]["host"] == _host(cluster, "lab-h3").docker_host
    assert isinstance(json.loads(prov["inputs"]["sshOpts"]), list)


def test_a_manager_reached_with_tls_is_refused(cluster: StackConfig) -> None:
    """TLS key material is a secret the engine encrypts: that move is refused, by name."""
    h3 = _host(cluster, "lab-h3")
    args = {"host": "tcp://10.213.0.13:2376", "ca_material": "ca", "key_material": "k"}
    with pytest.raises(ConfigError, match="ca_material, key_material"):
        repoint.moved_state(job_state("lab-h1", cluster), "exp1", "lab-h1", None, h3, args)


def test_a_state_without_the_lost_managers_provider_is_refused(cluster: StackConfig) -> None:
    """A state made through lab-h2 has no provider named for lab-h1: refused, by name."""
    with pytest.raises(ConfigError, match="no docker provider named exp1-cluster-docker-lab-h1"):
        _moved(cluster, job_state("lab-h2", cluster))


class Exported:
    """A job stack's export and import, recording the imports."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.calls: list[str] = []

    def export_stack(self) -> auto.Deployment:
        self.calls.append("export")
        return auto.Deployment(version=3, deployment=self.state)

    def import_stack(self, deployment: auto.Deployment) -> None:
        self.calls.append("import")
        assert deployment.version == 3
        self.state = dict(deployment.deployment or {})

    def destroy(self, **_kw: Any) -> None:
        self.calls.append(f"destroy through {state_manager(self.state, 'exp1')}")


def _probe(lost: set[str], asked: list[str]) -> Any:
    def answers(_cfg: Any, host: Any) -> str | None:
        asked.append(host.name)
        return "ssh: connect to host: Connection timed out" if host.name in lost else None

    return answers


def _kept(cluster: StackConfig, monkeypatch: pytest.MonkeyPatch, made: str) -> list[str]:
    """`way_in` of a job made through manager `made`, every manager answering: nothing
    moves (its state's manager, no import); the managers it asked."""
    asked: list[str] = []
    monkeypatch.setattr(repoint, "answers", _probe(set(), asked))
    stack = Exported(job_state(made, cluster))
    assert repoint.way_in(stack, "exp1", cluster, print) == made  # type: ignore[arg-type]  # a fake stack
    assert stack.calls == ["export"]
    return asked


def test_a_job_whose_manager_answers_keeps_it(
    cluster: StackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its state's manager lab-h1 answers: nothing moves, though lab-h3 was reached."""
    assert _kept(cluster, monkeypatch, "lab-h1") == ["lab-h1"]


def test_a_job_made_through_the_reached_manager_asks_no_one(
    cluster: StackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its state's manager is the one reached: no probe, nothing moves."""
    assert _kept(cluster, monkeypatch, "lab-h3") == []


def test_a_job_whose_manager_is_lost_moves_and_its_file_names_the_new_one(
    cluster: StackConfig, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its manager lab-h1 lost: its state moves to lab-h3 (said, naming both and why),
    and its file here names lab-h3."""
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"]))
    monkeypatch.setattr(repoint, "answers", _probe({"lab-h1"}, []))
    stack = Exported(job_state("lab-h1", cluster))
    said: list[str] = []
    assert repoint.moved_job(stack, "exp1", cluster, said.append) == "lab-h3"  # type: ignore[arg-type]  # a fake stack
    assert stack.calls == ["export", "import"]
    assert state_manager(stack.state, "exp1") == "lab-h3"
    assert said == [
        "job exp1: its manager lab-h1 does not answer (ssh: connect to host: Connection "
        "timed out); its state now goes through manager lab-h3"
    ]
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h3"


def test_a_file_naming_another_manager_than_the_state_is_written_to_the_states(
    cluster: StackConfig, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that names lab-h1 while the state goes through lab-h3 (moved from another
    checkout): nothing moves, and the file names lab-h3, so this checkout's `up` makes
    the provider the state holds instead of replacing it."""
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"], manager="lab-h1"))
    monkeypatch.setattr(repoint, "answers", _probe(set(), []))
    stack = Exported(job_state("lab-h3", cluster))
    assert repoint.moved_job(stack, "exp1", cluster, print) == "lab-h3"  # type: ignore[arg-type]  # a fake stack
    assert stack.calls == ["export"]
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h3"


def test_a_file_going_through_the_states_manager_is_left_as_it_is(
    cluster: StackConfig, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file with no `manager` (the cluster's first, lab-h1) and a state made through
    lab-h1, which answers: the file is not written."""
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"]))
    before = (project / "Pulumi.exp1.yaml").read_text()
    monkeypatch.setattr(repoint, "answers", _probe(set(), []))
    stack = Exported(job_state("lab-h1", cluster))
    assert repoint.moved_job(stack, "exp1", cluster, print) == "lab-h1"  # type: ignore[arg-type]  # a fake stack
    assert (project / "Pulumi.exp1.yaml").read_text() == before


def test_stop_of_a_job_whose_manager_is_lost_destroys_through_the_one_reached(
    cluster: StackConfig, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job stop` moves the job's state to the manager that answers before its destroy."""
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"]))
    monkeypatch.setattr(repoint, "answers", _probe({"lab-h1"}, []))
    monkeypatch.setattr(command, "reached", lambda cfg, *_a, **_k: cluster)
    stack = Exported(job_state("lab-h1", cluster))
    monkeypatch.setattr(command, "workspace_stack", lambda _n, _e=None: stack)
    teardown.stop("exp1", out=lambda _line: None)
    assert stack.calls == ["export", "import", "destroy through lab-h3"]


def test_stop_of_a_job_whose_file_is_not_here_moves_it_through_its_states_cluster(
    cluster: StackConfig, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job stop` in a checkout without the job's file (one started by another
    checkout's pass): its cluster is the one its state references (c1), reached through
    lab-h3; the state moves there before its destroy, said as for a job with a file.
    Its state is exported once: the export that names its cluster is the one moved."""
    monkeypatch.setattr(repoint, "answers", _probe({"lab-h1"}, []))
    reached: list[str | None] = []

    def through_h3(cfg: StackConfig, *_a: Any, **_k: Any) -> StackConfig:
        reached.append(cfg.cluster)
        return cluster

    monkeypatch.setattr(command, "reached", through_h3)
    stack = Exported(job_state("lab-h1", cluster))
    monkeypatch.setattr(command, "workspace_stack", lambda _n, _e=None: stack)
    said: list[str] = []
    teardown.stop("exp1", out=said.append)
    assert reached == ["c1"]
    assert stack.calls == ["export", "import", "destroy through lab-h3"]
    assert said[0].startswith("job exp1: its manager lab-h1 does not answer ("), said
    assert not (project / "Pulumi.exp1.yaml").exists()
