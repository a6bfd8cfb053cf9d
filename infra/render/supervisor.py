"""The run's supervisor, rendered: the shell loop that restarts a crashed launcher, the
restart counts it keeps for Prometheus, and, with training.recovery.follow_moves, what it
follows (`Follow`, the settings of infra/task/follow.py) and the master task's takeover
loop (follow_master). Pure; no Pulumi, no I/O: tested directly and by golden files.

The scripts are files, readable whole: infra/task/supervisor.sh and
infra/task/takeoverloop.sh, their optional parts marked; this module works out their
values and which parts a run has, and infra/render/template.py renders them. The bytes
must not move: the supervisor is part of the launch script, an input of the launch's
resource, and the takeover loop part of the master service's spec, so a changed byte
relaunches every user's training (or restarts the master task) on upgrade. Every
variant the config can produce is a golden file (tests/unit/infra/golden/scripts/).

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

from infra.layout import IMAGE_PYTHON
from infra.render import template
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
    universal_path,
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
    module: str = ""
    """follow_master with a `-m <module>` command: the module, by which the takeover's
    watch finds the ranks (infra/task/commandranks.py); `pattern` is then a regex that
    the script ranks.py reads could never equal. In the settings only where set."""
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
            if self.module:
                data["module"] = self.module
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
    values = {
        "PROGRAM": takeover_path(run),
        "SETTINGS": follow_settings_path(run),
        "LOG_DIR": log_dir(run),
        "LOG": launcher_log(run),
        "INTERVAL_S": str(interval_s),
    }
    return template.render("takeoverloop.sh", values, {})


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
    universal: str | None = None,
) -> str:
    """The supervisor: runs the launcher `cmd`; when it exits non-zero and no stop was
    asked for, records the restart, kills the ranks left on this node (a rank blocked on
    a dead peer would hold its port), waits `delay_s` and runs it again: the training
    script resumes from the newest complete checkpoint. After `max_restarts` it records
    that the budget is spent and exits with the launcher's code (the run is then failed,
    which refresh reports and `pulumi up` relaunches). Exit 0 (the last step done, or a
    stop) ends it.

    Each optional part below is absent without its argument, so a stack that does not
    use it keeps its launch byte for byte.

    `metrics_file`: it also keeps its counts there as Prometheus text (at its start,
    each restart and a spent budget; replaced, never rewritten in place).

    `follow` (training.recovery.follow_moves): each attempt first rebuilds the hostfile
    from the tasks that answer (infra/task/follow.py `rebuild`), and the launcher runs
    in the background under `watch`, which stops it (a restart) once a hostfile address
    stops answering: the run resumes on the task Swarm moved with no `pulumi up`.

    `setup` (training.command): shell run once after the `cd`, before the loop (the
    run's directories and environment: infra/render/command.py env_setup).

    `exit_record` (training.command: the node label, `master` or the node rank): after
    each attempt its exit record (infra/task/exitrecord.py) from this attempt's lines of
    the launcher log; a new supervisor first removes the one a previous launch left.

    `universal` (rank 0's supervisor of a command whose DeepSpeed config loads universal
    checkpoints): the checkpoint dir whose newest checkpoint each attempt first makes
    universal (infra/task/universal.py); a failed conversion fails the attempt."""
    q = shlex.quote
    moves = follow is not None and follow.master_moves
    if moves:
        cmd = cmd.replace(f"--master_addr={MASTER_ADDR_SLOT}", '--master_addr="$master"')
    values = {
        "RUN_NAME": run_name,
        "LOG_DIR": q(log_dir(run_name)),
        "WORKDIR": q(workdir),
        "SETUP": setup,
        "CMD": cmd,
        "LOG": q(launcher_log(run_name)),
        "STOP": q(stop_marker(run_name)),
        "PATTERN": q(pattern),
        "MAX_RESTARTS": str(max_restarts),
        "DELAY_S": str(delay_s),
        "BUDGET_SPENT": BUDGET_SPENT,
        "RESTARTS": q(f"{log_dir(run_name)}/{RESTARTS_FILE}"),
    }
    if moves:
        values |= {"ACTIVE": q(active_path(run_name)), "LEASE": q(lease_path(run_name))}
    for part in (
        _metrics(metrics_file, run_name, supervisor) if metrics_file is not None else {},
        _follow(follow, run_name) if follow is not None else {},
        _exit_record(exit_record, run_name) if exit_record is not None else {},
        _universal(universal, run_name) if universal is not None else {},
    ):
        values |= part
    flags = {
        "metrics": metrics_file is not None,
        "follow": follow is not None,
        "forget_host_keys": follow is not None and follow.forget_host_keys,
        "master_moves": moves,
        "exit_record": exit_record is not None,
        "universal": universal is not None,
    }
    return template.render("supervisor.sh", values, flags)


def _exit_record(node: str, run_name: str) -> dict[str, str]:
    """The values of the supervisor's exit_record part: the record of `node`'s attempts
    and the program that writes it."""
    q = shlex.quote
    return {
        "EXIT_RECORD": q(exit_record_path(run_name, node)),
        "EXITRECORD_PROGRAM": q(exitrecord_path(run_name)),
        "NODE": q(node),
    }


def _universal(checkpoint_dir: str, run_name: str) -> dict[str, str]:
    """The values of the supervisor's universal part: the converter, run by the image's
    python (it runs DeepSpeed's ds_to_universal), and the run's checkpoint dir."""
    return {
        "IMAGE_PYTHON": IMAGE_PYTHON,
        "UNIVERSAL_PROGRAM": shlex.quote(universal_path(run_name)),
        "CHECKPOINT_DIR": shlex.quote(checkpoint_dir),
    }


def _metrics(metrics_file: str, run_name: str, supervisor: str) -> dict[str, str]:
    """The values of the supervisor's metrics part: the file, its folder, the file it is
    written to first, and its text as a printf format (restart_metrics_text)."""
    q = shlex.quote
    return {
        "METRICS_DIR": q(metrics_file.rsplit("/", 1)[0]),
        "METRICS_TEXT": restart_metrics_text(run_name, supervisor),
        "METRICS_NEW": q(metrics_file + ".new"),
        "METRICS_FILE": q(metrics_file),
    }


def _follow(follow: Follow, run_name: str) -> dict[str, str]:
    """The values of the supervisor's follow part: the program it runs (follow_master:
    takeover.py, which wraps follow.py), its settings and the hostfile."""
    path = takeover_path(run_name) if follow.master_moves else follow_path(run_name)
    return {
        "FOLLOW_PROGRAM": shlex.quote(path),
        "FOLLOW_SETTINGS": shlex.quote(follow_settings_path(run_name)),
        "HOSTFILE": shlex.quote(follow.hostfile),
    }
