"""jobs.record: what a job's state says of its cluster (the facts the commands read of
a job whose file is not in this checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import StackConfig
from jobs import command
from jobs.record import state_cluster
from tests.unit.jobs.conftest import three_managers
from tests.unit.jobs.test_repoint import job_state

pytestmark = pytest.mark.unit


@pytest.fixture
def cluster(project: Path) -> StackConfig:
    """Cluster c1 with three managers lab-h1..h3."""
    three_managers(project)
    return command.cluster_settings("c1")


def test_the_cluster_is_the_one_its_stack_reference_names(cluster: StackConfig) -> None:
    """A job made on c1: its stack reference `organization/deepspeed-swarm/c1` names c1."""
    assert state_cluster(job_state("lab-h1", cluster), "exp1") == "c1"


def test_another_jobs_reference_is_not_its_cluster(cluster: StackConfig) -> None:
    """The reference must be the job's own (`exp1-cluster-stack`): exp2 has none here."""
    assert state_cluster(job_state("lab-h1", cluster), "exp2") is None


def test_a_state_with_no_resources_has_no_cluster() -> None:
    """A job never up, or stopped: no reference, no cluster."""
    assert state_cluster({}, "exp1") is None
    assert state_cluster(None, "exp1") is None


def test_a_reference_being_deleted_is_not_read(cluster: StackConfig) -> None:
    """A reference the engine has yet to delete (`delete: true`) is not the job's cluster."""
    state = job_state("lab-h1", cluster)
    for res in state["resources"]:
        if res["urn"].endswith("::exp1-cluster-stack"):
            res["delete"] = True
    assert state_cluster(state, "exp1") is None
