"""infra.components.services: how many warm-up tasks the hosts' engines need; a job's
own standby on the spares."""

from __future__ import annotations

import copy
from typing import Any, cast

import pulumi
import pulumi_docker as docker
import pytest
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from infra.components.services import TrainingServices, TrainingServicesArgs, warmup_replicas
from infra.config import parse_stack_config
from infra.layout import JOB_LABEL, job_standby_name
from infra.render.labels import SPARE_CONSTRAINT
from tests.unit.infra.samples import Mocks, stack_config

pytestmark = pytest.mark.unit


def test_current_engines_get_no_warmup() -> None:
    """Every active host on an engine with the overlay fix (23.0.2 on): no warm-up task."""
    observed = [{"docker_version": "28.5.2"}, {"docker_version": "26.1.5+dfsg1"}]
    assert warmup_replicas(2, observed) == 0


def test_one_old_engine_warms_every_host() -> None:
    """One active host on 20.10 gives every active host its warm-up task (all or none)."""
    observed = [{"docker_version": "28.5.2"}, {"docker_version": "20.10.24+dfsg1"}]
    assert warmup_replicas(2, observed) == 2


@pytest.mark.parametrize("facts", [None, {}, {"docker_version": ""}])
def test_unknown_engine_is_warmed(facts: dict[str, str] | None) -> None:
    """A host whose engine is not known (facts not read, version not printed) is warmed."""
    assert warmup_replicas(3, [{"docker_version": "28.5.2"}, facts, facts]) == 3


class _Cluster(pulumi.ComponentResource):
    """What a job's services read of its cluster (a ClusterRef's attributes)."""

    def __init__(self) -> None:
        super().__init__("test:unit:Cluster", "cluster")
        self.ref = pulumi.Output.from_input(f"train@sha256:{'ab' * 32}")
        self.network_id = pulumi.Output.from_input("overlay-id")
        self.secrets: dict[str, Any] = {}
        self.manager_provider = docker.Provider(
            "leader", host="unix:///leader.sock", opts=pulumi.ResourceOptions(parent=self)
        )
        self.leader_endpoint = {"url": "unix:///leader.sock"}
        self.ssh_hosts: dict[str, Any] = {}
        self.members: list[pulumi.Resource] = []


def _job_services(job: str, with_spare: bool, gpus: int | None = None) -> TrainingServices:
    """A job's TrainingServices on the lab8 config (8 hosts and a spare), or with its
    spare left out; `gpus` per node instead of lab8's 8."""
    raw = copy.deepcopy(stack_config("lab8"))
    raw.pop("secrets", None)
    if gpus is not None:
        raw["training"]["gpus_per_node"] = gpus
    cfg = parse_stack_config(raw)
    every = cfg.hosts if with_spare else [h for h in cfg.hosts if not h.spare]
    cluster = cast(Any, _Cluster())
    services = TrainingServices(
        "unit-train",
        TrainingServicesArgs(
            training=cfg.training, monitoring=cfg.monitoring, network=cfg.network,
            hosts=every, active_hosts=cfg.active_hosts, workers=cfg.workers[:3],
            unused=cfg.workers[3:], spares=[h for h in every if h.spare], secret_names=[],
            image=cluster, overlay=cluster, secrets=cluster, swarm=cluster, facts=None,
            job=job,
        ),
    )  # fmt: skip
    _sync_await(wait_for_rpcs())
    return services


def test_job_with_spares_has_its_own_standby_before_its_gpu_tasks(mocks: Mocks) -> None:
    """A job stack puts one idle task of its own on each spare, labelled as the job's,
    and its master and workers wait for it (the spare stays last for their placement)."""
    services = _job_services("exp-a", with_spare=True)
    standby = mocks.named("unit-train-standby")
    assert standby.inputs["name"] == job_standby_name("exp-a") == "exp-a-standby"
    assert standby.inputs["mode"]["replicated"]["replicas"] == 1
    assert standby.inputs["taskSpec"]["placement"]["constraints"] == [SPARE_CONSTRAINT]
    assert {"label": JOB_LABEL, "value": "exp-a"} in standby.inputs["labels"]
    assert services.standby is not None and services.before_gpu_tasks == [services.standby]
    # The standby first; the master and the worker both wait for it, and the mocks
    # register those two in either order.
    names = [r.name for r in mocks.by_type("docker:index/service:Service")]
    assert names[0] == "unit-train-standby", names
    assert sorted(names[1:]) == ["unit-train-master", "unit-train-worker"], names


def test_job_without_spares_has_no_standby(mocks: Mocks) -> None:
    """Without a spare there is nothing to keep last: no standby service at all."""
    services = _job_services("exp-b", with_spare=False)
    assert not [r for r in mocks.resources if r.name.endswith("-standby")]
    assert services.standby is None and services.before_gpu_tasks == []


def test_job_checks_its_gpus_before_any_service(mocks: Mocks) -> None:
    """A job registers its GPU check first, with its hosts, its own services and its
    GPUs per node; its standby and GPU services come after it (they depend on it)."""
    services = _job_services("exp-c", with_spare=True)
    fit = mocks.named("unit-train-fit")
    assert services.fit is not None
    assert fit.inputs["job"] == "exp-c"
    assert fit.inputs["services"] == ["exp-c-master", "exp-c-worker"]
    assert fit.inputs["hosts"] == ["lab-h1", "lab-h2", "lab-h3", "lab-h4"]
    assert fit.inputs["gpus"] == 8
    assert fit.inputs["leader_endpoint"] == {"url": "unix:///leader.sock"}
    names = [r.name for r in mocks.resources]
    assert names.index("unit-train-fit") < names.index("unit-train-standby")
    assert names.index("unit-train-standby") < names.index("unit-train-master")


