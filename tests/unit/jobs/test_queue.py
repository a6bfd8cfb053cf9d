"""jobs.queue and jobs.queuerun: the cluster's queue read from its entries (a fake of
the leader's configs API), `job queue`'s table, `job list`'s rows of queued jobs, and
one pass by hand (`job queue CLUSTER --run`) starting what fits."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult  # the SDK's own result: its error's text

from infra.config import ConfigError, stack_file_values
from infra.layout import LAUNCH_TYPE
from infra.providers.fit import Holder, SwarmGpus
from infra.providers.queue import LABEL, ask_label, list_entries
from jobs import command, leader, queuerun
from jobs import queue as jq
from jobs.record import exported_run
from tests.unit.infra.providers.fakeconfigs import FakeConfigs
from tests.unit.jobs.conftest import provider, spec, three_managers, through
from tests.unit.jobs.test_command import FakeStack, Unreachable, job_state

pytestmark = pytest.mark.unit

ASK: dict[str, Any] = {"nodes": 2, "gpus_per_node": 2, "gpu_model": None, "hosts": []}


def entry(api: FakeConfigs, job: str, since: float, **labels: str) -> None:
    """Job `job`'s entry as its queued form's `up` makes it, with `labels` set."""
    base = {"state": "queued", "priority": "0", "since": f"{since:.3f}", "ask": ask_label(ASK)}
    api.create_config(
        f"dss-queue.{job}", b"{}", labels={LABEL + k: v for k, v in {**base, **labels}.items()}
    )


def test_queue_lines_are_in_order_with_place_state_and_reason() -> None:
    """POS, JOB, PRIO, WAITED, ASK, STATE and the reason (hosts once admitted), in order:
    priority, then first submit."""
    api = FakeConfigs()
    entry(api, "exp-b", 1000.0, state="reserved", position="1",
          reason="needs 2 host(s) with 2 GPU(s); reserved lab-h1, lab-h2")  # fmt: skip
    entry(api, "exp-c", 1100.0, position="2", reason="ahead of it: exp-b")
    entry(api, "exp-d", 1200.0, priority="5", state="admitted", hosts="lab-h3,lab-h4")
    lines = jq.queue_lines(list_entries(api), now=1000.0 + 3725)
    assert lines == [
        "POS JOB                  PRIO  WAITED ASK            STATE     HOSTS OR REASON",
        "  - exp-d                   5     58m 2 x 2          admitted  lab-h3, lab-h4",
        "  1 exp-b                   0   1h02m 2 x 2          reserved  needs 2 host(s) with 2 "
        "GPU(s); reserved lab-h1, lab-h2",
        "  2 exp-c                   0   1h00m 2 x 2          queued    ahead of it: exp-b",
    ]


def test_a_reserved_entry_is_the_next_passes_reservation() -> None:
    """The head's hosts and `before` are read back, so the next pass keeps them."""
    api = FakeConfigs()
    entry(api, "exp-b", 1.0, state="reserved", hosts="lab-h1,lab-h2", before="exp-a")
    res = jq.reservation(list_entries(api))
    assert res is not None and (res.job, res.hosts, res.before) == (
        "exp-b", ("lab-h1", "lab-h2"), frozenset({"exp-a"}))  # fmt: skip


def test_holders_group_a_jobs_tasks() -> None:
    """A job's tasks on several hosts are one holder; a service of no job is its own."""
    swarm = SwarmGpus(
        capacity={"h1": 2, "h2": 2},
        held={
            "h1": [Holder("a-master", "a", 2), Holder("x", None, 1)],
            "h2": [Holder("a-w", "a", 2)],
        },
    )
    got = {(r.job, r.hosts, r.gpus_per_node) for r in jq.holders(swarm)}
    assert got == {("a", ("h1", "h2"), 2), ("x", ("h1",), 1)}


