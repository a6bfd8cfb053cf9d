"""jobs.command: the job's stack file, the list's rows, the log filters."""

from __future__ import annotations

import contextlib
import json
import types
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult

from infra.config import ConfigError, StackConfig, stack_file_values, stack_file_yaml
from infra.layout import DYNAMIC_TYPE, LAUNCH_TYPE, STACK_TYPE
from infra.providers.fit import Holder, SwarmGpus
from infra.providers.hostops import HostError
from infra.providers.queue import list_entries
from jobs import command, repoint
from jobs.record import state_manager
from jobs.table import RELEASED_WORDS
from tests.unit.infra.providers.fakeconfigs import FakeConfigs
from tests.unit.infra.samples import stack_config
from tests.unit.jobs.conftest import Stateless, provider, spec, three_managers, through

pytestmark = pytest.mark.unit

RANK_MAP = [
    {"node": "lab-h1", "address": "10.0.1.2", "ranks": [0, 1]},
    {"node": "lab-h2", "address": "10.0.1.3", "ranks": [2, 3]},
]


BUDGET_SPENT = (
    "restart budget spent after 3 automatic restarts; last step 0; the launcher log says: "
    "train.py: error: unrecognized arguments: --run exp1"
)
RUNNING = {"state": "running", "reason": "", "step": None, "restarts": 0, "relaunches": 0}
FAILED = {"state": "failed", "reason": BUDGET_SPENT, "step": 0, "restarts": 3, "relaunches": 0}


def job_state(run: dict[str, Any] | None, stale: dict[str, Any] | None = None) -> dict[str, Any]:
    """Job stack exp1's state as `pulumi stack export` gives it: the stack with its `run`
    output (`stale`: as the last `up` computed it), the launch, its roster and, unless
    None, its run record with outputs `run` (as the last `up` or refresh read them)."""
    urn = "urn:pulumi:exp1::deepspeed-swarm::"
    stack = f"{urn}{STACK_TYPE}::deepspeed-swarm-exp1"
    launch = f"{urn}{LAUNCH_TYPE}::exp1-launch"
    resources: list[dict[str, Any]] = [
        {"urn": stack, "type": STACK_TYPE, "outputs": {"run": stale or RUNNING}},
        {"urn": launch, "type": LAUNCH_TYPE, "parent": stack},
        {
            "urn": f"{urn}{LAUNCH_TYPE}${DYNAMIC_TYPE}::exp1-launch-roster",
            "type": DYNAMIC_TYPE,
            "parent": launch,
            "outputs": {"expected_tasks": 2, "entries": []},
        },
    ]
    if run is not None:
        resources.append(
            {
                "urn": f"{urn}{LAUNCH_TYPE}${DYNAMIC_TYPE}::exp1-launch-run-state",
                "type": DYNAMIC_TYPE,
                "parent": launch,
                "outputs": {"run_name": "exp1", "stall_after_s": 600, **run},
            }
        )
    return {"manifest": {}, "resources": resources}


class FakeStack:
    """The Automation API stack `list` is given: a refresh, the state's export, and
    outputs that say what the last `up` computed; it records what was asked of it."""

    def __init__(self, deployment: dict[str, Any]) -> None:
        self.deployment = deployment
        self.calls: list[str] = []

    def refresh(self, **_kw: Any) -> None:
        self.calls.append("refresh")

    def export_stack(self) -> auto.Deployment:
        self.calls.append("export")
        return auto.Deployment(version=3, deployment=self.deployment)

    def import_stack(self, state: auto.Deployment) -> None:
        self.calls.append("import")
        self.deployment = dict(state.deployment or {})

    def outputs(self) -> dict[str, auto.OutputValue]:
        self.calls.append("outputs")
        return {"run": auto.OutputValue(RUNNING, False)}


