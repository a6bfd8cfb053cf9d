"""The run's supervisor, rendered: the shell loop that restarts a crashed launcher, the
restart counts it keeps for Prometheus, and, with training.recovery.follow_moves, what it
follows (`Follow`, the settings of infra/task/follow.py) and the master task's takeover
loop (follow_master). Pure; no Pulumi, no I/O: tested directly.

The supervisor is a file on the shared /data (beside the hostfile), run detached in a
training task as the training user. Its command line names the file, not the training
script, so the stop script's `pkill -f <script>` reaches the launcher and the ranks but
never the supervisor; the stop marker beside it tells the supervisor a stop was asked
for, so a stopped run is not restarted.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from infra.render.runfiles import (
    BUDGET_SPENT,
    RESTARTS_FILE,
    active_path,
    exit_record_path,
    exitrecord_path,
    follow_path,
    follow_settings_path,
    launcher_log,
    lease_path,
    log_dir,
    stop_marker,
    supervisor_path,
    takeover_path,
)

LEASE_S = 30
"""follow_master: a lease older than this means no supervisor runs the run: a master
task may take it over, and a stop from another host stops waiting for it."""

RESTARTS_METRIC = "dss_run_restarts_total"
BUDGET_METRIC = "dss_run_restart_budget_spent"


def restart_metrics_text(run_name: str, supervisor: str) -> str:
    """The file's text as a printf format: `%s` the restarts, then 1 if the budget is
    spent (else 0). `supervisor`: `master`, or the node rank of an SSH-less launch."""
    labels = f'run="{run_name}",supervisor="{supervisor}"'
    return (
        f"# HELP {RESTARTS_METRIC} Automatic restarts of the launcher by the run "
        "supervisor (since this launch).\\n"
        f"# TYPE {RESTARTS_METRIC} counter\\n"
        f"{RESTARTS_METRIC}{{{labels}}} %s\\n"
        f"# HELP {BUDGET_METRIC} 1 once the supervisor gave up: "
        "training.recovery.max_restarts spent.\\n"
        f"# TYPE {BUDGET_METRIC} gauge\\n"
        f"{BUDGET_METRIC}{{{labels}}} %s\\n"
    )


@dataclass(frozen=True)
class Follow:
    """training.recovery.follow_moves: where the run's tasks may be found again, read by
    infra/task/follow.py in the master task before each attempt and while one runs."""

    hostfile: str
    port: int
    """The tasks' sshd port: what is knocked on."""
    names: tuple[str, ...] = ()
    """Overlay: the DNS names of the movable tasks (`tasks.<worker service>`)."""
    addresses: tuple[str, ...] = ()
    """Host data plane: every host's address (a task there answers on its host's)."""
    forget_host_keys: bool = False
    """Host data plane: a moved task answers at an address another task had, with
    another host key; the master task forgets the keys it learnt before each attempt."""
    master_names: tuple[str, ...] = ()
    """follow_master on the overlay: the master service's DNS name (`tasks.<master>`),
    where a master task that took the run over finds its own address."""
    master_moves: bool = False
    """training.recovery.follow_master: a master task that starts again takes the run
    over (the keys below are in the settings only then)."""
    pattern: str = ""
    """follow_master: the training script's command-line pattern, what a takeover kills
    on the workers (the ranks the lost master started, blocked on it)."""
    max_takeovers: int = 0
    """follow_master: takeovers allowed per launch (training.recovery.max_restarts)."""
    lease_s: int = LEASE_S
    """follow_master: how long the lease must have lapsed before a takeover."""
    stop_grace_s: int = 0
    """follow_master: a stop marker seen by the watch (a stop from another host) is a
    SIGTERM to the training, then after this long a SIGKILL (training.stop_grace_period)."""
    wait_s: int = 180
    """How long an attempt waits for enough live tasks: Swarm moves a lost host's task
    after about 30 s (the standby task keeps the image pulled on a spare)."""
    interval_s: int = 5
    misses: int = 3
    """Knocks in a row an address may miss before the watch stops the launcher."""

    def settings(self, run_name: str) -> str:
        """The follow program's settings file (canonical JSON)."""
        data = {
            "hostfile": self.hostfile,
            "port": self.port,
            "names": list(self.names),
            "addresses": list(self.addresses),
            "wait_s": self.wait_s,
            "interval_s": self.interval_s,
            "misses": self.misses,
            "events": f"{log_dir(run_name)}/{RESTARTS_FILE}",
        }
        if self.master_moves:
            # Only then: a run that follows only its workers keeps its settings file.
            data |= {
                "master_names": list(self.master_names),
                "active": active_path(run_name),
                "lease": lease_path(run_name),
                "lease_s": self.lease_s,
                "pattern": self.pattern,
                "max_takeovers": self.max_takeovers,
                "stop_grace_s": self.stop_grace_s,
                "stop": stop_marker(run_name),
                "supervisor": supervisor_path(run_name),
            }
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


