"""The CI workflows (.github/workflows): lint-clean, pinned, least privilege, one lock per stack."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
STACKS = ("dev", "prod")
SHA = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
# One call of a project script: a path under scripts/ and plain word arguments.
SCRIPT_CALL = re.compile(r"^(scripts/[\w./-]+)((?: [\w.-]+)*)$")


def load(path: Path) -> dict[str, Any]:
    """A workflow file (PyYAML reads the `on:` key as True)."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def jobs() -> list[tuple[str, str, dict[str, Any]]]:
    """(workflow file, job id, job) of every job."""
    return [(p.name, jid, job) for p in WORKFLOWS for jid, job in load(p)["jobs"].items()]


def steps() -> list[tuple[str, dict[str, Any]]]:
    """(workflow:job, step) of every step."""
    return [(f"{wf}:{jid}", s) for wf, jid, job in jobs() for s in job["steps"]]


def job_stack(job: dict[str, Any]) -> str | None:
    """The stack a job acts on: the action's stack-name or a script's argument."""
    for step in job["steps"]:
        named = (step.get("with") or {}).get("stack-name")
        if named:
            return str(named)
        args = str(step.get("run", "")).split()[1:]
        if any(a in STACKS for a in args):
            return next(a for a in args if a in STACKS)
    return None


def actionlint() -> str:
    """The actionlint binary: .venv/bin (scripts/ci/install-actionlint) or PATH."""
    local = Path(sys.executable).parent / "actionlint"
    found = str(local) if local.exists() else shutil.which("actionlint")
    assert found, "actionlint is missing: run scripts/ci/install-actionlint"
    return found


def test_workflows_exist() -> None:
    """Preview, drift and deploy workflows are there."""
    assert {p.name for p in WORKFLOWS} == {"preview.yml", "drift.yml", "deploy.yml"}


def test_actionlint_passes() -> None:
    """actionlint finds nothing in the workflows (fails, not skips, when it is missing)."""
    result = subprocess.run(
        [actionlint(), "-no-color"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"actionlint:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize(("where", "step"), steps(), ids=lambda v: v if isinstance(v, str) else "")
def test_run_steps_call_one_project_script(where: str, step: dict[str, Any]) -> None:
    """Every `run:` is one call of an executable project script: no logic in YAML."""
    if "run" not in step:
        return
    match = SCRIPT_CALL.match(str(step["run"]).strip())
    assert match, f"{where}: run {step['run']!r} is not one project script call"
    script = ROOT / match.group(1)
    assert script.is_file(), f"{where}: {match.group(1)} does not exist"
    assert os.access(script, os.X_OK), f"{where}: {match.group(1)} is not executable"


@pytest.mark.parametrize(("where", "step"), steps(), ids=lambda v: v if isinstance(v, str) else "")
def test_actions_pinned_by_sha(where: str, step: dict[str, Any]) -> None:
    """Every `uses:` names a full 40-hex commit SHA."""
    if "uses" in step:
        assert SHA.match(step["uses"]), f"{where}: {step['uses']} is not pinned by commit SHA"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_permissions_least_privilege(path: Path) -> None:
    """Every workflow sets `permissions:` to read the repository only; jobs add what they need."""
    assert load(path).get("permissions") == {"contents": "read"}, f"{path.name}: permissions"


@pytest.mark.parametrize(
    ("wf", "jid", "job"), jobs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_one_concurrency_group_per_stack(wf: str, jid: str, job: dict[str, Any]) -> None:
    """Every job locks the stack it acts on: group `pulumi-<stack>`, never cancelled mid-run."""
    stack = job_stack(job)
    assert stack in STACKS, f"{wf}:{jid}: acts on no known stack"
    assert job.get("concurrency") == {
        "group": f"pulumi-{stack}",
        "cancel-in-progress": False,
    }, f"{wf}:{jid}: concurrency"


@pytest.mark.parametrize(
    ("wf", "jid", "job"), jobs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_prod_jobs_run_inside_the_cluster_network(wf: str, jid: str, job: dict[str, Any]) -> None:
    """Prod jobs run on the self-hosted runner that reaches the hosts over SSH."""
    if job_stack(job) == "prod":
        assert job["runs-on"] == ["self-hosted", "dss-prod"], f"{wf}:{jid}: runs-on"


def test_prod_up_needs_approval() -> None:
    """`pulumi up` on prod runs in the protected `prod` environment, after dev."""
    job = load(ROOT / ".github" / "workflows" / "deploy.yml")["jobs"]["up-prod"]
    assert job["environment"] == "prod", "up-prod: environment"
    assert job["needs"] == "up-dev", "up-prod: needs"


def test_pulumi_cli_matches_toolchain() -> None:
    """The CI's Pulumi CLI is the version the SDK and toolchain pin."""
    pinned = re.search(
        r"^PULUMI_VERSION=(\S+)", (ROOT / "toolchain/versions.env").read_text(), re.M
    )
    assert pinned, "toolchain/versions.env: PULUMI_VERSION"
    versions = {
        str(s["with"]["pulumi-version"])
        for _, s in steps()
        if str(s.get("uses", "")).startswith("pulumi/actions@")
    }
    assert versions == {pinned.group(1)}, "pulumi/actions pulumi-version"


def test_previews_comment_and_apply_policy() -> None:
    """PR previews post the diff on the PR and apply the stack's policy config."""
    for jid, job in load(ROOT / ".github" / "workflows" / "preview.yml")["jobs"].items():
        action = next(s["with"] for s in job["steps"] if "pulumi/actions@" in s.get("uses", ""))
        stack = action["stack-name"]
        assert action["comment-on-pr"] is True, f"{jid}: comment-on-pr"
        assert action["policyPacks"] == "policy", f"{jid}: policyPacks"
        assert action["policyPackConfigs"] == f"policy/config/{stack}.json", f"{jid}: config"