@pytest.fixture
def listed(project: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Job exp1 written on cluster c1; the test sets `listed["stack"]` (its FakeStack)
    and `listed["metrics"]` (its newest metrics line; None: reading it is a failure)."""
    command.write_job(spec(project))
    seen: dict[str, Any] = {"metrics": {}}
    monkeypatch.setattr(command, "workspace_stack", lambda name, env=None: seen["stack"])

    def metrics(cfg: Any) -> dict[str, Any]:
        assert seen["metrics"] is not None, "the hosts were asked for a job with no run"
        return dict(seen["metrics"])

    monkeypatch.setattr(command, "last_metrics", metrics)
    return seen


def test_training_holds_only_what_the_spec_sets(project: Path) -> None:
    """The job's training section: the code dir (absolute outside the project), the
    script and the flags given, nothing of the cluster's defaults."""
    t = spec(project, args=("--lr", "1e-2"), steps=9, extra={"shm_size": "2g"}).training()
    assert t == {
        "code": {"dir": str(project.parent / "code")},
        "script": "train.py",
        "args": ["--lr", "1e-2"],
        "steps": 9,
        "shm_size": "2g",
    }


def test_fork_server_is_written_only_when_asked(project: Path) -> None:
    """`--fork-server` puts training.fork_server in the job's file; without it the
    file has no such key (a job submitted before the flag keeps its file)."""
    assert spec(project, fork_server=True).training()["fork_server"] is True
    assert "fork_server" not in spec(project).training()


def test_write_job_writes_a_job_stack_file(project: Path) -> None:
    """submit's stack file has kind, cluster and training, and lists as a job."""
    path = command.write_job(spec(project, steps=9))
    values = stack_file_values(path.read_text())
    assert values == {
        "kind": "job",
        "cluster": "c1",
        "training": {
            "code": {"dir": str(project.parent / "code")},
            "script": "train.py",
            "steps": 9,
        },
    }
    assert command.job_names() == ["exp1"]


def test_write_job_keeps_the_encryption_salt(project: Path) -> None:
    """Submitting again keeps the salt `stack init` wrote into the file."""
    path = command.write_job(spec(project))
    path.write_text(path.read_text() + "encryptionsalt: v1:abc\n")
    command.write_job(spec(project, steps=5))
    doc = yaml.safe_load(path.read_text())
    assert (
        doc["encryptionsalt"] == "v1:abc"
        and doc["config"]["deepspeed-swarm:training"]["steps"] == 5
    )


def test_a_refused_job_writes_nothing(project: Path) -> None:
    """A job its cluster's config refuses (more GPUs than the hosts have) is not written."""
    with pytest.raises(ConfigError, match=r"training\.gpus_per_node"):
        command.write_job(spec(project, gpus_per_node=64))
    assert not (project / "Pulumi.exp1.yaml").exists()


def test_gpus_column(project: Path) -> None:
    """`list`'s GPU column: nodes x CPU ranks on the CPU lab."""
    command.write_job(spec(project))
    assert command.gpus(command.job_settings("exp1")) == "2 x 1 cpu"


def test_nodes_in_the_file_and_the_gpus_column(project: Path) -> None:
    """`--nodes 1` is written to the job's file, and the list counts one node; more
    nodes than the cluster has are refused before anything is written."""
    path = command.write_job(spec(project, nodes=1, extra={"launch_mode": "no_ssh"}))
    assert stack_file_values(path.read_text())["training"]["nodes"] == 1
    assert command.gpus(command.job_settings("exp1")) == "1 x 1 cpu"
    with pytest.raises(ConfigError, match=r"training\.nodes: job 'exp1' needs 3 host\(s\)"):
        command.write_job(spec(project, nodes=3))


def test_task_address_by_rank_and_node() -> None:
    """A rank or a node names the task whose lines pdsh prefixes with its address."""
    assert command.task_address(RANK_MAP, rank=3) == "10.0.1.3"
    assert command.task_address(RANK_MAP, node="lab-h1") == "10.0.1.2"


def test_unknown_rank_is_refused() -> None:
    """A rank the job does not have is refused, naming what it has."""
    with pytest.raises(ConfigError, match=r"--rank: 7 is not in the job; allowed: nodes "
                       r"lab-h1, lab-h2, ranks 0-3"):  # fmt: skip
        command.task_address(RANK_MAP, rank=7)


def test_logs_command_filters_one_task(project: Path) -> None:
    """The log command tails the job's launcher log on the data dir, filtered to one
    task's prefix when asked."""
    command.write_job(spec(project))
    cfg = command.job_settings("exp1")
    assert command.logs_command(cfg, None, 20, True) == (
        "tail -n 20 -F /var/lib/dss-lab/shared/logs/exp1/launcher.log"
    )
    assert command.logs_command(cfg, "10.0.1.3", 5, False).endswith(
        "| grep --line-buffered -F -- '10.0.1.3: '"
    )


def test_code_dir_in_the_project_is_written_relative(project: Path) -> None:
    """A code dir inside the project is written relative to it (the file is code)."""
    job = command.JobSpec(name="exp1", cluster="c1", code_dir=project / "experiments" / "a")
    assert job.training()["code"] == {"dir": "experiments/a"}


def test_cli_submit_passes_flags_and_script_args(monkeypatch: pytest.MonkeyPatch) -> None:
    """`scripts/job submit` turns its flags into a JobSpec; what follows `--` is the
    script's arguments, `--set` values are JSON."""
    from jobs import __main__ as cli

    seen: list[command.JobSpec] = []
    monkeypatch.setattr(command, "submit", lambda spec: seen.append(spec))
    argv = ["submit", "code", "--name", "a", "--cluster", "c", "--steps", "7", "--nodes", "2",
            "--set", 'shm_size="2g"', "--set", "checkpoint_every=3",
            "--", "--lr", "1e-3"]  # fmt: skip
    assert cli.main(argv) == 0
    (job,) = seen
    assert (job.name, job.cluster, job.steps, job.nodes) == ("a", "c", 7, 2)
    assert tuple(job.args) == ("--lr", "1e-3")
    assert dict(job.extra) == {"shm_size": "2g", "checkpoint_every": 3}
    assert job.fork_server is False
    assert cli.main(["submit", "code", "--name", "a", "--cluster", "c", "--fork-server"]) == 0
    assert seen[-1].fork_server is True


@pytest.mark.parametrize(
    "typed",
    [
        ["deepspeed", "train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"],
        ["torchrun", "train.py", "--epochs", "3"],
        ["python3", "-m", "mypkg.train"],
        ["python", "-m", "torch.distributed.run", "train.py"],
    ],
    ids=["deepspeed", "torchrun", "python-module", "torch-distributed-run"],
)
def test_cli_submit_takes_a_launcher_line_as_the_command(
    monkeypatch: pytest.MonkeyPatch, typed: list[str]
) -> None:
    """After `--`, a line that starts with a launcher or an interpreter is the command
    as typed on one node (training.command), not the script's arguments."""
    from jobs import __main__ as cli

    seen: list[command.JobSpec] = []
    monkeypatch.setattr(command, "submit", lambda spec: seen.append(spec))
    assert cli.main(["submit", "code", "--name", "a", "--cluster", "c", "--", *typed]) == 0
    (job,) = seen
    assert job.command is not None and list(job.command) == typed and not job.args


def test_cli_refuses_a_script_flag_with_a_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--script and a command after `--` both name the script: refused, naming both."""
    from jobs import __main__ as cli

    monkeypatch.setattr(command, "submit", lambda spec: None)
    argv = ["submit", "code", "--name", "a", "--cluster", "c", "--script", "x.py",
            "--", "torchrun", "train.py"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--script x.py" in err and "'torchrun train.py'" in err and "allowed" in err


def test_a_commands_training_has_no_script_or_args(project: Path) -> None:
    """A job with a command writes the command, neither `script` nor `args`."""
    t = spec(project, command=("torchrun", "train.py"), steps=9).training()
    assert t == {
        "code": {"dir": str(project.parent / "code")},
        "command": ["torchrun", "train.py"],
        "steps": 9,
    }


def test_cli_reports_a_refused_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job the config refuses exits 2 with the problems, no traceback."""
    from jobs import __main__ as cli

    def refuse(spec: command.JobSpec) -> None:
        raise ConfigError(["cluster: 'c' has no stack file"])

    monkeypatch.setattr(command, "submit", refuse)
    assert cli.main(["submit", "code", "--name", "a", "--cluster", "c"]) == 2
    assert "cluster: 'c' has no stack file" in capsys.readouterr().err


def test_submit_queues_a_job_whose_gpus_are_held(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another job holding a host's GPUs: submit asks the cluster's leader under the
    lock, writes the job's queued form (no hosts, the revision) and runs its `up`, then
    writes the verdict into its entry and says its place and reason."""
    held = SwarmGpus(
        capacity={"lab-h1": 2, "lab-h2": 2},
        held={"lab-h1": [Holder("exp0-master", "exp0", 2)]},
    )
    asked: list[dict[str, Any]] = []

    def read(ep: dict[str, Any], _ssh: Any = None) -> SwarmGpus:
        asked.append(ep)
        return held

    monkeypatch.setattr(command, "read_swarm", read)
    api = FakeConfigs()
    monkeypatch.setattr(command, "leader_api", lambda _cfg: api)

    class Stack(Stateless):
        def up(self, **_k: Any) -> Any:
            # What the queued form's `up` makes: the job's entry.
            api.create_config("dss-queue.exp1", b"{}", labels={"dss.queue.since": "1"})
            return types.SimpleNamespace(outputs={})

    monkeypatch.setattr(command, "workspace_stack", lambda _name, _env=None: Stack())
    locked: list[str] = []

    @contextlib.contextmanager
    def lock(_ep: dict[str, Any], holder: str, _out: Any, ssh: Any = None) -> Iterator[None]:
        locked.append(holder)
        try:
            yield
        finally:
            locked.append("released")

    monkeypatch.setattr(command, "submit_lock", lock)
    lines: list[str] = []
    command.submit(spec(project), out=lines.append)
    t = stack_file_values((project / "Pulumi.exp1.yaml").read_text())["training"]
    assert "queued" in t and "hosts" not in t, "the queued form, no hosts"
    assert lines[-1] == (
        "job exp1 reserved: #1 on c1; needs 2 host(s) with 2 GPU(s); 1 host(s) free with "
        "2 GPU(s) (lab-h2); reserved lab-h1, lab-h2, held now by exp0"
    )
    labels = api.labels("dss-queue.exp1")
    assert (labels["dss.queue.state"], labels["dss.queue.position"]) == ("reserved", "1")
    assert (labels["dss.queue.hosts"], labels["dss.queue.before"]) == ("lab-h1,lab-h2", "exp0")
    assert asked == [{"url": stack_config("dev")["hosts"][0]["docker_host"]}]
    assert (
        len(locked) == 2 and locked[0].startswith("submit of exp1 by ") and locked[1] == "released"
    )


def test_gpus_free_passes_the_config_on(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Free GPUs on both hosts: the job's config comes back, its hosts checked."""
    free = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: free)
    assert command.gpus_free(spec(project)).job_name == "exp1"


def test_cluster_gpus_names_free_gpus_holders_spares_and_down_hosts(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job gpus`: each host of the cluster in its file's order, its GPU model, free of
    total, who holds the rest; a host Swarm does not have ready shows as down."""
    swarm = SwarmGpus(
        capacity={"lab-h1": 2},
        held={"lab-h1": [Holder("exp0-master", "exp0", 2)]},
    )
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: swarm)
    rows = command.cluster_gpus("c1")
    assert [(r.host, r.free, r.total) for r in rows] == [("lab-h1", 0, 2), ("lab-h2", None, None)]
    line = ["lab-h1", "fake-gpu", "0", "of", "2", "exp0-master,", "job", "exp0:", "2"]
    assert rows[0].line().split() == line
    assert rows[1].line().split() == ["lab-h2", "fake-gpu", "down", "-"]


def test_cluster_gpus_names_each_hosts_model(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosts of two models show each its own; a host whose stack names no model shows `-`."""
    raw = {**stack_config("dev"), "kind": "cluster"}
    raw["hosts"] = [
        {**raw["hosts"][0], "gpus": {"count": 2, "model": "fake-a"}},
        {**raw["hosts"][1], "gpus": {"count": 4}},
    ]
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    (project / "Pulumi.c1.yaml").write_text(text)
    swarm = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 4})
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: swarm)
    rows = command.cluster_gpus("c1")
    assert [(r.host, r.model, r.line().split()[1]) for r in rows] == [
        ("lab-h1", "fake-a", "fake-a"),
        ("lab-h2", "-", "-"),
    ]


def test_a_cluster_of_hosts_with_different_counts_is_read(project: Path) -> None:
    """A cluster whose default ask (2 GPUs on every host) only one host can hold: its
    settings are read all the same (only a job asking for it is refused)."""
    raw = {**stack_config("dev"), "kind": "cluster"}
    raw["hosts"] = [raw["hosts"][0], {**raw["hosts"][1], "gpus": {"count": 1, "model": "b"}}]
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    (project / "Pulumi.c2.yaml").write_text(text)
    cfg = command.cluster_settings("c2")
    assert [(h.name, h.gpus.count) for h in cfg.hosts] == [("lab-h1", 2), ("lab-h2", 1)]
    with pytest.raises(ConfigError, match="job 'exp1' needs 2 host"):
        command.gpus_free(replace(spec(project, nodes=2, gpus_per_node=2), cluster="c2"))


def test_cluster_gpus_marks_spares(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare host is marked, with its GPUs free like any other."""
    raw = {**stack_config("dev"), "kind": "cluster"}
    spare = {**raw["hosts"][1], "name": "lab-h3", "address": "10.213.0.13", "spare": True}
    spare["docker_host"] = "unix:///var/lib/dss-lab/h3/docker.sock"
    raw["hosts"] = [*raw["hosts"], spare]
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    (project / "Pulumi.c1.yaml").write_text(text)
    swarm = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2, "lab-h3": 2})
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: swarm)
    rows = command.cluster_gpus("c1")
    roles = [(r.host, r.role, r.free) for r in rows]
    assert roles == [("lab-h1", "", 2), ("lab-h2", "", 2), ("lab-h3", "spare", 2)]


def test_cluster_gpus_refuses_when_the_leader_does_not_answer(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader that does not answer is a ConfigError naming it, not a traceback."""

    def down(_ep: dict[str, Any], _ssh: Any = None) -> SwarmGpus:
        raise HostError("docker unix:///x: connection refused")

    monkeypatch.setattr(command, "read_swarm", down)
    with pytest.raises(ConfigError, match="the cluster's GPUs could not be read: docker unix"):
        command.cluster_gpus("c1")


def test_cluster_gpus_of_a_missing_cluster_is_refused(project: Path) -> None:
    """A cluster with no stack file: the config's error, naming the cluster."""
    with pytest.raises(ConfigError, match="cluster: 'nope' has no stack file"):
        command.cluster_gpus("nope")


def test_cli_gpus_prints_a_row_per_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scripts/job gpus C` prints the header and one row per host."""
    from jobs import __main__ as cli

    row = command.GpuRow("lab-h1", "", "fake-a", 1, 2, (Holder("exp0-master", "exp0", 1),))
    monkeypatch.setattr(
        command, "cluster_gpus", lambda cluster, _out=None: [row] if cluster == "c" else []
    )
    assert cli.main(["gpus", "c"]) == 0
    assert capsys.readouterr().out.splitlines() == [command.GPU_HEADER, row.line()]


def test_cli_gpus_says_the_manager_it_read_through_on_stderr(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cluster's first manager lost: `job gpus` says on stderr which manager it read
    through (and why), its table on stdout as before."""
    from jobs import __main__ as cli

    three_managers(project)
    line = "cluster c1: through manager lab-h2 (lab-h1 (ssh://x) does not answer: down)"
    monkeypatch.setattr(command, "reached", through("lab-h2", line))
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: SwarmGpus({"lab-h1": 2}))
    assert cli.main(["gpus", "c1"]) == 0
    said = capsys.readouterr()
    assert said.err.splitlines() == [line]
    assert said.out.splitlines()[0] == command.GPU_HEADER


def test_refreshed_failed_run_lists_failed_with_its_reason(listed: dict[str, Any]) -> None:
    """`list --refresh`: the refresh recorded the run failed (its budget spent) while the
    stack's `run` output still says running (only `up` computes outputs); the row reads
    the record: failed, with its reason."""
    listed["stack"] = stack = FakeStack(job_state(FAILED, stale=RUNNING))
    (row,) = command.list_jobs(refresh=True)
    assert (row.name, row.state, row.reason) == ("exp1", "failed", BUDGET_SPENT), row
    assert stack.calls == ["refresh", "export"], stack.calls


def test_refreshed_running_run_lists_running(listed: dict[str, Any]) -> None:
    """A run its refresh read running lists running, no reason, with the step and loss
    of its newest metrics line."""
    listed["stack"] = FakeStack(job_state(RUNNING))
    listed["metrics"] = {"step": 42, "loss": 2.5}
    (row,) = command.list_jobs(refresh=True)
    assert (row.state, row.reason, row.step, row.loss) == ("running", "", 42, 2.5), row


class Unreachable(FakeStack):
    """A job stack whose refresh fails as the engine's does when its manager is lost."""

    def refresh(self, **_kw: Any) -> None:
        self.calls.append("refresh")
        stderr = "error: preview failed\nerror: cannot connect to ssh://root@10.213.0.11\n"
        raise auto.CommandError(CommandResult("Refreshing (exp1)\n", stderr, 255))


def test_a_job_whose_refresh_fails_lists_unknown_naming_its_manager(
    listed: dict[str, Any],
) -> None:
    """`list --refresh` of a job whose manager is lost: its row says `unknown`, the
    manager its state goes through, the engine's words and the run as last read; it
    does not fail the listing."""
    state = job_state(RUNNING)
    state["resources"].append(provider("exp1", "lab-h1"))
    listed["stack"] = stack = Unreachable(state)
    (row,) = command.list_jobs(refresh=True)
    assert (row.state, row.unread) == ("unknown", True), row
    assert row.reason == (
        "not read now (through manager lab-h1): error: preview failed; error: cannot "
        "connect to ssh://root@10.213.0.11; as last read: running"
    )
    assert stack.calls == ["refresh", "export"], stack.calls


def test_list_refresh_prints_every_row_and_fails_when_one_is_not_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scripts/job list --refresh` with a job not read now: every row and reason on
    stdout, the jobs not read named on stderr, exit status 1."""
    from jobs import __main__ as cli

    rows = [
        command.JobRow("exp1", "c1", "unknown", 3, None, "2 x 1 cpu", "not read now", True),
        command.JobRow("exp2", "c1", "running", 42, 2.5, "2 x 1 cpu"),
    ]
    monkeypatch.setattr(command, "list_jobs", lambda refresh: rows)
    assert cli.main(["list", "--refresh"]) == 1
    said = capsys.readouterr()
    assert said.out.splitlines() == [
        command.HEADER, rows[0].line(), rows[1].line(), "", "exp1 unknown: not read now"
    ]  # fmt: skip
    assert said.err == "job list --refresh: not read now: exp1 (the reasons above)\n"


def test_list_without_refresh_reads_the_record_as_it_is(listed: dict[str, Any]) -> None:
    """Without `--refresh` nothing is refreshed, and the run record is read as the last
    `up` or refresh left it: a `pulumi refresh` typed by hand that found the run failed
    shows, though the `run` output still says running."""
    listed["stack"] = stack = FakeStack(job_state(FAILED, stale=RUNNING))
    (row,) = command.list_jobs()
    assert (row.state, row.reason) == ("failed", BUDGET_SPENT), row
    assert stack.calls == ["export"], stack.calls


def test_job_with_no_run_record_lists_stopped(listed: dict[str, Any]) -> None:
    """A job never up (its stack's state has no resources), or one stopped, lists
    `stopped` with no step, loss or reason, and its hosts are not asked."""
    listed["stack"] = FakeStack({"manifest": {}})
    listed["metrics"] = None
    (row,) = command.list_jobs(refresh=True)
    assert (row.state, row.step, row.loss, row.reason) == ("stopped", None, None, ""), row


def test_run_record_takes_the_secret_wrapper_off() -> None:
    """A record value the state holds as a secret (the export's `--show-secrets` form)
    is read as its plain value."""
    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
              "plaintext": '"failed"'}  # fmt: skip
    record = command.run_record(job_state({**FAILED, "state": secret}))
    assert record is not None and record["state"] == "failed", record


def test_a_replaced_run_record_pending_deletion_is_not_read() -> None:
    """A copy of the record the engine has yet to delete (`delete: true` in the state)
    is not the run's: the live record is read, wherever it stands."""
    state = job_state(RUNNING)
    old = {**state["resources"][-1], "delete": True}
    old["outputs"] = {**old["outputs"], **FAILED}
    state["resources"].append(old)
    record = command.run_record(state)
    assert record is not None and record["state"] == "running", record


def test_list_prints_each_reason_in_full_under_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scripts/job list`: the table keeps its six columns; a run with a reason gets
    `<job> <state>: <reason>` in full below it, after a blank line."""
    from jobs import __main__ as cli

    rows = [
        command.JobRow("exp1", "c1", "failed", 0, None, "2 x 1 cpu", BUDGET_SPENT),
        command.JobRow("exp2", "c1", "running", 42, 2.5, "2 x 1 cpu"),
    ]
    monkeypatch.setattr(command, "list_jobs", lambda refresh: rows)
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        command.HEADER, rows[0].line(), rows[1].line(), "", f"exp1 failed: {BUDGET_SPENT}"
    ]  # fmt: skip
    assert command.HEADER.split() == ["JOB", "CLUSTER", "STATE", "STEP", "LOSS", "GPUS"]


def test_refreshed_failed_command_lists_its_node_rank_code_and_exception(
    listed: dict[str, Any],
) -> None:
    """A training.command that raised: the refresh's record names node, rank, exit code
    and the exception's line, and `job list` prints it under the table."""
    from infra.render.run import Probe, verdict

    raised = {"rc": 1, "rank": 3, "exception": "ValueError: bad batch"}
    probe = Probe(now=9, supervisor=False, procs=0, age_s=0, last_step=0, last_step_time=0.0,
                  restarts=0, budget_spent=False, error="", checkpoint="",
                  exits={"1": raised})  # fmt: skip
    record = {**RUNNING, **verdict(probe, [], 100, 0, ["1"]).outputs()}
    listed["stack"] = FakeStack(job_state(record, stale=RUNNING))
    (row,) = command.list_jobs(refresh=True)
    assert command.list_lines([row])[-1] == (
        "exp1 failed: node 1, rank 3 exited 1: ValueError: bad batch"
    )


def test_list_with_no_reason_is_the_table_alone() -> None:
    """Running and finished runs have no reason: nothing follows the table."""
    row = command.JobRow("exp2", "c1", "finished", 100, 1.5, "2 x 1 cpu")
    assert command.list_lines([row]) == [command.HEADER, row.line()]


def test_the_leaders_ssh_settings_come_from_the_stack_file() -> None:
    from infra.config import parse_stack_config
    from tests.unit.infra.samples import small_config

    cfg = parse_stack_config(small_config())
    assert command.leader_ssh(cfg) == cfg.ssh_for(cfg.leader).props()


def _submitted(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    swarm: SwarmGpus,
    state: FakeStack | None = None,
    **kw: Any,
) -> Any:
    """submit `spec(project, **kw)` against a leader reporting `swarm`, with no engine
    (an `up` that returns no outputs; the job's state `state`, else none) and a lock that
    is always free; the stack file."""
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: swarm)

    class Stack(Stateless):
        def export_stack(self) -> Any:
            return state.export_stack() if state is not None else super().export_stack()

        def import_stack(self, deployment: auto.Deployment) -> None:
            assert state is not None, "a job with no state was moved"
            state.import_stack(deployment)

        def up(self, **_k: Any) -> Any:
            return types.SimpleNamespace(outputs={})

    def selected(name: str, _env: Any = None) -> Stack:
        # As the engine selects a stack with no file here: it writes one holding only
        # the encryption salt.
        path = project / f"Pulumi.{name}.yaml"
        if not path.exists():
            path.write_text("encryptionsalt: v1:c2FsdA==:v1:bm9uY2U=:Y2lwaGVy\n")
        return Stack()

    monkeypatch.setattr(command, "workspace_stack", selected)
    monkeypatch.setattr(command, "submit_lock", lambda *_a, **_k: contextlib.nullcontext())
    command.submit(spec(project, **kw), out=lambda _line: None)
    return stack_file_values((project / "Pulumi.exp1.yaml").read_text())["training"]


