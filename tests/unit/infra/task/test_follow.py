"""infra.task.follow: the hostfile follows the tasks that answer; the watch stops a
launcher whose peer is gone. Knocks are real TCP connects to listeners on loopback
addresses (127.0.0.x), one port for all, as the tasks' sshd port is."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.task import follow

pytestmark = pytest.mark.unit


@pytest.fixture
def port() -> int:
    """A port free on 127.0.0.1 (the listeners bind it there and on other addresses)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def listen(port: int) -> Iterator[Any]:
    """Start a listener on `<address>:port`: a task whose sshd answers there."""
    opened: list[socket.socket] = []

    def start(address: str) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        s.listen()
        opened.append(s)

    yield start
    for s in opened:
        s.close()


def settings(tmp: Path, port: int, lines: list[str], **kw: Any) -> dict[str, Any]:
    hostfile = tmp / "hostfile"
    hostfile.write_text("".join(f"{a} slots=1\n" for a in lines))
    base = {"hostfile": str(hostfile), "port": port, "events": str(tmp / "restarts.jsonl"),
            "wait_s": 0, "interval_s": 0, "misses": 2, "names": [], "addresses": []}  # fmt: skip
    return {**base, **kw}


def hostfile(cfg: dict[str, Any]) -> list[str]:
    return Path(cfg["hostfile"]).read_text().splitlines()


