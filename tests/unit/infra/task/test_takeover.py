"""infra.task.takeover: a master task that started again takes the run over only when
the run is its to keep, puts its own address first, and a supervisor that lost the run
stops. Files are real (under tmp); SSH, the supervisor and the clock are passed in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from infra.task import commandranks, follow, ranks, takeover

pytestmark = pytest.mark.unit

ME, OLD = "task-new", "task-old"
SPEC = "0123456789abcdef"


def settings(tmp: Path, active: str | None = f"{OLD} {SPEC} 0", **kw: Any) -> dict[str, Any]:
    """The settings file's keys with follow_master, the run's files under `tmp`."""
    (tmp / "hostfile").write_text("10.0.0.1 slots=2\n10.0.0.2 slots=2\n10.0.0.3 slots=2\n")
    if active is not None:
        (tmp / "active").write_text(active + "\n")
    base = {
        "hostfile": str(tmp / "hostfile"), "port": 2222, "events": str(tmp / "restarts.jsonl"),
        "wait_s": 0, "interval_s": 0, "misses": 2, "names": [], "addresses": [],
        "master_names": ["tasks.ds-master"], "active": str(tmp / "active"),
        "lease": str(tmp / "lease"), "lease_s": 30, "pattern": "/opt/dss/train.py",
        "max_takeovers": 2, "stop": str(tmp / "stop"), "supervisor": str(tmp / "supervise.sh"),
    }  # fmt: skip
    return {**base, **kw}


def events(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "restarts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class Calls:
    """What a takeover did: the addresses it killed ranks at, the commands it ran."""

    def __init__(self) -> None:
        self.killed: list[str] = []
        self.ran: list[list[str]] = []

    def kill(self, _settings: dict[str, Any], addresses: Iterable[str]) -> None:
        self.killed += list(addresses)

    def run(self, argv: list[str]) -> int:
        self.ran.append(argv)
        return 0


def take(cfg: dict[str, Any], calls: Calls, age: float = 60.0, spec: str = SPEC) -> int:
    return takeover.takeover(
        cfg, task=lambda: ME, spec=lambda: spec, age=lambda _p: age, kill=calls.kill, run=calls.run
    )


def test_a_lapsed_lease_of_the_same_spec_is_taken_over(tmp_path: Path) -> None:
    """The active file names another task of this spec and its lease lapsed: this task
    writes itself in (one takeover more), records it, kills the ranks left on the
    workers (not on the lost master) and runs the supervisor."""
    cfg, calls = settings(tmp_path), Calls()
    assert take(cfg, calls) == 0
    assert (tmp_path / "active").read_text() == f"{ME} {SPEC} 1\n"
    assert (tmp_path / "lease").exists()
    assert [(e["event"], e["takeover"], e["task"]) for e in events(tmp_path)] == [
        ("restart", 1, ME)
    ]
    assert calls.killed == ["10.0.0.2", "10.0.0.3"]
    assert calls.ran == [["sh", cfg["supervisor"]]]


@pytest.mark.parametrize(
    ("active", "why"),
    [(None, "no run (never launched, ended by itself, or stopped)"),
     (f"{ME} {SPEC} 0", "this task runs the run already"),
     (f"{OLD} fedcba9876543210 0", "an update made this task: another spec")],
)  # fmt: skip
def test_nothing_is_taken_over_that_is_not_this_tasks_to_keep(
    tmp_path: Path, active: str | None, why: str
) -> None:
    """No run, this task's own run, or another spec (an update): nothing happens."""
    cfg, calls = settings(tmp_path, active), Calls()
    assert take(cfg, calls) == 0, why
    assert calls.ran == [] and calls.killed == [] and events(tmp_path) == [], why


def test_a_live_lease_is_not_taken_over(tmp_path: Path) -> None:
    """The old supervisor touched the lease less than lease_s ago: it still runs the run."""
    cfg, calls = settings(tmp_path), Calls()
    assert take(cfg, calls, age=10.0) == 0
    assert calls.ran == [] and (tmp_path / "active").read_text() == f"{OLD} {SPEC} 0\n"


def test_a_stop_is_not_taken_over(tmp_path: Path) -> None:
    """With the stop marker set (a destroy, a relaunch under way) nothing is taken over."""
    cfg, calls = settings(tmp_path), Calls()
    (tmp_path / "stop").touch()
    assert take(cfg, calls) == 0 and calls.ran == []


def test_a_spent_budget_is_recorded_once_and_the_run_left_failed(tmp_path: Path) -> None:
    """After max_takeovers the run is not taken over: the spent budget is recorded and
    the active file removed, so the next look does nothing (refresh reports the run)."""
    cfg, calls = settings(tmp_path, f"{OLD} {SPEC} 2"), Calls()
    assert take(cfg, calls) == 1
    assert [e["event"] for e in events(tmp_path)] == ["budget_spent"]
    assert not (tmp_path / "active").exists()
    assert take(cfg, calls) == 0 and len(events(tmp_path)) == 1 and calls.ran == []