def test_submit_writes_the_planned_hosts(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no hosts given, submit plans them from the GPUs free and writes them, planned."""
    held = SwarmGpus(
        capacity={"lab-h1": 2, "lab-h2": 2}, held={"lab-h1": [Holder("exp0-master", "exp0", 2)]}
    )
    t = _submitted(project, monkeypatch, held, nodes=1, extra={"launch_mode": "no_ssh"})
    assert (t["hosts"], t["placement"]) == (["lab-h2"], "planned")


def test_submit_writes_named_hosts(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--hosts` is written as given, named, master first."""
    free = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    t = _submitted(project, monkeypatch, free, hosts=["lab-h2", "lab-h1"])
    assert (t["hosts"], t["placement"]) == (["lab-h2", "lab-h1"], "named")


def test_submit_goes_through_the_manager_that_answers(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's first manager is lost: the job's file names the manager that
    answered, and its `up` goes through it."""
    three_managers(project)
    monkeypatch.setattr(command, "reached", through("lab-h2"))
    _submitted(project, monkeypatch, SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2}),
               hosts=["lab-h1", "lab-h2"])  # fmt: skip
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h2"
    assert command.job_settings("exp1").leader.name == "lab-h2"


def test_a_running_job_keeps_its_way_in(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose services hold GPUs keeps the manager its file names, though another
    answered this submit: its services, roster and launch were made through it."""
    three_managers(project)
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"], manager="lab-h2"))
    monkeypatch.setattr(command, "reached", through("lab-h3"))
    held = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2},
                     held={"lab-h1": [Holder("exp1-master", "exp1", 2)],
                           "lab-h2": [Holder("exp1-worker", "exp1", 2)]})  # fmt: skip
    _submitted(project, monkeypatch, held, hosts=["lab-h1", "lab-h2"])
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h2"


