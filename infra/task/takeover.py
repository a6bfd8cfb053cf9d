"""The run follows its master task too (training.recovery.follow_master): a master task
that Swarm started again (its host lost or drained, its container gone) takes the run
over with no human and no `pulumi up`.

Written beside infra/task/follow.py in the run's launch directory and run there, in
the master task, with the same settings file (which then holds `active`, `lease` and
the keys beside them: `Follow.settings` in infra/render/run.py). follow.py is left as
it is: a stack that follows only its workers keeps the launch it was deployed with.

- `takeover <settings>`: run by the master task's loop (infra/render/run.py
  `takeover_loop`) every few seconds. The task takes the run over when the run's
  active file names another task of the same spec (`DSS_SPEC`: a task that an update
  made has another, and the launch relaunches the run in it), no stop is asked for,
  the lease has lapsed for `lease_s` (the old supervisor's watch stopped touching it:
  its host is lost or its container gone) and fewer than `max_takeovers` were made. It
  writes itself into the active file, records the restart, kills the ranks the lost
  master left on the other hostfile addresses (blocked on rank 0, they would wait for
  the collective's timeout) and runs the supervisor. A spent budget is recorded once
  and the active file removed: the run is failed, which refresh reports.
- `rebuild <settings>`: the master's line becomes this task's own address (rank 0 is
  where the launcher runs), then follow.py's rebuild; nothing is written once another
  task owns the run.
- `watch <settings> <pid>`: follow.py's watch, which also touches the lease while every
  address answers, and stops the launcher once another task owns the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

if __package__:
    from infra.task import follow, ranks
else:  # run as a script in the task: follow.py and ranks.py are beside it, on sys.path[0]
    import follow  # type: ignore[import-not-found,no-redef]  # the task's copy, same module
    import ranks  # type: ignore[import-not-found,no-redef]  # the task's copy, same module


def say(text: str) -> None:
    print(f"takeover: {text}", flush=True)


def is_local(address: str) -> bool:
    """Whether `address` is one of this task's own (it can bind to it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
            return True
    except OSError:
        return False


def my_task() -> str:
    """This task's id (DSS_TASK_ID, a Swarm template on the master service)."""
    return os.environ.get("DSS_TASK_ID", "")


def my_spec() -> str:
    """The digest of this task's spec (DSS_SPEC, the service's label when Swarm made it)."""
    return os.environ.get("DSS_SPEC", "")