def test_a_task_without_its_templates_takes_nothing_over(tmp_path: Path) -> None:
    """A task without DSS_TASK_ID/DSS_SPEC (not the master's spec) never takes over."""
    cfg, calls = settings(tmp_path), Calls()
    assert take(cfg, calls, spec="") == 0 and calls.ran == []


def test_the_lease_age_of_a_missing_lease_is_infinite(tmp_path: Path) -> None:
    """No lease file: it lapsed long ago (a supervisor that never touched one)."""
    assert takeover.lease_age(str(tmp_path / "none")) == float("inf")
    (tmp_path / "lease").touch()
    assert takeover.lease_age(str(tmp_path / "lease"), now=lambda: time.time() + 5) >= 4


def test_rebuild_puts_this_tasks_address_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master's line becomes this task's own address (the rest kept in place), the
    move is recorded, then follow.py's rebuild runs."""
    monkeypatch.setenv("DSS_TASK_ID", ME)
    cfg = settings(tmp_path, f"{ME} {SPEC} 1")
    seen: list[list[str]] = []

    def then(c: dict[str, Any]) -> int:
        seen.append([a for a, _ in follow.read_hostfile(c["hostfile"])])
        return 0

    rc = takeover.rebuild(
        cfg,
        lookup=lambda name: ["10.0.0.9"] if name == "tasks.ds-master" else [],
        local=lambda a: a == "10.0.0.9",
        then=then,
    )
    assert rc == 0
    assert seen == [["10.0.0.9", "10.0.0.2", "10.0.0.3"]]
    assert (tmp_path / "hostfile").read_text().startswith("10.0.0.9 slots=2\n")
    assert events(tmp_path) == [
        {
            "event": "hostfile",
            "moved": {"10.0.0.1": "10.0.0.9"},
            "time": events(tmp_path)[0]["time"],
        }
    ]


def test_rebuild_of_a_run_another_task_owns_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once another task took the run over, this supervisor's rebuild leaves the file."""
    monkeypatch.setenv("DSS_TASK_ID", ME)
    cfg = settings(tmp_path, f"{OLD} {SPEC} 1")
    before = (tmp_path / "hostfile").read_text()
    rc = takeover.rebuild(cfg, lookup=lambda _n: ["10.0.0.9"], local=lambda a: a == "10.0.0.9",
                          then=lambda _c: 0)  # fmt: skip
    assert rc == 1 and (tmp_path / "hostfile").read_text() == before


def test_watch_touches_the_lease_while_every_address_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each round in which every address answers renews the lease; one with a miss does not."""
    monkeypatch.setenv("DSS_TASK_ID", ME)
    cfg = settings(tmp_path, f"{ME} {SPEC} 0", misses=5)
    rounds: list[bool] = []
    answers = iter([True] * 3 + [True, False, True] + [True] * 3)

    def pause(_s: float) -> None:
        rounds.append(os.path.exists(cfg["lease"]))
        Path(cfg["lease"]).unlink(missing_ok=True)

    proc = subprocess.Popen(["sleep", "30"])
    try:
        alive = iter([True, True, True])
        monkeypatch.setattr(follow, "running", lambda _p: next(alive, False))
        rc = takeover.watch(cfg, proc.pid, knock=lambda _a, _p: next(answers), pause=pause)
    finally:
        proc.kill()
        proc.wait()
    assert rc == 0
    assert rounds == [True, False, True]


def test_watch_stops_the_launcher_once_another_task_owns_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The active file names another task: the watch kills the training processes here
    and exits 3 (the supervisor then ends without a restart)."""
    monkeypatch.setenv("DSS_TASK_ID", ME)
    cfg = settings(tmp_path, f"{OLD} {SPEC} 1")
    stopped: list[str] = []
    monkeypatch.setattr(follow, "running", lambda _p: True)
    rc = takeover.watch(cfg, 12345, knock=lambda _a, _p: True, pause=lambda _s: None,
                        stop=stopped.append)  # fmt: skip
    assert rc == follow.WATCH_GONE and stopped == [cfg["pattern"]]


def test_is_local_tells_this_hosts_addresses() -> None:
    """An address this machine has is local; a documentation address is not."""
    assert takeover.is_local("127.0.0.1")
    assert not takeover.is_local("192.0.2.1")