MASTER_ADDR_SLOT = "@DSS_MASTER_ADDR@"
"""training.recovery.follow_master: the launcher's `--master_addr` in the supervisor is
the hostfile's first address at each attempt (the master may have moved), not the one
the launch saw: the launch renders this in its place (shlex leaves it unquoted)."""

TAKEOVER_ENV = {
    "DSS_TASK_ID": "{{.Task.ID}}",
    "DSS_SPEC": '{{index .Service.Labels "dss.spec"}}',
}
"""The master task's id and its spec's digest (the service label SPEC_LABEL at the time
Swarm made the task), filled in by Swarm's templates."""


def takeover_loop(interval_s: int = 5) -> str:
    """The master task's command beside its sshd (training.recovery.follow_master):
    every `interval_s`, once a launch wrote the run's follow program, ask it whether
    this task should take the run over (infra/task/takeover.py `takeover`, which then
    runs the supervisor). It ends, and with it the task, when sshd is gone (as the
    image's entrypoint does without a command).

    Its text names the run only as `$DSS_RUN`: the stop script's and the launch's
    `pkill`/`pgrep -f` on the run's paths and the launcher's name must never match
    this loop (the task would end with it)."""
    run = "${DSS_RUN}"
    program, settings = takeover_path(run), follow_settings_path(run)
    return (
        "while pgrep -x sshd >/dev/null; do\n"
        f'  if [ -f "{program}" ] && [ -f "{settings}" ] && [ -d "{log_dir(run)}" ]; then\n'
        f'    python3 "{program}" takeover "{settings}" >>"{launcher_log(run)}" 2>&1\n'
        "  fi\n"
        f"  sleep {interval_s}\n"
        "done\n"
        "exit 1\n"
    )


