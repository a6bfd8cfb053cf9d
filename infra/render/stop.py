"""Pure renderer of the stop script: what a launch's delete runs on its host to end the
run gracefully (the ranks first, so they checkpoint; then the launchers; SIGKILL after
the grace period), and follow_master's stop of a run taken over on another host. No
Pulumi, no I/O: tested directly and by golden files.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from infra.layout import DATA_MOUNT, IMAGE_PYTHON, LAUNCH_DIR, TRAIN_UID
from infra.render.runfiles import (
    command_ranks_path,
    follow_path,
    ranks_program,
    stop_marker,
    supervisor_prefix,
    takeover_path,
)
from infra.render.shell import task_container
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
    SIGKILL included)."""
    pat = shlex.quote(pattern)
    mark = _marks(run_name, follow, takeover)
    elsewhere = ""
    if takeover and run_name and data_dir:
        elsewhere = _stop_elsewhere(service, run_name, data_dir, grace_seconds)
    finder = (
        ranks_function(pattern) if command is None else command_ranks_function(command, run_name)
    )
    # Under pdsh the pattern reaches the master's processes only: the other hosts'
    # ranks get their SIGKILL from commandranks.py too.
    kill = "ranks kill >/dev/null\n" if command is not None and command.ssh_port else ""
    return f"""set -u
{task_container("ctr", service)}
{elsewhere}[ -n "$ctr" ] || {{ echo "stop: no task of {service} here; nothing to stop"; exit 0; }}
{mark}{finder}n=$(ranks term)
case "$n" in
  ''|*[!0-9]*)
    echo "stop: cannot tell the ranks apart ($n); SIGTERM to all of the training" >&2
    docker exec "$ctr" pkill -TERM -f {pat} || true ;;
  *) echo "stop: SIGTERM to $n rank(s)" ;;
esac
idle=0
end=$(($(date +%s) + {grace_seconds}))
while [ "$(date +%s)" -lt "$end" ]; do
  if ! docker exec "$ctr" pgrep -f {pat} >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  if [ "$(ranks count)" = 0 ]; then idle=$((idle + 1)); else idle=0; fi
  if [ "$idle" -eq {LAUNCHERS_AFTER_S} ]; then  # about that many seconds: one round each
    echo "stop: no rank left; SIGTERM to the launchers"
    docker exec "$ctr" pkill -TERM -f {pat} || true
  fi
  sleep 1
done
echo "stop: still running after {grace_seconds}s (blocked: a peer is gone?); SIGKILL" >&2
{kill}docker exec "$ctr" pkill -KILL -f {pat} || true
"""


def _marks(run_name: str, follow: bool, takeover: bool) -> str:
    """Shell: the run's stop marker set; with follow, its supervisor, the follow program
    (and the takeover program) killed (see `stop_script`)."""
    if not run_name:
        return ""
    mark = f'docker exec -u {TRAIN_UID} "$ctr" touch {stop_marker(run_name)} || true\n'
    if follow:
        owners = [supervisor_prefix(run_name), follow_path(run_name)]
        if takeover:
            owners.append(takeover_path(run_name))
        for owner in owners:
            mark += f'docker exec "$ctr" pkill -KILL -f {shlex.quote(owner)} || true\n'
    return mark


def ranks_function(pattern: str) -> str:
    """Shell: `ranks count|term`, infra/task/ranks.py run in the task container `$ctr`
    by the image's python from stdin, the script in its environment (so no command
    line in the task but the ranks' own names it)."""
    return (
        "ranks() {\n"
        f'  docker exec -i -e {SCRIPT_ENV}={shlex.quote(pattern)} "$ctr" '
        f'{IMAGE_PYTHON} -I -S - "$1" <<\'DSS_RANKS\' 2>/dev/null || echo "?"\n'
        f"{ranks_program()}DSS_RANKS\n"
        "}\n"
    )


def command_ranks_function(ranks: CommandRanks, run_name: str) -> str:
    """Shell: `ranks count|term|kill` of a command run, commandranks.py from the run's dir.
    Under pdsh it runs on every hostfile host through pdsh, as the training user with
    the launcher's sshd port (DeepSpeed's runner sets `PDSH_SSH_ARGS_APPEND` the same
    way), and the hosts' counts are summed; `?` when no host answered."""
    if not run_name:  # the program is in the run's dir: without it the path is wrong
        raise ValueError("a command's stop needs run_name; allowed: the run's name")
    q = shlex.quote
    env = f"{MODULE_ENV if ranks.module else SCRIPT_ENV}={ranks.target}"
    program = f"{IMAGE_PYTHON} -S -E {command_ranks_path(run_name)}"
    if ranks.ssh_port is None:
        return (
            "ranks() {\n"
            f'  docker exec -e {q(env)} "$ctr" {program} "$1" 2>/dev/null || echo "?"\n'
            "}\n"
        )
    hostfile = q(f"{LAUNCH_DIR}/{run_name}/hostfile")
    ssh_args = q(f"PDSH_SSH_ARGS_APPEND=-p {ranks.ssh_port}")
    return (
        f'hosts=$(docker exec "$ctr" cat {hostfile} | '
        """awk 'NF {printf "%s%s", s, $1; s = ","}')\n"""
        "ranks() {\n"
        '  [ -n "$hosts" ] || { echo "?"; return; }\n'
        f'  docker exec -u {TRAIN_UID} -e {ssh_args} "$ctr" pdsh -S -t 5 -u {PDSH_TIMEOUT_S} '
        f'-w "$hosts" {q(f"{q(env)} {program} ")}"$1" 2>/dev/null |\n'
        """    awk -F': ' '$2 ~ /^[0-9]+$/ {n += $2; k++} END {if (k) print n; else print "?"}'\n"""
        "}\n"
    )


def _stop_elsewhere(service: str, run_name: str, data_dir: str, grace_seconds: int) -> str:
    """follow_master's stop when the master task is not on this host: the marker set
    on the shared data dir (this host's path of /data), then a wait for the run's
    active file to go (the supervisor ends: the grace, its restart delay, a margin)."""
    run_dir = shlex.quote(f"{data_dir}{LAUNCH_DIR.removeprefix(DATA_MOUNT)}/{run_name}")
    wait = grace_seconds + 60
    return f"""if [ -z "$ctr" ] && [ -e {run_dir}/active ]; then
  touch {run_dir}/stop || {{ echo "stop: cannot set the stop marker in {run_dir}" >&2; exit 1; }}
  echo "stop: no task of {service} here; its run was taken over elsewhere: stop marker set"
  for i in $(seq 1 {wait}); do
    if [ ! -e {run_dir}/active ]; then echo "stop: training exited"; exit 0; fi
    # A lease not touched for longer than a takeover waits: no supervisor runs the
    # run any more (its task was replaced or lost with its host): nothing to wait for.
    age=$(( $(date +%s) - $(stat -c %Y {run_dir}/lease 2>/dev/null || echo 0) ))
    if [ "$age" -gt {LEASE_S + 10} ]; then
      echo "stop: the run's lease is ${{age}}s old: no supervisor runs it; nothing to wait for"
      exit 0
    fi
    sleep 1
  done
  echo "stop: the run's supervisor did not end in {wait}s (see its launcher.log)" >&2
  exit 1
fi
"""