def test_a_running_job_whose_manager_is_lost_moves_to_the_one_that_answers(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job holding GPUs whose file and state name lab-h2, which does not answer: this
    submit (through lab-h3) moves its state to lab-h3 first (jobs/repoint.py), and its
    file names lab-h3, so its `up` makes the provider its state now holds."""
    three_managers(project)
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"], manager="lab-h2"))
    monkeypatch.setattr(command, "reached", through("lab-h3"))
    monkeypatch.setattr(
        repoint, "answers", lambda _c, h: "timed out" if h.name == "lab-h2" else None
    )
    state = FakeStack({"resources": [provider("exp1", "lab-h2")]})
    held = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2},
                     held={"lab-h1": [Holder("exp1-master", "exp1", 2)],
                           "lab-h2": [Holder("exp1-worker", "exp1", 2)]})  # fmt: skip
    _submitted(project, monkeypatch, held, state, hosts=["lab-h1", "lab-h2"])
    assert state.calls == ["export", "import"]
    assert state_manager(state.deployment, "exp1") == "lab-h3"
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h3"


def test_a_stopped_job_takes_the_manager_that_answers(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU job whose file names lab-h3 but whose services hold no GPU (stopped: none
    of its resources is left) goes through the manager this submit reached."""
    three_managers(project)
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"], manager="lab-h3"))
    monkeypatch.setattr(command, "reached", through("lab-h2"))
    _submitted(project, monkeypatch, SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2}),
               hosts=["lab-h1", "lab-h2"])  # fmt: skip
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h2"


