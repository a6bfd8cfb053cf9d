"""The job command's unit fixtures: a project dir with a cluster stack, and a job's spec."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from infra.config import stack_file_yaml
from jobs import command, jobfile, queuemetrics
from jobs.record import DOCKER_PROVIDER
from tests.unit.infra.providers.fakeconfigs import FakeConfigs
from tests.unit.infra.samples import stack_config


class MasterScripts(list[str]):
    """The scripts a test's passes ran on the cluster's master host (none is run)."""

    def __call__(self, _cfg: Any, script: str, **_kw: Any) -> Any:
        self.append(script)
        return types.SimpleNamespace(returncode=0, stdout="", stderr="")


class Stateless:
    """A fake job stack's export: a state naming no manager, as a job's before its first
    `up` (jobs/repoint.py moves nothing)."""

    def export_stack(self) -> Any:
        return types.SimpleNamespace(version=3, deployment={})


def provider(job: str, manager: str, **extra: Any) -> dict[str, Any]:
    """Job `job`'s cluster reference's docker provider to `manager`, as its state holds it."""
    urn = f"urn:pulumi:{job}::deepspeed-swarm::deepspeed-swarm:clusterref:ClusterRef$"
    return {"urn": f"{urn}pulumi:providers:docker::{job}-cluster-docker-{manager}",
            "type": DOCKER_PROVIDER, **extra}  # fmt: skip


def written() -> list[str]:
    """The scripts run on the master host since the `project` fixture was made: each a
    write of the queue's metrics file."""
    scripts = queuemetrics.on_master
    assert isinstance(scripts, MasterScripts), scripts
    return list(scripts)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project dir holding the dev stack's config as cluster stack `c1`, and a code
    dir `code` beside it. The queue's metrics file is written to no host: the scripts
    are kept in `queuemetrics.on_master` (a MasterScripts)."""
    monkeypatch.setattr(queuemetrics, "on_master", MasterScripts())
    monkeypatch.setattr(queuemetrics, "_written", {})
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.setattr(command, "ROOT", root)
    monkeypatch.setattr(jobfile, "ROOT", root)
    # The queue's entries on no leader: an empty fake (never the stack file's hosts).
    queue = FakeConfigs()
    monkeypatch.setattr(command, "leader_api", lambda _cfg: queue)
    # The cluster's first manager answers (jobs/leader.py `reached`: tests/unit/jobs/
    # test_leader.py), never asked here.
    monkeypatch.setattr(command, "reached", lambda cfg, *_out, **_kw: cfg)
    raw = {**stack_config("dev"), "kind": "cluster"}
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    (root / "Pulumi.c1.yaml").write_text(text)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hello')\n")
    return root


def spec(project: Path, **kw: Any) -> command.JobSpec:
    """Job exp1 on cluster c1 with the code dir beside `project`, and the fields `kw`."""
    code = project.parent / "code"
    return command.JobSpec(name="exp1", cluster="c1", code_dir=code, **kw)


def three_managers(project: Path) -> None:
    """Cluster `c1` with lab-h2 a manager too and a third manager lab-h3 (Raft's odd
    count): a cluster whose jobs may go through another manager than lab-h1."""
    raw = {**stack_config("dev"), "kind": "cluster"}
    third = {**raw["hosts"][1], "name": "lab-h3", "address": "10.213.0.13",
             "docker_host": "ssh://root@10.213.0.13"}  # fmt: skip
    raw["hosts"] = [raw["hosts"][0], {**raw["hosts"][1], "role": "manager"},
                    {**third, "role": "manager"}]  # fmt: skip
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    (project / "Pulumi.c1.yaml").write_text(text)


def through(manager: str, line: str | None = None) -> Any:
    """`command.reached` as a cluster whose first manager is lost answers: the settings
    going through `manager`, `line` (when given) said through the printer it gets."""

    def reached(cfg: Any, out: Any = None, **_kw: Any) -> Any:
        if line is not None:
            out(line)
        return cfg.model_copy(update={"manager": manager})

    return reached