def test_cpu_job_has_no_gpu_check(mocks: Mocks) -> None:
    """A job that reserves no GPUs (gpus_per_node 0) has nothing to check."""
    services = _job_services("exp-d", with_spare=False, gpus=0)
    assert services.fit is None
    assert not [r for r in mocks.resources if r.name.endswith("-fit")]


def test_the_spec_label_is_a_digest_of_the_task_spec_alone(mocks: Mocks) -> None:
    """follow_master's `dss.spec`: equal for equal task specs, another for any change
    to one (what makes Swarm replace the tasks)."""
    from infra.components.services import task_spec_label

    def label(env: dict[str, str]) -> str:
        spec = docker.ServiceTaskSpecArgs(
            container_spec=docker.ServiceTaskSpecContainerSpecArgs(
                image=pulumi.Output.from_input("train@sha256:ab"), env=env
            )
        )
        return cast(str, _sync_await(task_spec_label(spec).future()))

    assert label({"A": "1"}) == label({"A": "1"})
    assert label({"A": "1"}) != label({"A": "2"})
    assert len(label({})) == 16


PLANNED = ["lab-h5", "lab-h6", "lab-h7", "lab-h8"]


def _planned_services(
    gpu_model: str | None = None, hosts: list[str] | None = PLANNED
) -> TrainingServices:
    """A planned job's TrainingServices on lab8: 4 nodes on lab-h5..h8, master lab-h5
    (`hosts` None: 4 nodes and no hosts, as a job submitted before hosts existed)."""
    raw = copy.deepcopy(stack_config("lab8"))
    raw.pop("secrets", None)
    raw.update(kind="job", cluster="lab8")
    raw["training"].update(run_name="exp-p", nodes=4, gpus_per_node=4)
    if hosts is not None:
        raw["training"].update(hosts=hosts, placement="planned")
    if gpu_model is not None:
        raw["training"]["gpu_model"] = gpu_model
    cfg = parse_stack_config(raw)
    cluster = cast(Any, _Cluster())
    services = TrainingServices(
        "unit-train",
        TrainingServicesArgs(
            training=cfg.training, monitoring=cfg.monitoring, network=cfg.network,
            hosts=cfg.hosts, active_hosts=cfg.active_hosts, workers=cfg.workers,
            unused=cfg.unused_hosts, spares=cfg.spares, secret_names=[],
            image=cluster, overlay=cluster, secrets=cluster, swarm=cluster, facts=None,
            job=cfg.job_name, master=cfg.master if cfg.training.hosts else None,
        ),
    )  # fmt: skip
    _sync_await(wait_for_rpcs())
    return services


def _constraints(mocks: Mocks, role: str) -> list[str]:
    spec = mocks.named(f"unit-train-{role}").inputs["taskSpec"]
    return list(spec["placement"]["constraints"])


def test_planned_job_master_is_pinned_to_its_first_host(mocks: Mocks) -> None:
    """A job that names its hosts runs its master on the first of them, by host name."""
    _planned_services()
    assert _constraints(mocks, "master") == ["node.hostname==lab-h5"]


def test_planned_job_workers_keep_off_every_other_training_host(mocks: Mocks) -> None:
    """Its workers keep off every active training host outside the job and the master's
    (a moved task may still go to the spare), with no role label."""
    _planned_services()
    assert _constraints(mocks, "worker") == [
        "node.hostname!=lab-h1",
        "node.hostname!=lab-h2",
        "node.hostname!=lab-h3",
        "node.hostname!=lab-h4",
        "node.hostname!=lab-h5",
    ]
    assert mocks.named("unit-train-worker").inputs["mode"]["replicated"]["replicas"] == 3


def test_planned_job_asks_for_its_model_on_every_task(mocks: Mocks) -> None:
    """With a GPU model, both services also need the model's node label."""
    _planned_services("fake-gpu")
    assert _constraints(mocks, "master")[-1] == "node.labels.dss.gpu-model==fake-gpu"
    assert _constraints(mocks, "worker")[-1] == "node.labels.dss.gpu-model==fake-gpu"


def test_planned_job_checks_the_gpus_of_its_own_hosts(mocks: Mocks) -> None:
    """The GPU check judges the job's hosts, its master's first."""
    _planned_services()
    assert mocks.named("unit-train-fit").inputs["hosts"] == ["lab-h5", "lab-h6", "lab-h7", "lab-h8"]


def test_job_without_hosts_keeps_its_placement_by_role(mocks: Mocks) -> None:
    """A job whose file has no hosts (submitted by an earlier job command) keeps the
    role-label constraints it had, in the same order, and its GPU check the cluster's
    first hosts: its task specs are unchanged, so an upgrade replaces no task of it."""
    _planned_services(hosts=None)
    assert _constraints(mocks, "master") == ["node.labels.dss.role==master"]
    assert _constraints(mocks, "worker") == [
        "node.labels.dss.role==worker",
        *(f"node.hostname!={h}" for h in PLANNED),
    ]
    assert mocks.named("unit-train-fit").inputs["hosts"] == ["lab-h1", "lab-h2", "lab-h3", "lab-h4"]