def test_cli_submit_passes_named_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--hosts a,b` reaches the spec as a list, master first."""
    from jobs import __main__ as cli

    seen: list[command.JobSpec] = []
    monkeypatch.setattr(command, "submit", lambda spec: seen.append(spec))
    argv = ["submit", "code", "--name", "j", "--cluster", "c", "--hosts", "lab-h2,lab-h1"]
    assert cli.main(argv) == 0
    assert seen[0].hosts == ["lab-h2", "lab-h1"]


def test_list_reads_a_released_job_from_its_file_alone(
    project: Path, listed: dict[str, Any]
) -> None:
    """A released job's row is the verdict its file keeps: state, step and reason, no
    loss; neither its stack nor its hosts are asked (`listed` has no stack to give)."""
    released = {"state": "failed", "step": 40, "reason": "no training process is left"}
    command.write_job(spec(project, extra={"released": released}))
    listed["metrics"] = None
    (row,) = command.list_jobs(refresh=True)
    assert (row.state, row.step, row.loss) == ("failed", 40, None), row
    assert row.reason == f"no training process is left; {RELEASED_WORDS}"


def test_submit_of_a_released_job_writes_its_full_form(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A released job submitted again: its file loses `released` and is planned afresh
    (its hosts were planned), so its `up` makes the full form and the run resumes."""
    released = {"state": "finished", "step": 100}
    command.write_job(spec(project, hosts=["lab-h1", "lab-h2"], placement="planned",
                           extra={"released": released}))  # fmt: skip
    free = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    t = _submitted(project, monkeypatch, free, nodes=1, extra={"launch_mode": "no_ssh"})
    assert "released" not in t and (t["hosts"], t["placement"]) == (["lab-h1"], "planned")


def test_submit_of_a_job_started_from_another_checkout_is_refused(project: Path) -> None:
    """Its file here still queued, its entry gone and its services holding GPUs (a pass
    from another checkout started it): planned afresh it could move and restart, so it
    is refused, naming the job and what is allowed, and the file is left as it was."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    before = (project / "Pulumi.exp1.yaml").read_text()
    swarm = SwarmGpus(capacity={"lab-h1": 2}, held={"lab-h1": [Holder("exp1-master", "exp1", 2)]})
    cluster = command.cluster_settings("c1")
    with pytest.raises(ConfigError, match="a pass from another checkout started it") as why:
        command.placed(spec(project), cluster, swarm, [])
    assert "`scripts/job stop exp1` and submit it again" in str(why.value)
    assert (project / "Pulumi.exp1.yaml").read_text() == before


def started_state(hosts: list[str], manager: str) -> dict[str, Any]:
    """Job exp1's state as a pass from another checkout left it: its run, its GPU check
    on `hosts` and its cluster reference's provider to `manager`."""
    state = job_state(RUNNING)
    urn = "urn:pulumi:exp1::deepspeed-swarm::"
    state["resources"] += [
        {"urn": f"{urn}deepspeed-swarm:services:TrainingServices$pulumi-python:dynamic:Resource"
                "::exp1-train-fit",
         "type": DYNAMIC_TYPE, "inputs": {"job": "exp1", "hosts": hosts, "gpus": 2}},
        {"urn": f"{urn}deepspeed-swarm:clusterref:ClusterRef$pulumi:providers:docker"
                f"::exp1-cluster-docker-{manager}", "type": "pulumi:providers:docker"},
    ]  # fmt: skip
    return state


def test_submit_takes_over_a_job_started_from_another_checkout(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its file here still queued, its entry gone and its services holding GPUs: the
    submit writes its full form on the hosts (master first) and through the manager its
    state names, then keeps both, so the job is not moved."""
    three_managers(project)
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    state = started_state(["lab-h2", "lab-h1"], "lab-h3")
    monkeypatch.setattr(command, "existing_stack", lambda _n, _env=None: FakeStack(state))
    held = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2},
                     held={"lab-h2": [Holder("exp1-master", "exp1", 2)],
                           "lab-h1": [Holder("exp1-worker", "exp1", 2)]})  # fmt: skip
    t = _submitted(project, monkeypatch, held)
    assert "queued" not in t and (t["hosts"], t["placement"]) == (["lab-h2", "lab-h1"], "planned")
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h3"


@pytest.fixture
def masters_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The master host each SSH command of the job command is run on (none is run)."""
    asked: list[str] = []

    def on_master(cfg: StackConfig, _script: str) -> Any:
        asked.append(cfg.master.name)
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(command, "on_master", on_master)
    return asked


def test_logs_of_a_job_started_from_another_checkout_are_read_where_it_runs(
    project: Path, monkeypatch: pytest.MonkeyPatch, masters_asked: list[str]
) -> None:
    """Its file here still queued (no hosts: the cluster's first would be asked): the
    log is read on the master its state names, and the file is left as it is."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    before = (project / "Pulumi.exp1.yaml").read_text()
    state = started_state(["lab-h2", "lab-h1"], "lab-h1")
    monkeypatch.setattr(command, "existing_stack", lambda _n, _env=None: FakeStack(state))
    assert command.logs("exp1") == 0
    assert masters_asked == ["lab-h2"]
    assert (project / "Pulumi.exp1.yaml").read_text() == before


def test_logs_of_a_waiting_job_are_asked_of_its_files_master(
    project: Path, monkeypatch: pytest.MonkeyPatch, masters_asked: list[str]
) -> None:
    """Queued and not started (its state names no hosts): its file's master, as before."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    state = job_state(RUNNING)
    monkeypatch.setattr(command, "existing_stack", lambda _n, _env=None: FakeStack(state))
    assert command.logs("exp1") == 0
    assert masters_asked == [command.job_settings("exp1").master.name]


def test_no_take_over_where_the_state_names_no_hosts(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state without its GPU check: nothing written, and `placed` refuses it."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    before = (project / "Pulumi.exp1.yaml").read_text()
    state = job_state(RUNNING)
    monkeypatch.setattr(command, "existing_stack", lambda _n, _env=None: FakeStack(state))
    swarm = SwarmGpus(capacity={"lab-h1": 2}, held={"lab-h1": [Holder("exp1-master", "exp1", 2)]})
    assert not command.adopt("exp1", swarm, (), out=lambda _l: None)
    assert (project / "Pulumi.exp1.yaml").read_text() == before


def test_a_queued_job_with_its_entry_is_not_taken_over(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its entry still in the queue (tasks left by a failed start): no state is read."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    monkeypatch.setattr(command, "existing_stack", lambda *_a: pytest.fail("state read"))
    swarm = SwarmGpus(capacity={"lab-h1": 2}, held={"lab-h1": [Holder("exp1-master", "exp1", 2)]})
    assert not command.adopt("exp1", swarm, {"exp1"}, out=lambda _l: None)


def test_submit_of_a_queued_job_whose_start_failed_is_not_refused(project: Path) -> None:
    """Its entry still in the queue (tasks of it left by a failed start): not refused,
    its hosts decided as any job's whose tasks hold GPUs (jobs/placement.py)."""
    command.write_job(spec(project, extra={"queued": {"revision": "r1"}}))
    swarm = SwarmGpus(capacity={"lab-h1": 2}, held={"lab-h1": [Holder("exp1-master", "exp1", 2)]})
    api = FakeConfigs()
    api.create_config("dss-queue.exp1", b"{}", labels={})
    placed, adm = command.placed(spec(project), command.cluster_settings("c1"), swarm,
                                 list_entries(api))  # fmt: skip
    assert (placed.hosts, adm) == (None, None), "decided as any job holding GPUs"


ZERO_COMMAND = ["deepspeed", "train.py", "--deepspeed_config", "ds_config.json"]


def zero_config(project: Path) -> None:
    """The code dir's ds_config.json: ZeRO stage 2, no universal loading."""
    (project.parent / "code" / "ds_config.json").write_text(
        json.dumps({"train_batch_size": 4, "zero_optimization": {"stage": 2}})
    )


def test_a_submit_at_a_world_size_its_checkpoints_cannot_follow_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exp1 ran 2 x 1 with ZeRO checkpoints; submitted again 1 x 1 it is refused naming
    the job and the key (its script would fail to load them), its file as it was."""
    zero_config(project)
    ran: dict[str, Any] = {
        "hosts": ["lab-h1", "lab-h2"],
        "gpus_per_node": 1,
        "command": ZERO_COMMAND,
        "extra": {"launch_mode": "no_ssh"},
    }
    command.write_job(spec(project, nodes=2, **ran))
    before = (project / "Pulumi.exp1.yaml").read_text()
    free = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    with pytest.raises(ConfigError) as e:
        _submitted(project, monkeypatch, free, **{**ran, "hosts": ["lab-h1"], "nodes": 1})
    ((problem),) = e.value.problems
    assert problem.startswith("job 'exp1': ") and "zero_optimization.stage: 2" in problem
    assert (project / "Pulumi.exp1.yaml").read_text() == before


def test_a_queued_job_takes_any_world_size(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that only waited (queued here) has no checkpoint: submitted again at
    another size it is written as asked."""
    zero_config(project)
    queued: dict[str, Any] = {"gpus_per_node": 1, "command": ZERO_COMMAND}
    mark = {"launch_mode": "no_ssh", "queued": {"revision": "abc"}}
    command.write_job(spec(project, nodes=2, extra=mark, **queued))
    free = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    t = _submitted(project, monkeypatch, free, nodes=1, hosts=["lab-h1"],
                   extra={"launch_mode": "no_ssh"}, **queued)  # fmt: skip
    assert (t["nodes"], t["hosts"]) == (1, ["lab-h1"])