def test_list_shows_a_queued_job_with_its_place_and_reason(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued job's row says its entry's state; its place and reason go under the table."""
    command.write_job(spec(project, extra={"queued": {"revision": ""}}))
    api = FakeConfigs()
    entry(api, "exp1", 1.0, state="reserved", position="1", reason="needs 2 host(s)")
    monkeypatch.setattr(command, "leader_api", lambda _cfg: api)
    rows = command.list_jobs()
    assert [(r.state, r.reason) for r in rows] == [("reserved", "#1 on c1; needs 2 host(s)")]
    assert command.list_lines(rows)[-1] == "exp1 reserved: #1 on c1; needs 2 host(s)"


def _no_stack(name: str, _env: Any = None) -> Any:
    raise auto.StackNotFoundError(CommandResult("", f"no stack named '{name}' found", 255))


def test_list_of_a_queued_job_with_no_entry_and_no_run_says_so(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its entry gone from the leader and no stack in the backend: the row says which
    and what to do; no stack is made to look."""
    command.write_job(spec(project, extra={"queued": {}}))
    monkeypatch.setattr(command, "existing_stack", _no_stack)
    (row,) = command.list_jobs()
    assert row.state == "queued" and "no entry dss-queue.exp1 on the leader" in row.reason
    assert "no run in its stack; submit it again" in row.reason


def test_list_of_a_queued_job_started_from_another_checkout_reads_its_run(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No entry, and a run record in its stack (a pass from another checkout started
    it): the row is that run's state and step, refreshed when asked, and says what
    this checkout can do."""
    command.write_job(spec(project, extra={"queued": {}}))
    stack = FakeStack(job_state({"state": "running", "reason": "", "step": 40}))
    monkeypatch.setattr(command, "existing_stack", lambda _name, _env=None: stack)
    (row,) = command.list_jobs(refresh=True)
    assert (row.state, row.step) == ("running", 40) and stack.calls == ["refresh", "export"]
    assert row.reason.startswith("started by a pass from another checkout; its file here")
    assert "submit it again here to take it over" in row.reason


def test_list_of_a_queued_job_started_elsewhere_whose_refresh_fails_says_why(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started by a pass from another checkout, its manager lost: `list --refresh` lists
    it `unknown`, naming the manager its state goes through, and its run as last read;
    the listing goes on."""
    command.write_job(spec(project, extra={"queued": {}}))
    state = job_state({"state": "running", "reason": "", "step": 40})
    state["resources"].append(provider("exp1", "lab-h1"))
    monkeypatch.setattr(command, "existing_stack", lambda _name, _env=None: Unreachable(state))
    (row,) = command.list_jobs(refresh=True)
    assert (row.state, row.step, row.unread) == ("unknown", 40, True), row
    assert row.reason.startswith(
        "not read now (through manager lab-h1): error: preview failed; error: cannot "
        "connect to ssh://root@10.213.0.11; as last read: running: started by a pass from "
        "another checkout"
    ), row.reason


def test_list_of_a_queued_job_released_elsewhere_reads_its_verdict(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started and released by another checkout's passes: its stack has no launch and
    exports the verdict, which the row shows."""
    command.write_job(spec(project, extra={"queued": {}}))
    verdict = {"state": "finished", "reason": "", "step": 60}
    state = job_state(None, stale=verdict)
    state["resources"] = [r for r in state["resources"] if r["type"] != LAUNCH_TYPE][:1]
    monkeypatch.setattr(command, "existing_stack", lambda _name, _env=None: FakeStack(state))
    (row,) = command.list_jobs()
    assert (row.state, row.step) == ("finished", 60), row


def test_a_stale_run_output_beside_a_launch_is_no_verdict() -> None:
    """A state with a launch but no run record: its stack's `run` output is what an
    old `up` computed, not a released job's verdict."""
    assert exported_run(job_state(None)) is None


class Ran:
    """The engine as `--run` drives it: the stacks it ran `up` on."""

    def __init__(self) -> None:
        self.ups: list[str] = []

    def stack(self, name: str, _env: Any = None) -> Any:
        ran = self

        class Stack:
            def up(self, **_k: Any) -> Any:
                ran.ups.append(name)
                run = {"state": "running", "step": None}
                return types.SimpleNamespace(outputs={"run": types.SimpleNamespace(value=run)})

        return Stack()


@pytest.fixture
def queued(project: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """exp1 queued on c1 (its file and entry), the lock free, the engine faked, and the
    leader reporting `seen["swarm"]` (all free unless a test sets it)."""
    command.write_job(spec(project, extra={"queued": {"revision": ""}}))
    api = FakeConfigs()
    entry(api, "exp1", 1.0, state="reserved", position="1", hosts="lab-h1,lab-h2", before="exp0")
    seen: dict[str, Any] = {"api": api, "ran": Ran()}
    seen["swarm"] = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    monkeypatch.setattr(command, "leader_api", lambda _cfg: api)
    monkeypatch.setattr(command, "read_swarm", lambda _ep, _ssh=None: seen["swarm"])
    monkeypatch.setattr(command, "submit_lock", lambda *_a, **_k: contextlib.nullcontext())
    monkeypatch.setattr(command, "workspace_stack", seen["ran"].stack)
    return seen


def test_run_starts_an_admitted_job_in_its_full_form(project: Path, queued: dict[str, Any]) -> None:
    """GPUs free: the pass admits exp1, its file loses `queued` and gains the hosts,
    planned, and its `up` runs; the entry says admitted."""
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == ["exp1"]
    t = stack_file_values((project / "Pulumi.exp1.yaml").read_text())["training"]
    assert "queued" not in t and (t["hosts"], t["placement"]) == (["lab-h1", "lab-h2"], "planned")
    assert queued["ran"].ups == ["exp1"]
    assert queued["api"].labels("dss-queue.exp1")[LABEL + "state"] == "admitted"
    assert "job exp1: admitted on lab-h1, lab-h2; pulumi up" in lines


def test_run_starts_a_job_through_the_manager_that_answered_the_pass(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's first manager is lost: the pass went through lab-h2, and the job
    it starts goes through lab-h2 too (its file names it), as the line says."""
    three_managers(project)
    monkeypatch.setattr(command, "reached", through("lab-h2"))
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == ["exp1"]
    assert stack_file_values((project / "Pulumi.exp1.yaml").read_text())["manager"] == "lab-h2"
    assert "job exp1: admitted on lab-h1, lab-h2; pulumi up through manager lab-h2" in lines


def test_a_pass_asks_the_manager_it_prefers_and_says_which_it_went_through(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch's pass preferring lab-h2 hands that to `reached`; the pass's result
    names the manager it went through (lab-h2), as the next pass prefers it."""
    three_managers(project)
    asked: list[str | None] = []

    def reached(cfg: Any, *_out: Any, prefer: str | None = None) -> Any:
        asked.append(prefer)
        return cfg.model_copy(update={"manager": "lab-h2"})

    monkeypatch.setattr(command, "reached", reached)
    done = queuerun.queue_pass("c1", out=lambda _line: None, prefer="lab-h2")
    assert (asked, done.manager, done.started) == (["lab-h2"], "lab-h2", ("exp1",))


def test_run_starts_a_job_through_the_first_manager_once_it_answers(
    project: Path, queued: dict[str, Any]
) -> None:
    """A queued job that named lab-h2 (it was submitted while lab-h1 was lost) starts
    through the cluster's first manager when that answers the pass: a queued job holds
    nothing made through the one it named."""
    three_managers(project)
    path = project / "Pulumi.exp1.yaml"
    values = stack_file_values(path.read_text())
    command.write_values("exp1", {**values, "manager": "lab-h2"})
    assert queuerun.run_queue("c1", out=lambda _line: None) == ["exp1"]
    assert "manager" not in stack_file_values(path.read_text())


def test_run_leaves_a_job_that_still_does_not_fit(project: Path, queued: dict[str, Any]) -> None:
    """Its hosts still held: no `up`, the file stays queued, its place is said."""
    queued["swarm"] = SwarmGpus(
        capacity={"lab-h1": 2, "lab-h2": 2}, held={"lab-h1": [Holder("exp0-master", "exp0", 2)]}
    )
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == []
    assert queued["ran"].ups == []
    assert "queued" in stack_file_values((project / "Pulumi.exp1.yaml").read_text())["training"]
    assert lines[-1].startswith("job exp1 reserved: #1 on c1; needs 2 host(s)")


def test_run_refuses_to_start_from_another_revision(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submitted from another revision than this checkout's: named, left waiting."""
    command.write_job(spec(project, extra={"queued": {"revision": "aaaa"}}))
    monkeypatch.setattr(queuerun, "revision", lambda _root: "bbbb")
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == []
    assert queued["ran"].ups == []
    assert "queued" in stack_file_values((project / "Pulumi.exp1.yaml").read_text())["training"]
    assert lines[0] == (
        "job exp1: admitted on lab-h1, lab-h2, but submitted from revision aaaa and this "
        "checkout is at bbbb; it waits; allowed: run the queue from a checkout at aaaa, or "
        "with --any-revision (this checkout's program starts it)"
    ), lines


def test_run_told_any_revision_starts_a_job_from_another_revision(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--any-revision`: the same job starts with this checkout's program, the line
    naming both revisions."""
    command.write_job(spec(project, extra={"queued": {"revision": "aaaa"}}))
    monkeypatch.setattr(queuerun, "revision", lambda _root: "bbbb")
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append, any_revision=True) == ["exp1"]
    assert queued["ran"].ups == ["exp1"]
    t = stack_file_values((project / "Pulumi.exp1.yaml").read_text())["training"]
    assert "queued" not in t and t["hosts"] == ["lab-h1", "lab-h2"], t
    assert (
        "job exp1: admitted on lab-h1, lab-h2 (submitted from revision aaaa, started with "
        "this checkout's program at bbbb: --any-revision); pulumi up"
    ) in lines, lines


def test_a_failed_up_puts_the_queued_file_back(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full form's `up` fails: the file is the queued form again, the error raised."""

    class Failing:
        def up(self, **_k: Any) -> Any:
            raise RuntimeError("the engine failed")

    monkeypatch.setattr(command, "workspace_stack", lambda _name, _env=None: Failing())
    queued_file = (project / "Pulumi.exp1.yaml").read_text()
    with pytest.raises(RuntimeError, match="the engine failed"):
        queuerun.run_queue("c1", out=lambda _l: None)
    assert (project / "Pulumi.exp1.yaml").read_text() == queued_file


def test_run_releases_an_ended_run_and_admits_on_its_gpus(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """exp0 holds the GPUs exp1 waits for and its run has finished: the pass releases
    exp0 first (its `up` in the released form), reads the GPUs again, and starts exp1."""
    command.write_job(dataclasses.replace(spec(project), name="exp0"))
    free = SwarmGpus(capacity={"lab-h1": 2, "lab-h2": 2})
    queued["swarm"] = SwarmGpus(
        capacity={"lab-h1": 2, "lab-h2": 2},
        held={h: [Holder(f"exp0-{h}", "exp0", 2)] for h in ("lab-h1", "lab-h2")},
    )
    finished = {"state": "finished", "reason": "", "step": 100, "restarts": 0}

    class Ended(FakeStack):
        def up(self, **_k: Any) -> Any:
            queued["ran"].ups.append("exp0")
            queued["swarm"] = free  # its services gone

    ended = Ended(job_state(finished))
    stacks = {"exp0": ended}
    monkeypatch.setattr(
        command, "workspace_stack", lambda n, _e=None: stacks.get(n) or queued["ran"].stack(n)
    )
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == ["exp1"]
    assert queued["ran"].ups == ["exp0", "exp1"]
    assert stack_file_values((project / "Pulumi.exp0.yaml").read_text())["training"][
        "released"
    ] == {"state": "finished", "step": 100, "reason": ""}
    assert lines.index("job exp0: released; its GPUs are free") < lines.index(
        "job exp1: admitted on lab-h1, lab-h2; pulumi up"
    )


def test_run_says_a_job_that_could_not_be_released(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose refresh fails: said after the pass, naming it; the pass goes on."""
    command.write_job(dataclasses.replace(spec(project), name="exp0"))
    queued["swarm"] = SwarmGpus(
        capacity={"lab-h1": 2, "lab-h2": 2}, held={"lab-h1": [Holder("exp0-m", "exp0", 2)]}
    )

    class Unreachable(FakeStack):
        def refresh(self, **_k: Any) -> None:
            raise ConfigError(["the cluster's stack is not deployed"])

    stuck = Unreachable(job_state(None))
    stacks = {"exp0": stuck}
    monkeypatch.setattr(
        command, "workspace_stack", lambda n, _e=None: stacks.get(n) or queued["ran"].stack(n)
    )
    lines: list[str] = []
    assert queuerun.run_queue("c1", out=lines.append) == []
    assert "job exp0: not released: the cluster's stack is not deployed" in lines
    assert lines[-1].startswith("job exp1 reserved: #1 on c1")


def test_the_queue_table_says_the_manager_it_was_read_through(
    project: Path, queued: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's first manager lost: the table's entries are read through lab-h2, and
    the line saying so goes to the printer given."""
    three_managers(project)
    line = "cluster c1: through manager lab-h2 (lab-h1 (ssh://x) does not answer: down)"
    monkeypatch.setattr(command, "reached", through("lab-h2", line))
    said: list[str] = []
    assert any("exp1" in row for row in queuerun.queue_table("c1", said.append))
    assert said == [line]


def test_cli_queue_prints_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`job queue c1` prints the entries' table; `--run` makes the pass first (which says
    the manager it went through: the table is read without saying it again)."""
    from jobs import __main__ as cli

    calls: list[str] = []

    def table(cluster: str, out: Any) -> list[str]:
        calls.append(f"table {cluster}{' quiet' if out is leader.quiet else ''}")
        return ["T"]

    def run(cluster: str, any_revision: bool = False) -> list[str]:
        calls.append(f"run {cluster}{' any' if any_revision else ''}")
        return []

    monkeypatch.setattr(queuerun, "queue_table", table)
    monkeypatch.setattr(queuerun, "run_queue", run)
    assert cli.main(["queue", "c1", "--run"]) == 0
    assert calls == ["run c1", "table c1 quiet"] and capsys.readouterr().out == "T\n"
    assert cli.main(["queue", "c1"]) == 0
    assert calls[2:] == ["table c1"] and capsys.readouterr().out == "T\n"
    assert cli.main(["queue", "c1", "--run", "--any-revision"]) == 0
    assert calls[3:] == ["run c1 any", "table c1 quiet"]


def test_cli_queue_watch_runs_the_loop_every_seconds_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`job queue c1 --watch --every 2.5` runs the watch with its seconds; no table."""
    from jobs import __main__ as cli
    from jobs import queuewatch

    calls: list[tuple[str, float, bool]] = []

    def watch(cluster: str, every: float, any_revision: bool) -> None:
        calls.append((cluster, every, any_revision))

    monkeypatch.setattr(queuewatch, "watch", watch)
    assert cli.main(["queue", "c1", "--watch", "--every", "2.5"]) == 0
    assert calls == [("c1", 2.5, False)] and capsys.readouterr().out == ""
    assert cli.main(["queue", "c1", "--watch", "--any-revision"]) == 0
    assert calls[1:] == [("c1", queuewatch.EVERY_S, True)]


def test_cli_queue_every_without_watch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """`--every` alone: a usage error naming the value and what is allowed."""
    from jobs import __main__ as cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["queue", "c1", "--every", "5"])
    assert exit_.value.code == 2
    assert "--every 5 without --watch; allowed: --watch --every SECONDS" in capsys.readouterr().err


def test_cli_any_revision_without_a_pass_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """`--any-revision` with no pass to tell it: a usage error saying what is allowed."""
    from jobs import __main__ as cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["queue", "c1", "--any-revision"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--any-revision without --run or --watch" in err, err
    assert "allowed: --run --any-revision, --watch --any-revision" in err, err
