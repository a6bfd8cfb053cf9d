"""jobs.placement: the hosts a submit writes, named, kept or planned from the GPUs free."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.config import ConfigError, StackConfig, Training, parse_stack_config
from infra.providers.fit import Holder, SwarmGpus
from jobs.placement import job_hosts
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit

LAB8 = [f"lab-h{i}" for i in range(1, 9)]


def lab8() -> StackConfig:
    raw = copy.deepcopy(stack_config("lab8"))
    raw.pop("secrets", None)
    return parse_stack_config({**raw, "kind": "cluster"})


def swarm(**held: int) -> SwarmGpus:
    """lab8's nine hosts with 8 GPUs each; `held`: GPUs exp-a's master holds per host
    (`lab_h1=4`)."""
    return SwarmGpus(
        capacity={h: 8 for h in [*LAB8, "lab-h9"]},
        held={k.replace("_", "-"): [Holder("exp-a-master", "exp-a", n)] for k, n in held.items()},
    )


def test_named_hosts_are_written_as_named() -> None:
    """Hosts the person names are the job's, `placement: named`, unplanned."""
    t = Training(nodes=2, gpus_per_node=8, hosts=["lab-h7", "lab-h3"])
    assert job_hosts("exp-b", t, lab8(), swarm(lab_h7=8), {}) == {
        "hosts": ["lab-h7", "lab-h3"],
        "placement": "named",
    }


def test_new_job_is_planned_best_fit() -> None:
    """A new job goes where it leaves the fewest GPUs free: beside another job's half."""
    t = Training(nodes=2, gpus_per_node=4)
    keys = job_hosts("exp-b", t, lab8(), swarm(lab_h3=4, lab_h6=4), {})
    assert keys == {"hosts": ["lab-h3", "lab-h6"], "placement": "planned"}


def test_running_planned_job_keeps_its_hosts() -> None:
    """A planned job whose services hold GPUs keeps its hosts (a code push never moves it)."""
    held = SwarmGpus(
        capacity={h: 8 for h in LAB8}, held={"lab-h8": [Holder("exp-b-master", "exp-b", 8)]}
    )
    old = {"hosts": ["lab-h8"], "placement": "planned"}
    keys = job_hosts("exp-b", Training(nodes=1, gpus_per_node=8), lab8(), held, old)
    assert keys == {"hosts": ["lab-h8"], "placement": "planned"}


def test_stopped_planned_job_is_planned_afresh() -> None:
    """A planned job with no service holding GPUs is planned again from what is free."""
    old = {"hosts": ["lab-h8"], "placement": "planned"}
    keys = job_hosts("exp-b", Training(nodes=1, gpus_per_node=8), lab8(), swarm(), old)
    assert keys == {"hosts": ["lab-h1"], "placement": "planned"}


def test_named_hosts_in_the_file_are_kept() -> None:
    """Hosts a person named before are kept on a submit without --hosts, even stopped."""
    old: dict[str, Any] = {"hosts": ["lab-h8"], "placement": "named"}
    keys = job_hosts("exp-b", Training(nodes=1, gpus_per_node=8), lab8(), swarm(), old)
    assert keys == {"hosts": ["lab-h8"], "placement": "named"}


def test_job_that_does_not_fit_now_is_refused_naming_holders() -> None:
    """Too few hosts free now: refused (no queue yet), naming the shortfall and who holds
    the GPUs; nothing is changed."""
    busy = swarm(**{f"lab_h{i}": 8 for i in range(1, 8)})
    with pytest.raises(ConfigError) as e:
        job_hosts("exp-b", Training(nodes=2, gpus_per_node=8), lab8(), busy, {})
    first, second = e.value.problems
    assert first == (
        "training.nodes: job 'exp-b' needs 2 host(s) with 8 GPU(s); the cluster has 1 "
        "(lab-h8: 8 of 8) free now; allowed: at most the GPUs free now (scripts/job gpus), "
        "or wait until a job that holds them ends. Nothing was changed"
    )
    assert "lab-h1 has 0 of 8 free (held by exp-a-master, job exp-a: 8)" in second


def test_job_the_cluster_never_holds_is_refused() -> None:
    """More nodes than the cluster's candidates: refused as never, naming the job."""
    with pytest.raises(ConfigError) as e:
        job_hosts("exp-b", Training(nodes=9, gpus_per_node=8), lab8(), swarm(), {})
    assert e.value.problems == [
        "training.nodes: job 'exp-b' needs 9 host(s) with 8 GPU(s); the cluster has 8 "
        f"({', '.join(LAB8)}); allowed: at most 8 node(s). Nothing was changed"
    ]


def test_running_job_without_hosts_keeps_its_placement() -> None:
    """A job submitted before hosts existed, running, gets none: pinning it would
    replace its tasks."""
    held = SwarmGpus(
        capacity={h: 8 for h in LAB8}, held={"lab-h1": [Holder("exp-b-master", "exp-b", 8)]}
    )
    assert job_hosts("exp-b", Training(nodes=1, gpus_per_node=8), lab8(), held, {}) == {}


def test_cpu_job_is_not_planned() -> None:
    """A job that reserves no GPU gets no hosts unless named: nothing to plan by."""
    assert job_hosts("exp-b", Training(nodes=2, gpus_per_node=0), lab8(), swarm(), {}) == {}