def test_runs_as_a_script_beside_follow_py(tmp_path: Path) -> None:
    """In the task it runs as `python3 takeover.py` with follow.py and ranks.py beside
    it (no package): a takeover with no run to keep exits 0 and says nothing."""
    task = Path(takeover.__file__).parent
    for name in ("follow.py", "ranks.py", "takeover.py"):
        (tmp_path / name).write_text((task / name).read_text())
    cfg = settings(tmp_path, None)
    (tmp_path / "follow.json").write_text(json.dumps(cfg))
    env = {**os.environ, "DSS_TASK_ID": ME, "DSS_SPEC": SPEC}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "takeover.py"), "takeover", str(tmp_path / "follow.json")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    bad = subprocess.run([sys.executable, str(tmp_path / "takeover.py")], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=30)  # fmt: skip
    assert bad.returncode == 2 and "usage" in bad.stdout


def term(sent: list[tuple[str, str]], pattern: str) -> int:
    """A stand-in for ranks.signal_ranks: noted in `sent`, one rank signalled."""
    sent.append((pattern, "TERM ranks"))
    return 1


def test_watch_stops_the_training_gracefully_on_a_stop_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop from another host (the marker): SIGTERM to the ranks once, nothing to
    the launchers while a rank is left, SIGKILL after the grace if it is still
    running, and the watch ends."""
    monkeypatch.setenv("DSS_TASK_ID", ME)
    cfg = settings(tmp_path, f"{ME} {SPEC} 1", stop_grace_s=10, misses=99)
    (tmp_path / "stop").touch()
    now = iter([0.0, 5.0, 9.0, 11.0])
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(follow, "running", lambda _p: True)
    rc = takeover.watch(cfg, 12345, knock=lambda _a, _p: True, pause=lambda _s: None,
                        stop=lambda p: sent.append((p, "KILL")),
                        signal=lambda p, sig: sent.append((p, sig)),
                        term_ranks=lambda s: term(sent, s["pattern"]),
                        find_ranks=lambda _s: [7], clock=lambda: next(now))  # fmt: skip
    assert rc == 0
    assert sent == [(cfg["pattern"], "TERM ranks"), (cfg["pattern"], "KILL")]


def test_watch_signals_the_launchers_once_the_ranks_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a stop marker, a launcher still there `LAUNCHERS_AFTER_S` after the last rank
    ended is sent SIGTERM once; the watch ends when it exits."""
    monkeypatch.setenv("DSS_TASK_ID", ME)
    cfg = settings(tmp_path, f"{ME} {SPEC} 1", stop_grace_s=60, misses=99)
    (tmp_path / "stop").touch()
    after = ranks.LAUNCHERS_AFTER_S
    clock = iter([0.0, 1.0, 2.0, 2.0 + after - 0.5, 2.0 + after, 2.0 + after + 1])
    sent: list[tuple[str, str]] = []
    alive = iter([True] * 5 + [False])
    monkeypatch.setattr(follow, "running", lambda _p: next(alive))
    ranks_left = iter([[7], [], [], []])
    rc = takeover.watch(cfg, 12345, knock=lambda _a, _p: True, pause=lambda _s: None,
                        stop=lambda p: sent.append((p, "KILL")),
                        signal=lambda p, sig: sent.append((p, sig)),
                        term_ranks=lambda s: term(sent, s["pattern"]),
                        find_ranks=lambda _s: next(ranks_left),
                        clock=lambda: next(clock))  # fmt: skip
    assert rc == 0
    assert sent == [(cfg["pattern"], "TERM ranks"), (cfg["pattern"], "TERM")]


def test_the_watch_finds_a_module_commands_ranks_by_the_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With `module` in the settings the ranks are the processes running `-m <module>`
    (commandranks.py); without, the script's (ranks.py, by the path in `pattern`)."""
    asked: list[tuple[str, str]] = []

    def lookup(kind: str, pid: int) -> Any:
        def find(target: str) -> list[int]:
            asked.append((kind, target))
            return [pid]

        return find

    monkeypatch.setattr(commandranks, "module_pids", lookup("module", 4))
    monkeypatch.setattr(ranks, "rank_pids", lookup("script", 5))
    module = settings(tmp_path, pattern="(-m|--module) mypkg\\.train( |$)", module="mypkg.train")
    assert takeover.rank_pids_of(module) == [4]
    assert takeover.rank_pids_of(settings(tmp_path)) == [5]
    assert asked == [("module", "mypkg.train"), ("script", "/opt/dss/train.py")]


def test_a_module_commands_ranks_get_the_sigterm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The stop seen by the watch sends SIGTERM to each rank the module's lookup found."""
    monkeypatch.setattr(commandranks, "module_pids", lambda _m: [41, 42])
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    assert takeover.term_ranks_of(settings(tmp_path, module="m")) == 2
    assert killed == [(41, signal.SIGTERM), (42, signal.SIGTERM)]