def events(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "restarts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_plan_replaces_only_the_dead() -> None:
    """Live addresses keep their place (node rank); a dead one takes the next live
    candidate that is not in the file."""
    current = ["m", "w1", "w2", "w3"]
    assert follow.plan(current, {"m", "w1", "w3", "s"}, ["w1", "s", "w3"]) == ["m", "w1", "s", "w3"]


def test_plan_never_replaces_the_master() -> None:
    """The rendezvous is on the master: a dead master is no plan, whatever answers."""
    assert follow.plan(["m", "w1"], {"w1", "s"}, ["s"]) is None


def test_plan_without_enough_live_tasks_is_none() -> None:
    """Two dead and one candidate: no hostfile of the right world size."""
    assert follow.plan(["m", "w1", "w2"], {"m", "s"}, ["s"]) is None


def test_candidates_are_addresses_then_names_each_once() -> None:
    """Configured addresses first, then what the task names resolve to, no repeats."""
    cfg = {"addresses": ["10.0.0.1", "10.0.0.2"], "names": ["tasks.ds-worker"]}
    found = follow.candidates(cfg, lambda _name: ["10.0.0.2", "10.0.1.7"])
    assert found == ["10.0.0.1", "10.0.0.2", "10.0.1.7"]


def test_resolve_orders_addresses_numerically() -> None:
    """`localhost` resolves; an unknown name is no address, not an error."""
    assert "127.0.0.1" in follow.resolve("localhost")
    assert follow.resolve("no-such-task.invalid") == []


def test_rebuild_moves_the_dead_address_to_the_live_task(
    tmp_path: Path, port: int, listen: Any
) -> None:
    """The master and one worker answer, the other worker's address does not, a new task
    does: the hostfile gets the new task in the dead one's place, recorded as a move."""
    for a in ("127.0.0.1", "127.0.0.3", "127.0.0.4"):
        listen(a)
    cfg = settings(tmp_path, port, ["127.0.0.1", "127.0.0.2", "127.0.0.3"],
                   addresses=["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"])  # fmt: skip
    assert follow.rebuild(cfg) == 0
    assert hostfile(cfg) == ["127.0.0.1 slots=1", "127.0.0.4 slots=1", "127.0.0.3 slots=1"]
    (event,) = events(tmp_path)
    assert event["event"] == "hostfile" and event["moved"] == {"127.0.0.2": "127.0.0.4"}
    assert not Path(cfg["hostfile"] + ".new").exists()


def test_rebuild_with_every_task_answering_changes_nothing(
    tmp_path: Path, port: int, listen: Any
) -> None:
    """All hostfile addresses answer: the file and the restarts file are untouched (a
    first launch starts on the hostfile the roster wrote)."""
    for a in ("127.0.0.1", "127.0.0.2"):
        listen(a)
    cfg = settings(tmp_path, port, ["127.0.0.1", "127.0.0.2"], addresses=["127.0.0.5"])
    before = Path(cfg["hostfile"]).stat().st_mtime_ns
    assert follow.rebuild(cfg) == 0
    assert Path(cfg["hostfile"]).stat().st_mtime_ns == before and events(tmp_path) == []


def test_rebuild_waits_for_the_moved_task(tmp_path: Path) -> None:
    """The replacement answers only from the third look on (Swarm still starting it): the
    rebuild waits for it instead of starting short."""
    looks = {"n": 0}

    def knock(address: str, _port: int) -> bool:
        if address == "10.0.0.1":
            looks["n"] += 1
        return address == "10.0.0.1" or (address == "10.0.0.9" and looks["n"] >= 3)

    cfg = settings(tmp_path, 2222, ["10.0.0.1", "10.0.0.2"], names=["tasks.ds-worker"],
                   wait_s=60, interval_s=5)  # fmt: skip
    slept: list[float] = []
    code = follow.rebuild(cfg, knock=knock, lookup=lambda _n: ["10.0.0.9"], sleep=slept.append,
                          clock=lambda: float(len(slept) * 5))  # fmt: skip
    assert code == 0 and slept == [5.0, 5.0]
    assert hostfile(cfg) == ["10.0.0.1 slots=1", "10.0.0.9 slots=1"]


def test_rebuild_gives_up_after_wait_s_and_keeps_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No replacement within wait_s: exit 1, the hostfile as it was, and the reason said."""
    cfg = settings(tmp_path, 2222, ["10.0.0.1", "10.0.0.2"], wait_s=10, interval_s=5)
    slept: list[float] = []
    code = follow.rebuild(cfg, knock=lambda a, _p: a == "10.0.0.1", lookup=lambda _n: [],
                          sleep=slept.append, clock=lambda: float(len(slept) * 5))  # fmt: skip
    assert code == 1 and hostfile(cfg) == ["10.0.0.1 slots=1", "10.0.0.2 slots=1"]
    assert "1 of 2 hostfile addresses answer" in capsys.readouterr().out


def test_watch_stops_after_the_misses_in_a_row(tmp_path: Path, port: int, listen: Any) -> None:
    """An address that misses `misses` knocks in a row ends the watch with 3 (the
    supervisor then kills the launcher), recorded as gone."""
    listen("127.0.0.1")
    cfg = settings(tmp_path, port, ["127.0.0.1", "127.0.0.2"])
    assert follow.watch(cfg, 1, alive=lambda _pid: True, sleep=lambda _s: None) == 3
    (event,) = events(tmp_path)
    assert event == {"event": "gone", "address": "127.0.0.2", "time": event["time"]}


def test_watch_forgives_a_single_miss(tmp_path: Path) -> None:
    """A knock missed once, then answered: the count starts again; the watch ends with
    the launcher (exit 0)."""
    answers = iter([True, False, True, True, False, True, True, True])
    rounds = iter([True, True, True, True, False])
    cfg = settings(tmp_path, 2222, ["10.0.0.1", "10.0.0.2"])
    code = follow.watch(cfg, 1, knock=lambda _a, _p: next(answers),
                        alive=lambda _pid: next(rounds), sleep=lambda _s: None)  # fmt: skip
    assert code == 0 and events(tmp_path) == []


def test_an_exited_unreaped_launcher_is_not_running() -> None:
    """A child that exited but was not yet waited for (a zombie) reads as ended, so the
    watch returns and the supervisor's `wait` collects its code."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(100):
            if not follow.running(proc.pid):
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert not follow.running(proc.pid)
    finally:
        proc.wait()
    assert follow.running(os.getpid())