def read_active(path: str) -> tuple[str, str, int] | None:
    """The active file's (task, spec, takeovers), or None when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            words = f.read().split()
    except OSError:
        return None
    if len(words) < 2:
        return None
    try:
        count = int(words[2]) if len(words) > 2 else 0
    except ValueError:
        count = 0
    return words[0], words[1], count


def owns(settings: dict[str, Any], task: Callable[[], str] = my_task) -> bool:
    """Whether this task owns the run: the active file names it."""
    active = read_active(settings["active"])
    return active is not None and bool(task()) and active[0] == task()


def touch(path: str) -> None:
    with open(path, "a", encoding="utf-8"):
        pass
    os.utime(path)


def lease_age(path: str, now: Callable[[], float] = time.time) -> float:
    """Seconds since the lease was touched (a missing lease lapsed long ago)."""
    try:
        return now() - os.stat(path).st_mtime
    except OSError:
        return float("inf")


def verdict(settings: dict[str, Any], task: str, spec: str, age: float) -> tuple[str, int]:
    """What this task does about the run, with the takeovers counted so far:
    `take`, `budget` (the master moved once more than allowed), or why not."""
    active = read_active(settings["active"])
    if not task or not spec:
        return "this task has no DSS_TASK_ID/DSS_SPEC", 0
    if active is None:
        return "no run to keep (not launched, ended by itself, or stopped)", 0
    owner, owner_spec, count = active
    if owner == task:
        return "this task runs the run", count
    if os.path.exists(settings["stop"]):
        return "a stop is asked for", count
    if owner_spec != spec:
        return "an update made this task (another spec): the launch relaunches the run", count
    if age < float(settings["lease_s"]):
        return f"the lease is {age:.0f}s old (< {settings['lease_s']}s)", count
    if count >= int(settings["max_takeovers"]):
        return "budget", count
    return "take", count


def kill_left_ranks(settings: dict[str, Any], addresses: Iterable[str]) -> None:
    """Kill the training script's processes at each address over SSH (the task's ssh
    config gives port, key and user), all at once, each within 20 s."""
    procs = [
        subprocess.Popen(
            ["ssh", "-o", "ConnectTimeout=5", a, "pkill", "-KILL", "-f", settings["pattern"]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for a in addresses
    ]
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def takeover(
    settings: dict[str, Any],
    task: Callable[[], str] = my_task,
    spec: Callable[[], str] = my_spec,
    age: Callable[[str], float] = lease_age,
    kill: Callable[[dict[str, Any], Iterable[str]], None] = kill_left_ranks,
    run: Callable[[list[str]], int] = subprocess.call,
) -> int:
    """Take the run over when `verdict` says so and run its supervisor; 0 when there is
    nothing to do, 1 when the budget is spent."""
    me = task()
    what, count = verdict(settings, me, spec(), age(settings["lease"]))
    if what == "budget":
        say(f"the master task moved, but {count} takeover(s) is the budget: the run failed")
        follow.record(settings, {"event": "budget_spent", "takeovers": count})
        # Once: the run is failed (refresh reports it, `pulumi up` relaunches it).
        with contextlib.suppress(OSError):
            os.remove(settings["active"])
        return 1
    if what != "take":
        return 0
    new = f"{settings['active']}.new"
    with open(new, "w", encoding="utf-8") as f:
        f.write(f"{me} {spec()} {count + 1}\n")
    os.replace(new, settings["active"])
    touch(settings["lease"])
    follow.record(settings, {"event": "restart", "takeover": count + 1, "task": me})
    say(
        f"the run's master task stopped answering: task {me} takes the run over (takeover "
        f"{count + 1} of {settings['max_takeovers']}), from the newest complete checkpoint"
    )
    kill(settings, [a for a, _ in follow.read_hostfile(settings["hostfile"])][1:])
    return run(["sh", settings["supervisor"]])


def own_address(
    settings: dict[str, Any],
    current: Sequence[str],
    lookup: Callable[[str], list[str]] = follow.resolve,
    local: Callable[[str], bool] = is_local,
) -> str | None:
    """This task's address among the hostfile's, the candidates and what the master
    service's name resolves to (the overlay), or None."""
    offered = follow.candidates(settings, lookup)
    named = [a for n in settings["master_names"] for a in lookup(n)]
    return next((a for a in dict.fromkeys([*current, *offered, *named]) if local(a)), None)


def rebuild(
    settings: dict[str, Any],
    lookup: Callable[[str], list[str]] = follow.resolve,
    local: Callable[[str], bool] = is_local,
    then: Callable[[dict[str, Any]], int] = follow.rebuild,
) -> int:
    """Put this task's address in the master's line, then follow.py's rebuild."""
    if not owns(settings):
        say("another master task owns the run: the hostfile is left as it is")
        return 1
    path = settings["hostfile"]
    lines = follow.read_hostfile(path)
    me = own_address(settings, [a for a, _ in lines], lookup, local)
    if lines and me is not None and lines[0][0] != me:
        # Rank 0 listens where its launcher runs; a worker line that was this address
        # (it cannot be: the master goes only to its host or a spare) is not kept twice.
        rest = [(a, r) for a, r in lines[1:] if a != me]
        if len(rest) == len(lines) - 1:
            follow.write_hostfile(path, [(me, lines[0][1]), *rest])
            follow.record(settings, {"event": "hostfile", "moved": {lines[0][0]: me}})
            say(f"the master's line follows this task: {lines[0][0]} -> {me}")
    return then(settings)


