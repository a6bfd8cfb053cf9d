"""delivery.preview: `pulumi preview --json` rendered for a reviewer (golden files)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from delivery import preview
from delivery.preview import Impact
from infra.layout import CONFIG_TYPE, IMAGE_TYPE, JUPYTER_SERVICE, SERVICE_TYPE, STANDBY_SERVICE
from tests.unit.delivery.rename import renamed, verdicts
from tests.unit.golden import check_golden

pytestmark = pytest.mark.unit

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
GOLDEN = HERE / "golden"
ROOT = HERE.parents[2]


def digest(name: str) -> dict[str, Any]:
    """A preview digest fixture (fixtures/README.md says where they come from)."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def golden(name: str, text: str) -> None:
    """Compare with golden/<name> byte for byte; DSS_UPDATE_GOLDEN=1 rewrites it."""
    check_golden(GOLDEN / name, text)


def by_name(name: str) -> dict[str, preview.Change]:
    return {c.name: c for c in preview.changes(digest(name))}


@pytest.mark.parametrize(
    ("fixture", "stack"),
    [
        ("dev-image-change", "dev"),
        ("dev-no-changes", "dev"),
        ("dev-add-host", "dev"),
        ("prod-no-changes", "prod"),
    ],
)
def test_comment_matches_golden(fixture: str, stack: str) -> None:
    """The PR comment of each fixture equals its golden markdown."""
    golden(f"{fixture}.md", preview.render(digest(fixture), stack))


def test_drift_issue_matches_golden() -> None:
    """The drift issue body names the drifted resources and equals its golden markdown."""
    text = preview.render_drift(digest("prod-drift"), "prod", "https://ci.example/run/1")
    golden("prod-drift-issue.md", text)


