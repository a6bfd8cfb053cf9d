"""The run follows its tasks (training.recovery.follow_moves): a worker task Swarm moved
(its host lost, to the spare) is found again with no human and no `pulumi up`.

Run by the run's supervisor in the master task (infra/render/run.py), with its JSON
settings file (`Follow.settings` in infra/render/run.py, written by the launch script;
it always holds every key, so nothing here has a default of its own):

- `watch <settings> <pid>`: while the launcher `pid` runs, knock on every hostfile
  address's sshd port each `interval_s`; an address that missed `misses` knocks in a
  row is gone (a rank blocked on it would wait for the collective's timeout, about 30
  minutes): exit 3, and the supervisor kills the launcher and restarts it, which counts
  against the restart budget. Exit 0 when the launcher ends by itself.
- `rebuild <settings>`: before each attempt, keep every hostfile address whose sshd
  answers, in its place (the node rank), and put a live candidate that is not in the
  file in the place of each one that does not: on the overlay the candidates are the
  worker service's tasks (`tasks.<service>`, Swarm's DNS), on the host data plane every
  host's address. The master's line is never replaced (the rendezvous is there). It
  waits up to `wait_s` for enough live tasks (Swarm starts the moved task on the spare
  about 30 s after the loss), then writes the file (replaced, never edited in place)
  and records the change in the run's restarts file. Too few after `wait_s`: exit 1,
  the file as it was (the launcher then fails, and the budget decides).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

KNOCK_TIMEOUT_S = 2.0
WATCH_GONE = 3


def say(text: str) -> None:
    print(f"follow: {text}", flush=True)


def answers(address: str, port: int, timeout: float = KNOCK_TIMEOUT_S) -> bool:
    """Whether `address` accepts a TCP connection on `port` (its task's sshd) in time."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def read_hostfile(path: str) -> list[tuple[str, str]]:
    """(address, the rest of the line) per hostfile line, in order."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            address, _, rest = line.strip().partition(" ")
            if address:
                out.append((address, rest))
    return out


def write_hostfile(path: str, lines: Sequence[tuple[str, str]]) -> None:
    """Replace the file: a reader (the launcher, train.py) sees the old or the new one."""
    new = f"{path}.new"
    with open(new, "w", encoding="utf-8") as f:
        f.writelines(f"{a} {rest}".rstrip() + "\n" for a, rest in lines)
    os.replace(new, path)


def _ip_order(address: str) -> tuple[int, str]:
    try:
        return (int(ipaddress.ip_address(address)), address)
    except ValueError:
        return (0, address)


def resolve(name: str) -> list[str]:
    """The IPv4 addresses a name has now (Swarm's `tasks.<service>`), in address order."""
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({str(i[4][0]) for i in infos}, key=_ip_order)


def candidates(settings: dict[str, Any], lookup: Callable[[str], list[str]] = resolve) -> list[str]:
    """Where a task of the run may be now: the configured addresses (host data plane),
    then what the task names resolve to (overlay), each once."""
    out: list[str] = []
    named = [a for name in settings["names"] for a in lookup(name)]
    for a in [*settings["addresses"], *named]:
        if a not in out:
            out.append(a)
    return out


def plan(current: Sequence[str], live: Iterable[str], offered: Sequence[str]) -> list[str] | None:
    """The hostfile's addresses after the move: each live one kept in its place, each
    dead one replaced by the next live candidate not in the file; None when the master
    (the first) is dead or too few candidates live."""
    alive = set(live)
    if not current or current[0] not in alive:
        return None
    spare = [a for a in offered if a in alive and a not in current]
    out = []
    for a in current:
        if a in alive:
            out.append(a)
        elif spare:
            out.append(spare.pop(0))
        else:
            return None
    return out


def record(settings: dict[str, Any], event: dict[str, Any]) -> None:
    """One JSON line in the run's restarts file (what the reviewer and the probe read)."""
    path = settings["events"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        entry = {**event, "time": int(time.time())}
        line = json.dumps(entry, sort_keys=True, separators=(",", ":"))
        f.write(line + "\n")


def rebuild(
    settings: dict[str, Any],
    knock: Callable[[str, int], bool] = answers,
    lookup: Callable[[str], list[str]] = resolve,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    path, port = settings["hostfile"], int(settings["port"])
    lines = read_hostfile(path)
    current = [a for a, _ in lines]
    deadline = clock() + float(settings["wait_s"])
    while True:
        offered = candidates(settings, lookup)
        live = [a for a in dict.fromkeys([*current, *offered]) if knock(a, port)]
        new = plan(current, live, offered)
        if new is not None:
            if new != current:
                moved = {old: a for old, a in zip(current, new, strict=True) if old != a}
                write_hostfile(path, [(a, rest) for a, (_, rest) in zip(new, lines, strict=True)])
                record(settings, {"event": "hostfile", "moved": moved})
                say(f"the hostfile follows the tasks: {moved}")
            return 0
        if clock() >= deadline:
            dead = [a for a in current if a not in live]
            say(
                f"{len(current) - len(dead)} of {len(current)} hostfile addresses answer on "
                f"port {port} (not {dead}) and no other task does after {settings['wait_s']}s; "
                "starting with the hostfile as it is"
            )
            return 1
        sleep(float(settings["interval_s"]))


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited but not yet reaped by the supervisor, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def watch(
    settings: dict[str, Any],
    pid: int,
    knock: Callable[[str, int], bool] = answers,
    alive: Callable[[int], bool] = running,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    port, misses_allowed = int(settings["port"]), int(settings["misses"])
    interval = float(settings["interval_s"])
    addresses = [a for a, _ in read_hostfile(settings["hostfile"])]
    misses = dict.fromkeys(addresses, 0)
    while alive(pid):
        for a in addresses:
            misses[a] = 0 if knock(a, port) else misses[a] + 1
            if misses[a] >= misses_allowed:
                say(
                    f"{a} has not answered on port {port} for {misses[a]} knocks "
                    f"{interval:g}s apart; stopping the launcher to resume on the running tasks"
                )
                record(settings, {"event": "gone", "address": a})
                return WATCH_GONE
        sleep(interval)
    return 0


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("watch", "rebuild"):
        say("usage: follow.py watch <settings.json> <pid> | rebuild <settings.json>")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        settings = json.load(f)
    if argv[0] == "watch":
        return watch(settings, int(argv[2]))
    return rebuild(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