def rank_pids_of(settings: dict[str, Any]) -> list[int]:
    """The run's ranks on this node: a module command's (`module` in the settings:
    processes whose interpreter runs `-m <module>`, infra/task/commandranks.py, written
    beside this file for a command), else the script's (ranks.py: `pattern` is its path)."""
    if settings.get("module"):
        if __package__:
            from infra.task import commandranks
        else:  # the task's copy, beside this file
            import commandranks  # type: ignore[import-not-found,no-redef]  # same module
        return list(commandranks.module_pids(str(settings["module"])))
    return ranks.rank_pids(settings["pattern"])


def term_ranks_of(settings: dict[str, Any]) -> int:
    """SIGTERM to the run's ranks on this node; how many there were."""
    pids = rank_pids_of(settings)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(pid, signal.SIGTERM)
    return len(pids)


def watch(
    settings: dict[str, Any],
    pid: int,
    knock: Callable[[str, int], bool] = follow.answers,
    pause: Callable[[float], None] = time.sleep,
    stop: Callable[[str], object] = lambda pattern: pkill(pattern, "KILL"),
    signal: Callable[[str, str], object] = lambda pattern, sig: pkill(pattern, sig),
    term_ranks: Callable[[dict[str, Any]], int] = term_ranks_of,
    find_ranks: Callable[[dict[str, Any]], list[int]] = rank_pids_of,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """follow.py's watch, touching the lease after each round in which every address
    answered; once another task owns the run it stops the launcher here (exit 3); on
    the stop marker it stops the training gracefully, as the stop script does
    (infra/task/ranks.py): SIGTERM to the ranks, to the launchers once no rank has
    been left for `ranks.LAUNCHERS_AFTER_S`, SIGKILL after `stop_grace_s`; the
    supervisor then ends, releasing the run."""
    answered = [True]

    def counted(address: str, port: int) -> bool:
        ok = knock(address, port)
        answered[0] = answered[0] and ok
        return ok

    def sleep(seconds: float) -> None:
        if answered[0] and owns(settings):
            touch(settings["lease"])
        answered[0] = True
        pause(seconds)

    stopping: list[float] = []
    quiet: list[float] = []  # since when no rank was found
    told: list[bool] = []  # the launchers were signalled

    def alive(p: int) -> bool:
        if not follow.running(p):
            return False
        if not owns(settings):
            say("another master task took the run over; stopping the launcher here")
            stop(settings["pattern"])
            return False
        if os.path.exists(settings["stop"]):
            # A stop from another host (its launch found no task there): training
            # checkpoints on SIGTERM; what is left after the grace is killed.
            now = clock()
            if not stopping:
                stopping.append(now)
                say(f"a stop is asked for: SIGTERM to {term_ranks(settings)} rank(s)")
            elif now - stopping[0] > float(settings["stop_grace_s"]):
                say(f"still running {settings['stop_grace_s']}s after the stop: SIGKILL")
                stop(settings["pattern"])
                return False
            elif not told:
                if find_ranks(settings):
                    quiet.clear()
                elif not quiet:
                    quiet.append(now)
                elif now - quiet[0] >= ranks.LAUNCHERS_AFTER_S:
                    say("no rank left: SIGTERM to the launchers")
                    signal(settings["pattern"], "TERM")
                    told.append(True)
        return True

    if owns(settings):
        touch(settings["lease"])
    rc = follow.watch(settings, pid, knock=counted, alive=alive, sleep=sleep)
    return rc if owns(settings) else follow.WATCH_GONE


def pkill(pattern: str, sig: str) -> int:
    return subprocess.call(["pkill", f"-{sig}", "-f", pattern])


def main(argv: Sequence[str]) -> int:
    commands = ("takeover", "rebuild", "watch")
    if len(argv) < 2 or argv[0] not in commands or (argv[0] == "watch" and len(argv) < 3):
        say("usage: takeover.py takeover|rebuild <settings.json> | watch <settings.json> <pid>")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        settings = json.load(f)
    if argv[0] == "watch":
        return watch(settings, int(argv[2]))
    if argv[0] == "rebuild":
        return rebuild(settings)
    return takeover(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