def supervisor_script(
    *,
    cmd: str,
    run_name: str,
    workdir: str,
    max_restarts: int,
    delay_s: int,
    pattern: str,
    metrics_file: str | None = None,
    supervisor: str = "master",
    follow: Follow | None = None,
    setup: str = "",
    exit_record: str | None = None,
) -> str:
    """The supervisor: runs the launcher `cmd`; when it exits non-zero and no stop was
    asked for, records the restart, kills the ranks left on this node (a rank blocked on
    a dead peer would hold its port), waits `delay_s` and runs it again: the training
    script resumes from the newest complete checkpoint. After `max_restarts` it records
    that the budget is spent and exits with the launcher's code (the run is then failed,
    which refresh reports and `pulumi up` relaunches). Exit 0 (the last step done, or a
    stop) ends it.

    `metrics_file`: it also keeps its counts there as Prometheus text (at its start,
    each restart and a spent budget; replaced, never rewritten in place, so the node
    exporter never reads half a file). Without it the script is what it always was: a
    stack without monitoring keeps its launch.

    `follow` (training.recovery.follow_moves): each attempt first rebuilds the hostfile
    from the tasks that answer (infra/task/follow.py `rebuild`), and the launcher runs
    in the background under `watch`, which stops it (a restart) once a hostfile address
    stops answering: the run resumes on the task Swarm moved with no `pulumi up`.
    Without it the loop is what it always was.

    `setup` (training.command): shell run once after the `cd`, before the loop (the
    run's directories and environment: infra/render/command.py env_setup).

    `exit_record` (training.command: the node label, `master` or the node rank): after
    each attempt the supervisor writes its exit record (infra/task/exitrecord.py) from
    this attempt's lines of the launcher log; a new supervisor first removes the one
    a previous launch left."""
    log = launcher_log(run_name)
    restarts = f"{log_dir(run_name)}/{RESTARTS_FILE}"
    stop = stop_marker(run_name)
    q = shlex.quote
    metrics, count, spent = _metrics(metrics_file, run_name, supervisor)
    claim, top, lost, release = "", "", "", ""
    if follow is not None and follow.master_moves:
        cmd = cmd.replace(f"--master_addr={MASTER_ADDR_SLOT}", '--master_addr="$master"')
        claim, top, lost, release = _ownership(run_name, pattern)
    attempt = _attempt(cmd, log, pattern, run_name, follow)
    if exit_record is not None:
        setup, attempt = _with_exit_record(setup, attempt, log, run_name, exit_record)
    # The old path stays in the first line: the text is part of the launch's script, and
    # another would relaunch every run on a stack that changed nothing.
    return f"""# deepspeed-swarm: the supervisor of run {run_name} (infra/render/run.py)
set -u
mkdir -p {q(log_dir(run_name))}
cd {q(workdir)}
{setup}{claim}{metrics}restarts=0
while :; do
{top}  rc=0
{attempt}{lost}  if [ "$rc" -eq 0 ] || [ -e {q(stop)} ]; then {release}exit "$rc"; fi
  if [ "$restarts" -ge {max_restarts} ]; then
    echo "supervisor: the launcher exited $rc; restart budget ({max_restarts}) spent" >>{q(log)}
    printf '{{"event":"{BUDGET_SPENT}","exit_code":%s,"time":%s}}\\n' "$rc" "$(date +%s)" \\
      >>{q(restarts)}
{spent}    {release}exit "$rc"
  fi
  restarts=$((restarts + 1))
  printf '{{"event":"restart","restart":%s,"exit_code":%s,"time":%s}}\\n' \\
    "$restarts" "$rc" "$(date +%s)" >>{q(restarts)}
{count}  echo "supervisor: the launcher exited $rc; restart $restarts of {max_restarts}\
 in {delay_s}s, from the newest complete checkpoint" >>{q(log)}
  pkill -KILL -f {q(pattern)} 2>/dev/null || true
  sleep {delay_s}
  if [ -e {q(stop)} ]; then {release}exit "$rc"; fi
done
"""


def _ownership(run_name: str, pattern: str) -> tuple[str, str, str, str]:
    """follow_master: the supervisor's claim on the run (at its start: the active file
    names its task, keeping the takeovers counted so far), its check before each attempt
    and after it (a task that took the run over meanwhile owns it: this one stops its
    ranks and ends, leaving the file), and its release when it ends by itself."""
    q = shlex.quote
    active, lease = q(active_path(run_name)), q(lease_path(run_name))
    claim = (
        f"n=0\n[ -f {active} ] && read -r _t _s n <{active}\n"
        f'printf \'%s %s %s\\n\' "${{DSS_TASK_ID:-}}" "${{DSS_SPEC:-}}" "${{n:-0}}" >{active}.new '
        f"&& mv {active}.new {active}\n"
        f"touch {lease}\n"
        f'owner() {{ read -r t _r <{active} 2>/dev/null && [ "$t" = "${{DSS_TASK_ID:-}}" ]; }}\n'
    )
    top = "  owner || exit 0\n"
    lost = (
        "  if ! owner; then\n"
        f'    echo "supervisor: another master task took the run over; stopping here" >>'
        f"{q(launcher_log(run_name))}\n"
        f"    pkill -KILL -f {q(pattern)} 2>/dev/null || true\n"
        "    exit 0\n"
        "  fi\n"
    )
    return claim, top, lost, _release(run_name)


