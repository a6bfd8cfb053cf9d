"""Acceptance on eight hosts (issue 8): the 9-host lab, the `lab8` stack's config
under a throwaway stack, the real engine, and a results table (report.py).

The fixtures reuse the engine suite's (tests/engine/conftest.py): the pinned
engine check, throwaway stacks that are destroyed and removed afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.acceptance.report import RESULTS, Row, record
from tests.engine.conftest import (  # noqa: F401 - fixtures are found by name
    LAB_ROOT,
    ROOT,
    Stack,
    engine,
    lab_cli,
    make_stack,
)

HOSTS = 9
"""lab-h1..h9: eight training hosts and the spare (Pulumi.lab8.yaml)."""
SPARE = "lab-h9"
RUN = "accept8"
SECRET = "wandb-acceptance-3b9d51c7-never-printed"


def lab8_config(**training: Any) -> dict[str, Any]:
    """The committed lab8 stack's config (namespaced keys), secrets left out (the
    throwaway stack sets its own), with training overrides."""
    doc = yaml.safe_load((ROOT / "Pulumi.lab8.yaml").read_text())["config"]
    doc.pop("deepspeed-swarm:secrets")
    doc["deepspeed-swarm:training"] = {**doc["deepspeed-swarm:training"], **training}
    return dict(doc)


@pytest.fixture(scope="module")
def lab9() -> Iterator[dict[str, Any]]:
    """The 9-host lab with 8 fake GPUs each (no swarm: the program forms it)."""
    lab_cli("down", check=False)
    RESULTS.unlink(missing_ok=True)
    for sub in ("checkpoints", "logs", ".dss"):
        shutil.rmtree(LAB_ROOT / "shared" / sub / RUN, ignore_errors=True)
    try:
        lab_cli("up", "--hosts", str(HOSTS), "--gpus", "8")
        yield json.loads(lab_cli("status", "--json").stdout)
    finally:
        lab_cli("down", check=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """Keep each phase's report on the item, for the `report` fixture."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The test fills `figure` and `command`; its row is recorded with pass/FAIL."""
    # The docstring's first sentence names the check.
    doc = " ".join((request.function.__doc__ or request.node.name).split())
    entry = {"check": doc.split(". ")[0].rstrip("."), "figure": "", "command": ""}
    yield entry
    rep = getattr(request.node, "rep_call", None)
    passed = rep is not None and rep.passed
    record(Row(entry["check"], "pass" if passed else "FAIL", entry["figure"], entry["command"]))


def docker(i: int, *args: str, check: bool = True) -> str:
    """The docker CLI against lab host i (as an operator on that host)."""
    argv = ["docker", "-H", f"unix://{LAB_ROOT}/h{i}/docker.sock", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"lab-h{i}: {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def host_index(node: str) -> int:
    return int(node.removeprefix("lab-h"))


def task_container(node: str, task_id: str) -> str:
    """The container id of a swarm task on its node."""
    out = docker(
        host_index(node), "ps", "-q", "--filter", f"label=com.docker.swarm.task.id={task_id}"
    )
    assert out.strip(), f"task {task_id}: no container on {node}"
    return out.split()[0]


def wait_for(what: str, probe: Any, timeout: float, interval: float = 2.0) -> Any:
    """Poll `probe` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def run_log(name: str) -> Path:
    return LAB_ROOT / "shared" / "logs" / RUN / name
