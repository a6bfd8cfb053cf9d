"""jobs.leader: the way into a cluster's swarm is the first of its managers that
answers (a probe stands for each manager's engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import ConfigError, Host, StackConfig, parse_job, stack_file_yaml
from jobs import leader
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit


@pytest.fixture
def cluster(tmp_path: Path) -> StackConfig:
    """The lab8 stack's hosts (managers lab-h1..h3) as cluster `c8`, read as its jobs
    read it."""
    raw = {**stack_config("lab8"), "kind": "cluster"}
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    (tmp_path / "Pulumi.c8.yaml").write_text(text)
    return parse_job({"kind": "job", "cluster": "c8", "training": {}}, "c8", tmp_path)


class Probe:
    """Each manager's answer: None (it answers), or why not; the hosts asked, in order."""

    def __init__(self, **down: str) -> None:
        self.down = {k.replace("_", "-"): v for k, v in down.items()}
        self.asked: list[str] = []

    def __call__(self, _cfg: StackConfig, host: Host) -> str | None:
        self.asked.append(host.name)
        return self.down.get(host.name)


def test_the_first_manager_answering_leaves_the_settings_as_they_are(
    cluster: StackConfig,
) -> None:
    """The cluster's first manager answers: nothing else is asked, nothing changes."""
    probe = Probe()
    assert leader.reached(cluster, probe=probe) is cluster
    assert probe.asked == ["lab-h1"]


def test_a_lost_first_manager_is_passed_over_and_said(cluster: StackConfig) -> None:
    """lab-h1 does not answer: the settings go through lab-h2, the next manager in the
    file's order, and the line says which and why."""
    probe, lines = Probe(lab_h1="No route to host"), list[str]()
    got = leader.reached(cluster, lines.append, probe)
    assert (got.manager, got.leader.name, probe.asked) == ("lab-h2", "lab-h2", ["lab-h1", "lab-h2"])
    assert lines == [
        "cluster c8: through manager lab-h2 (lab-h1 (ssh://root@10.213.0.11) does not answer: "
        "No route to host)"
    ]


def test_a_jobs_own_manager_is_asked_first(cluster: StackConfig) -> None:
    """A job that names lab-h3 asks it first; lost, the cluster's first is next."""
    job = cluster.model_copy(update={"manager": "lab-h3"})
    probe = Probe(lab_h3="Connection timed out")
    assert leader.reached(job, probe=probe).leader.name == "lab-h1"
    assert probe.asked == ["lab-h3", "lab-h1"]


def test_no_manager_answering_is_refused_naming_each(cluster: StackConfig) -> None:
    """No manager answers: a ConfigError naming every manager and what it said."""
    probe = Probe(lab_h1="a", lab_h2="b", lab_h3="c")
    with pytest.raises(ConfigError) as err:
        leader.reached(cluster, probe=probe)
    assert err.value.problems == [
        "cluster c8: no manager answers: lab-h1 (ssh://root@10.213.0.11) does not answer: a; "
        "lab-h2 (ssh://root@10.213.0.12) does not answer: b; lab-h3 (ssh://root@10.213.0.13) "
        "does not answer: c; allowed: a cluster with a manager that answers (the swarm "
        "keeps a leader while most managers do)"
    ]


def test_a_worker_or_a_manager_without_quorum_does_not_answer(
    cluster: StackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe asks for the swarm's nodes: an engine that refuses (a worker, or a
    manager whose swarm has no leader) is no way in, and its refusal is the reason."""
    from docker.errors import APIError

    class Api:
        def nodes(self) -> list[object]:
            raise APIError("503 Server Error: rpc error: The swarm does not have a leader.")

    class Client:
        api = Api()

    monkeypatch.setattr(leader, "docker_client", lambda _ep, _ssh=None: Client())
    said = leader.answers(cluster, cluster.hosts[0])
    assert said is not None and "does not have a leader" in said


def test_a_preferred_manager_that_answers_is_the_only_one_asked(cluster: StackConfig) -> None:
    """A watch's pass prefers lab-h2 (its last pass went through it): lab-h1, perhaps
    still down, is not asked, and nothing is said (nothing was passed over)."""
    probe, lines = Probe(lab_h1="Connection timed out"), list[str]()
    got = leader.reached(cluster, lines.append, probe, prefer="lab-h2")
    assert (got.manager, probe.asked, lines) == ("lab-h2", ["lab-h2"], [])


def test_a_lost_preferred_manager_falls_back_to_the_usual_order(cluster: StackConfig) -> None:
    """The preferred lab-h2 lost too: lab-h1 then lab-h3 are asked, each one passed over
    said."""
    probe, lines = Probe(lab_h1="a", lab_h2="b"), list[str]()
    got = leader.reached(cluster, lines.append, probe, prefer="lab-h2")
    assert (got.manager, probe.asked) == ("lab-h3", ["lab-h2", "lab-h1", "lab-h3"])
    assert lines == [
        "cluster c8: through manager lab-h3 (lab-h2 (ssh://root@10.213.0.12) does not answer: "
        "b; lab-h1 (ssh://root@10.213.0.11) does not answer: a)"
    ]


def test_preferring_no_manager_of_the_cluster_changes_nothing(cluster: StackConfig) -> None:
    """A preferred name that is no manager here (a worker, a host since removed) is not
    asked: the first manager answers and the settings stay as they are."""
    probe = Probe()
    assert leader.reached(cluster, probe=probe, prefer="lab-h5") is cluster
    assert probe.asked == ["lab-h1"]
