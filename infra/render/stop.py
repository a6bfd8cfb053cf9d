"""Pure renderer of the stop script: what a launch's delete runs on its host to end the
run gracefully (the ranks first, so they checkpoint; then the launchers; SIGKILL after
the grace period), and follow_master's stop of a run taken over on another host. No
Pulumi, no I/O: tested directly and by golden files.

The stop script is a file, readable whole: infra/task/stop.sh, its optional parts
marked; this module works out its values and parts, and infra/render/template.py
renders it. Its bytes must not move: the script is the `delete` input of the launch's
`command.remote.Command`, and a byte of difference is an update of every launch on
upgrade. Every variant the config can produce is a golden file
(tests/unit/infra/golden/scripts/).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from infra.layout import DATA_MOUNT, IMAGE_PYTHON, LAUNCH_DIR, TRAIN_UID
from infra.render import template
from infra.render.runfiles import (
    command_ranks_path,
    follow_path,
    ranks_program,
    stop_marker,
    supervisor_prefix,
    takeover_path,
    universal_path,
)
from infra.render.supervisor import LEASE_S
from infra.task.commandranks import MODULE_ENV
from infra.task.ranks import LAUNCHERS_AFTER_S, SCRIPT_ENV

PDSH_TIMEOUT_S = 10
"""Under pdsh, how long one round of the ranks on every host may take (a lost host's
ssh would otherwise hang the stop's round until the grace period is spent)."""


@dataclass(frozen=True)
class CommandRanks:
    """training.command: how its stop finds its ranks (infra/task/commandranks.py, which
    its launch writes beside the hostfile)."""

    target: str
    """The script's absolute path in the task, or the module's name."""
    module: bool = False
    ssh_port: int | None = None
    """Under pdsh: the tasks' sshd port, and the ranks are on every hostfile host (the
    master's stop reaches them through pdsh); None: on this task's host only."""


def stop_script(
    *,
    service: str,
    grace_seconds: int,
    pattern: str,
    run_name: str = "",
    follow: bool = False,
    takeover: bool = False,
    data_dir: str = "",
    command: CommandRanks | None = None,
    universal: bool = False,
) -> str:
    """Shell run over SSH on delete: SIGTERM the ranks of the training script
    `pattern` in this task (infra/task/ranks.py: the processes that run it as their
    program; they finish the step, tell the others through its all-reduce, all save
    a last checkpoint and exit 0), then the launchers (every command line that names
    the script) once no rank has been left for 5 s: they end by themselves when
    their ranks do, and signalled first they would close the SSH sessions the ranks
    write to, which kills a rank before it saves. After the grace period SIGKILL what
    is left: a rank blocked in a collective whose peer is gone (a lost host) cannot
    checkpoint, and would hold the rendezvous port against the relaunch.
    The pattern must not match the task's own entrypoint or sshd: a task whose
    sshd dies exits, and Swarm restarts it somewhere with a new address.
    `run_name`: the run's stop marker is set first, so its supervisor (which the
    pattern does not match) restarts nothing and exits.
    `follow` (training.recovery.follow_moves): the supervisor may be waiting in
    `follow.py rebuild` (up to its wait_s) or in `watch`, where it would see the marker
    only later, alive meanwhile, so the next launch would keep it as the run and it
    would exit: it and the follow program are killed first (neither holds training
    state; the launcher they leave is stopped below as always). `takeover`
    (follow_master): the takeover program too, which may be running the supervisor;
    and when this host has no task of the service (the master task runs on a spare
    since a takeover), the stop marker is set through the host's data dir `data_dir`
    and the stop waits until the run's supervisor there has ended (it removes the
    run's active file): its watch stops the training gracefully on the marker.
    `command`: a training.command's ranks, by commandranks.py (under pdsh every host's,
    SIGKILL included). `universal` (the launch whose supervisor makes the newest
    checkpoint universal first): after the marker, the converter is killed, so a
    supervisor converting (for minutes, on a large model) sees the marker now and exits
    rather than being kept by the next launch as the run."""
    if command is not None:
        finder = _command_ranks_values(command, run_name)
    else:
        finder = _script_ranks_values(pattern)
    q = shlex.quote
    values = {
        **finder,
        "SERVICE": service,
        "PATTERN": q(pattern),
        "GRACE_SECONDS": str(grace_seconds),
        "LAUNCHERS_AFTER_S": str(LAUNCHERS_AFTER_S),
        "TRAIN_UID": str(TRAIN_UID),
    }
    elsewhere = bool(takeover and run_name and data_dir)
    if elsewhere:
        run_dir = f"{data_dir}{LAUNCH_DIR.removeprefix(DATA_MOUNT)}/{run_name}"
        values |= {
            "RUN_DIR": q(run_dir),
            "ELSEWHERE_WAIT_S": str(grace_seconds + 60),
            "LEASE_EXPIRED_S": str(LEASE_S + 10),
        }
    if run_name:
        values |= {
            "STOP": stop_marker(run_name),
            "SUPERVISOR_PREFIX": q(supervisor_prefix(run_name)),
            "FOLLOW_PROGRAM": q(follow_path(run_name)),
            "TAKEOVER_PROGRAM": q(takeover_path(run_name)),
            "UNIVERSAL_PROGRAM": q(universal_path(run_name)),
        }
    flags = {
        "elsewhere": elsewhere,
        "stop_marker": bool(run_name),
        "follow": bool(run_name) and follow,
        "takeover": takeover,
        "ranks_of_script": command is None,
        "command_ranks": command is not None,
        "everywhere": command is not None and command.ssh_port is not None,
        "universal": bool(run_name) and universal,
    }
    return template.render("stop.sh", values, flags)


def _script_ranks_values(pattern: str) -> dict[str, str]:
    """The values of stop.sh's ranks_of_script part: ranks.py's text (its docstring
    cut: the code alone, in a heredoc) and what it is told."""
    return {
        "SCRIPT_ENV": SCRIPT_ENV,
        "PATTERN": shlex.quote(pattern),
        "IMAGE_PYTHON": IMAGE_PYTHON,
        "RANKS_PROGRAM": ranks_program(),
    }


def _command_ranks_values(ranks: CommandRanks, run_name: str) -> dict[str, str]:
    """The values of stop.sh's command_ranks part: commandranks.py in the run's dir,
    the script or module in its environment; under pdsh the command pdsh runs on every
    hostfile host (one shell word)."""
    if not run_name:  # the program is in the run's dir: without it the path is wrong
        raise ValueError("a command's stop needs run_name; allowed: the run's name")
    q = shlex.quote
    env = f"{MODULE_ENV if ranks.module else SCRIPT_ENV}={ranks.target}"
    if ranks.ssh_port is None:
        return {
            "RANKS_ENV": q(env),
            "IMAGE_PYTHON": IMAGE_PYTHON,
            "COMMAND_RANKS": command_ranks_path(run_name),
        }
    program = f"{IMAGE_PYTHON} -S -E {command_ranks_path(run_name)}"
    return {
        "HOSTFILE": q(f"{LAUNCH_DIR}/{run_name}/hostfile"),
        "TRAIN_UID": str(TRAIN_UID),
        "PDSH_SSH_ARGS": q(f"PDSH_SSH_ARGS_APPEND=-p {ranks.ssh_port}"),
        "PDSH_TIMEOUT_S": str(PDSH_TIMEOUT_S),
        "PDSH_COMMAND": q(f"{q(env)} {program} "),
    }