def test_script_renders_stdin() -> None:
    """scripts/preview-comment reads the JSON on stdin and prints the same comment."""
    out = subprocess.run(
        [ROOT / "scripts" / "preview-comment", "--stack", "dev"],
        input=(FIXTURES / "dev-image-change.json").read_text(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    transport = "TCP sockets over the VXLAN overlay (the tasks' eth0); no RDMA"
    assert out == preview.render(digest("dev-image-change"), "dev", transport)


def test_comment_says_the_stack_s_transport() -> None:
    """The comment names what the ranks talk over, from the stack file (prod: RDMA only)."""
    from delivery.comment import stack_transport

    prod = stack_transport("prod")
    assert prod.startswith("RDMA only (NCCL_NET=IB over mlx5_0, GID index 3)"), prod
    assert "Data plane: " + prod in preview.render({}, "prod", prod)
    assert stack_transport("no-such-stack") == ""


def test_replacement_steps_fold_into_one_replace() -> None:
    """create-replacement, replace and delete-replaced of one URN count as one replace."""
    runs = [c for c in preview.changes(digest("dev-image-change")) if c.name == "dev-launch-run"]
    assert [c.op for c in runs] == ["replace"], "dev-launch-run: one replace"


def test_stack_and_components_are_not_changes() -> None:
    """The root stack and the project's components themselves are not listed."""
    names = by_name("dev-image-change")
    assert "deepspeed-swarm-dev" not in names and "dev-train" not in names


IMPACTS = [
    # (behaviour, fixture, resource, impact, words in the reason)
    (
        "image change on a service",
        "dev-image-change",
        "dev-train-master",
        Impact.RESTARTS,
        "image changed",
    ),
    ("warm-up service roll", "dev-image-change", "dev-train-net-warmup", Impact.NONE, "warm-up"),
    ("launch replaced", "dev-add-host", "dev-launch-run", Impact.RESTARTS, "restarted"),
    ("worker replicas", "dev-add-host", "dev-train-worker", Impact.MOVES, "1 -> 2"),
    ("node label change", "dev-add-host", "dev-swarm-node-lab-h2", Impact.MOVES, "labels"),
    ("new secret", "dev-add-host", "dev-secrets-hf-token", Impact.NONE, "not used"),
    ("new host facts", "dev-add-host", "dev-facts-lab-h3", Impact.NONE, "read-only"),
    ("drained node (drift)", "prod-drift", "prod-swarm-node-gpu-05", Impact.MOVES, "availability"),
]


@pytest.mark.parametrize(
    ("fixture", "name", "level", "words"), [i[1:] for i in IMPACTS], ids=[i[0] for i in IMPACTS]
)
def test_training_impact(fixture: str, name: str, level: Impact, words: str) -> None:
    """Each kind of change gets its training impact, and the reason says why."""
    change = by_name(fixture)[name]
    assert change.impact is level, f"{name}: impact"
    assert words in change.why, f"{name}: reason {change.why!r}"


def test_components_from_urn_parent_chain() -> None:
    """A resource's component is the nearest deepspeed-swarm:* type in its URN."""
    types, name = preview.parse_urn(
        "urn:pulumi:dev::deepspeed-swarm::deepspeed-swarm:services:TrainingServices"
        "$docker:index/service:Service::dev-train-master"
    )
    assert (preview.component_of(types), name) == (
        "deepspeed-swarm:services:TrainingServices",
        "dev-train-master",
    )


def test_bad_urn_refused() -> None:
    """A string that is not a URN is refused, naming it."""
    with pytest.raises(ValueError, match="not-a-urn"):
        preview.parse_urn("not-a-urn")


def test_secret_values_never_printed() -> None:
    """Only property names reach the comment, never input values."""
    text = preview.render(digest("dev-image-change"), "dev")
    assert "sha256:" not in text and "[secret]" not in text


def step(component: str, type_: str, op: str, props: dict[str, Any]) -> dict[str, Any]:
    """A preview step of a resource of `component` (`module:Class`) with these inputs."""
    urn = f"urn:pulumi:dev::deepspeed-swarm::deepspeed-swarm:{component}${type_}::dev-x"
    state = {"urn": urn, "type": type_, "inputs": props}
    return {"op": op, "urn": urn, "oldState": state, "newState": state, "diffReasons": ["taskSpec"]}


@pytest.mark.parametrize(
    ("component", "service"),
    [("services:TrainingServices", STANDBY_SERVICE), ("jupyter:JupyterLab", JUPYTER_SERVICE)],
)
def test_idle_and_notebook_services_leave_training_alone(component: str, service: str) -> None:
    """A new image rolls the standby and JupyterLab services without touching training."""
    (c,) = preview.changes({"steps": [step(component, SERVICE_TYPE, "update", {"name": service})]})
    assert c.impact is Impact.NONE and "training tasks keep running" in c.why, f"{service}: {c.why}"


def monitoring_step(type_: str, name: str, op: str, *diff: str) -> dict[str, Any]:
    """A preview step of a resource of the monitoring component."""
    urn = f"urn:pulumi:dev::deepspeed-swarm::deepspeed-swarm:monitoring:Monitoring${type_}::{name}"
    return {"op": op, "urn": urn, "diffReasons": list(diff), "detailedDiff": None}


def test_monitoring_changes_leave_training_alone() -> None:
    """A new alert threshold (a new rules config, Prometheus rolls onto it) and a new
    monitoring image are reported as leaving training alone, never as a restart."""
    d = {
        "steps": [
            monitoring_step(CONFIG_TYPE, "dev-monitoring-rules", "create-replacement", "data"),
            monitoring_step(CONFIG_TYPE, "dev-monitoring-rules", "replace", "data"),
            monitoring_step(SERVICE_TYPE, "dev-monitoring-prometheus", "update", "taskSpec"),
            monitoring_step(SERVICE_TYPE, "dev-monitoring-node-exporter", "update", "taskSpec"),
            monitoring_step(IMAGE_TYPE, "dev-monitoring-image-build", "update", "imageName"),
        ]
    }
    cs = preview.changes(d)
    assert [c.name for c in cs] == [
        "dev-monitoring-rules",
        "dev-monitoring-prometheus",
        "dev-monitoring-node-exporter",
        "dev-monitoring-image-build",
    ]
    for c in cs:
        assert c.impact is Impact.NONE, f"{c.name}: {c.why}"
        assert "training tasks keep running" in c.why, f"{c.name}: reason {c.why!r}"
    assert "Overall: **leaves training alone**" in preview.render(d, "dev")


@pytest.mark.parametrize("fixture", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_verdicts_survive_a_rename(fixture: str) -> None:
    """Another stack name and other resource names, types and properties kept: every
    change gets the same verdict (the classifier reads no names)."""
    d = digest(fixture)
    other = renamed(d)
    names = {c.name for c in preview.changes(d)}
    assert not names & {c.name for c in preview.changes(other)}, "nothing was renamed"
    assert verdicts(other) == verdicts(d)


def _run_step(**outputs: Any) -> dict[str, Any]:
    """A preview step of the run's record, as `pulumi preview --json` gives it."""
    inputs = {"run_name": "dev", "stall_after_s": 900}
    urn = (
        "urn:pulumi:dev::deepspeed-swarm::deepspeed-swarm:launch:TrainingLaunch"
        "$pulumi-python:dynamic:Resource::dev-launch-run-state"
    )
    return {"op": "same", "urn": urn,
            "oldState": {"inputs": inputs, "outputs": {**inputs, **outputs}}}  # fmt: skip


def test_comment_says_the_run_is_failed_and_what_up_does() -> None:
    """A failed run: its state, last step and why, and that `up` relaunches it from the
    newest checkpoint; the launcher log's own words stay out of the comment."""
    step = _run_step(
        state="failed", step=165, checkpoint="step_00000165", restarts=1,
        reason="restart budget spent after 1 automatic restarts; last step 165; "
        "the launcher log says: token=abc",
    )  # fmt: skip
    text = preview.render({"steps": [step]}, "dev")
    assert (
        "Run `dev`: **failed** at step 165 (restart budget spent after 1 automatic restarts;"
        " last step 165); `pulumi up` relaunches it from checkpoint `step_00000165`;"
        " 1 automatic restart so far." in text
    ), text
    assert "token=abc" not in text


def test_comment_says_a_running_run_is_running() -> None:
    """A running run: its state only; no run record at all: no line."""
    text = preview.render({"steps": [_run_step(state="running", step=None, restarts=0)]}, "dev")
    assert "Run `dev`: **running**." in text
    assert "Run `" not in preview.render({"steps": []}, "dev")


def _gate_step(op: str = "same", **outputs: Any) -> dict[str, Any]:
    """A preview step of the collective gate's record."""
    inputs = {"min_busbw_MBps": 20.0, "sizes": [1048576, 4194304]}
    urn = (
        "urn:pulumi:dev::deepspeed-swarm::deepspeed-swarm:launch:TrainingLaunch$"
        "deepspeed-swarm:gate:BandwidthGate$pulumi-python:dynamic:Resource::dev-launch-gate-allreduce"
    )
    return {"op": op, "urn": urn,
            "oldState": {"inputs": inputs, "outputs": {**inputs, **outputs}}}  # fmt: skip


def test_comment_gives_the_gates_last_result() -> None:
    """A passed gate: its bandwidth at the largest size, the floor and the time."""
    figures = [{"bytes": 1048576, "busbw_MBps": 30.0}, {"bytes": 4194304, "busbw_MBps": 105.1}]
    step = _gate_step(state="passed", busbw_MBps=105.1, figures=figures, seconds=5.1)
    assert (
        "Collective gate: **passed**, 105.1 MB/s bus bandwidth at 4194304 bytes (floor 20.0),"
        " 5.1 s." in preview.render({"steps": [step]}, "dev")
    )


def test_comment_says_a_change_measures_the_gate_again() -> None:
    """A change that updates the gate (new tasks) says it measures before the launch."""
    step = _gate_step("update", state="skipped", reason="training already runs")
    assert (
        "Collective gate: **skipped** (training already runs); this change measures again"
        " before the launch." in preview.render({"steps": [step]}, "dev")
    )


def test_cluster_comment_names_the_jobs_a_new_image_restarts() -> None:
    """A cluster's new image restarts every job on it: the comment names them and the
    change that reaches them."""
    text = preview.render(digest("dev-image-change"), "lab-cluster", jobs=("exp-a", "exp-b"))
    line = next(x for x in text.splitlines() if x.startswith("Jobs on this cluster"))
    assert "`exp-a`, `exp-b`" in line and "restarts every one of them" in line
    reaching = [
        c.name for c in preview.changes(digest("dev-image-change")) if preview.reaches_jobs(c)
    ]
    assert reaching and all(f"`{n}`" in line for n in reaching), (reaching, line)


def test_cluster_comment_says_when_no_job_restarts() -> None:
    """A cluster preview without changes restarts none of its jobs, and says so."""
    text = preview.render(digest("dev-no-changes"), "lab-cluster", jobs=("exp-a",))
    assert "Jobs on this cluster: `exp-a`. This change restarts none of them." in text


def test_a_new_secret_reaches_the_jobs_and_a_new_host_does_not() -> None:
    """Of a host added with a new secret, only the secret reaches the jobs (their
    services mount the cluster's secrets); the node, its facts and the single stack's
    own services do not."""
    cs = preview.changes(digest("dev-add-host"))
    assert [c.name for c in cs if preview.reaches_jobs(c)] == ["dev-secrets-hf-token"]


def test_no_jobs_no_line() -> None:
    """A stack with no jobs has no jobs line (the single stacks' comments are as before)."""
    assert "Jobs on this cluster" not in preview.render(digest("dev-image-change"), "dev")


def test_comment_names_a_failed_commands_rank_and_exception_as_code() -> None:
    """A failed training.command: node, rank and exit code in the comment's words, the
    script's exception line as a code span (its backticks and markup kept inert)."""
    step = _run_step(
        state="failed", step=12, checkpoint=None, restarts=0,
        reason="node 1, rank 3 exited 1: ValueError: **bad** `batch`",
    )  # fmt: skip
    text = preview.render({"steps": [step]}, "dev")
    assert (
        "Run `dev`: **failed** at step 12 (node 1, rank 3 exited 1: "
        "`ValueError: **bad** 'batch'`); `pulumi up` relaunches it from its first step." in text
    ), text


def test_comment_cuts_a_long_exception_line() -> None:
    step = _run_step(state="failed", step=0, reason="node 0 exited 1: E: " + "x" * 500)
    line = next(ln for ln in preview.render({"steps": [step]}, "dev").splitlines() if "Run" in ln)
    assert f"`E: {'x' * (preview.EXCEPTION_CHARS - 6)}...`" in line