def _release(run_name: str) -> str:
    """follow_master, shell before an `exit`: the run's active file removed when it
    still names this supervisor's task (a run ended by itself or stopped)."""
    return f"{{ owner && rm -f {shlex.quote(active_path(run_name))}; }}; "


def _metrics(metrics_file: str | None, run_name: str, supervisor: str) -> tuple[str, str, str]:
    """The supervisor's restart counts as Prometheus text (with a metrics file): the
    function and its first call, the call at a restart, the call at a spent budget."""
    if metrics_file is None:
        return "", "", ""
    q = shlex.quote
    text = restart_metrics_text(run_name, supervisor)
    metrics = (
        f"metrics() {{\n  mkdir -p {q(metrics_file.rsplit('/', 1)[0])} && "
        f'printf \'{text}\' "$1" "$2" >{q(metrics_file + ".new")} && '
        f"mv {q(metrics_file + '.new')} {q(metrics_file)}\n}}\nmetrics 0 0\n"
    )
    return metrics, '  metrics "$restarts" 0\n', '    metrics "$restarts" 1\n'


def _with_exit_record(
    setup: str, attempt: str, log: str, run_name: str, node: str
) -> tuple[str, str]:
    """The setup and one attempt with the exit record: the log's line count before the
    attempt, the record written after it (a failure to write it fails no attempt)."""
    q = shlex.quote
    out = q(exit_record_path(run_name, node))
    program = q(exitrecord_path(run_name))
    before = f'  start=$(grep -c "" {q(log)} 2>/dev/null || true)\n'
    after = (
        f'  python3 {program} record {q(log)} "${{start:-0}}" "$rc" {q(node)} {out} '
        "2>/dev/null || true\n"
    )
    return f"rm -f {out}\n{setup}", before + attempt + after


def _attempt(cmd: str, log: str, pattern: str, run_name: str, follow: Follow | None) -> str:
    """One attempt of the supervisor's loop: the launcher run, its exit code in `rc`."""
    q = shlex.quote
    if follow is None:
        return f"  {cmd} >>{q(log)} 2>&1 || rc=$?\n"
    # follow_master: takeover.py's rebuild and watch, which wrap follow.py's.
    path = takeover_path(run_name) if follow.master_moves else follow_path(run_name)
    program, settings = q(path), q(follow_settings_path(run_name))
    forget = "  rm -f ~/.ssh/known_hosts\n" if follow.forget_host_keys else ""
    guard = "  owner || exit 0\n" if follow.master_moves else ""
    # follow_master: a stop ends the run's claim (a stop from another host waits for it).
    release = _release(run_name) if follow.master_moves else ""
    # follow_master: rank 0's address is the hostfile's first, which the rebuild made
    # this task's own.
    master = (
        f"  master=$(awk 'NR==1{{print $1; exit}}' {q(follow.hostfile)})\n"
        if follow.master_moves
        else ""
    )
    return (
        f"  python3 {program} rebuild {settings} >>{q(log)} 2>&1 || true\n"
        # A stop during the rebuild's wait: start nothing.
        f"  if [ -e {q(stop_marker(run_name))} ]; then {release}exit 0; fi\n"
        # follow_master: nor when another master task took the run over meanwhile.
        f"{guard}"
        f"{forget}{master}"
        f"  {cmd} >>{q(log)} 2>&1 &\n"
        "  pid=$!\n"
        f'  python3 {program} watch {settings} "$pid" >>{q(log)} 2>&1 \\\n'
        f"    || pkill -KILL -f {q(pattern)} 2>/dev/null || true\n"
        '  wait "$pid" || rc=$?\n'
    )
