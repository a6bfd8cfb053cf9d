"""Where a run lives in its tasks: the files on the shared /data that the launch writes
and the supervisor, the probe and the stop read (the hostfile's folder, LAUNCH_DIR/<run>,
and the run's logs), and the programs from infra/task/ the launch copies there. Pure
path arithmetic and file reads of this checkout; no Pulumi.
"""

from __future__ import annotations

from pathlib import Path

from infra.layout import DATA_MOUNT, IMAGE_PYTHON, LAUNCH_DIR

RESTARTS_FILE = "restarts.jsonl"
"""Per run, under /data/logs/<run>: one JSON line per automatic restart or spent budget."""
BUDGET_SPENT = "budget_spent"

METRICS_SUBDIR = ".dss/metrics"
"""Under the data dir: the supervisors' restart counts as Prometheus text files, read by
the node exporters' textfile collector (monitoring.enabled)."""


def restart_metrics_file(run_name: str, node_rank: int | None = None) -> str:
    """In the task: the file a launch's supervisor keeps its counts in (one per
    supervisor: the textfile collector refuses one series in two files)."""
    suffix = "" if node_rank is None else f".{node_rank}"
    return f"{DATA_MOUNT}/{METRICS_SUBDIR}/{run_name}{suffix}.prom"


def supervisor_prefix(run_name: str) -> str:
    """What every supervisor file of the run starts with (its command line, to pgrep)."""
    return f"{LAUNCH_DIR}/{run_name}/supervise"


def supervisor_path(run_name: str, node_rank: int | None = None) -> str:
    """The supervisor file of a launch (one per node for SSH-less launches)."""
    suffix = "" if node_rank is None else f"-{node_rank}"
    return f"{supervisor_prefix(run_name)}{suffix}.sh"


def stop_marker(run_name: str) -> str:
    """Present while a stop is asked for: the supervisor restarts nothing."""
    return f"{LAUNCH_DIR}/{run_name}/stop"


def follow_path(run_name: str) -> str:
    """The run's follow program (infra/task/follow.py), beside the hostfile."""
    return f"{LAUNCH_DIR}/{run_name}/follow.py"


def takeover_path(run_name: str) -> str:
    """follow_master: the takeover program (infra/task/takeover.py), beside follow.py."""
    return f"{LAUNCH_DIR}/{run_name}/takeover.py"


def universal_path(run_name: str) -> str:
    """A command whose DeepSpeed config loads universal checkpoints: the program that
    makes the newest one universal before each start (infra/task/universal.py)."""
    return f"{LAUNCH_DIR}/{run_name}/universal.py"


def forkserver_path(run_name: str) -> str:
    """training.fork_server: the client the launcher runs in place of python
    (infra/task/forkserver.py), beside the hostfile. Named `python`, as it stands in
    for it: it is the launchers' `sys.executable`."""
    return f"{LAUNCH_DIR}/{run_name}/bin/python"


def forkserver_program() -> str:
    """forkserver.py as the launch writes it: the image's python in its first line,
    with -S (the client needs only the standard library, and starts in milliseconds)."""
    return f"#!{IMAGE_PYTHON} -S\n" + follow_program("forkserver.py")


def ranks_program() -> str:
    """infra/task/ranks.py: which processes are the ranks (the stop signals them first),
    without its module docstring (the stop script carries the code alone)."""
    text = follow_program("ranks.py")
    return text[text.index('"""\n', 3) + 4 :].lstrip("\n")


def ranks_path(run_name: str) -> str:
    """follow_master: ranks.py beside takeover.py, which imports it (training.command:
    beside commandranks.py)."""
    return f"{LAUNCH_DIR}/{run_name}/ranks.py"


def command_ranks_path(run_name: str) -> str:
    """training.command: the stop's rank finder (infra/task/commandranks.py), beside
    the hostfile on the shared data dir, so every node's stop runs the same file."""
    return f"{LAUNCH_DIR}/{run_name}/commandranks.py"


def follow_settings_path(run_name: str) -> str:
    return f"{LAUNCH_DIR}/{run_name}/follow.json"


def active_path(run_name: str) -> str:
    """training.recovery.follow_master: one line, `<task id> <spec digest> <takeovers>`,
    of the task whose supervisor runs the run; present from a launch until its
    supervisor ends by itself (the last step, a spent budget), so a master task that
    starts again while it is there takes the run over (infra/task/follow.py)."""
    return f"{LAUNCH_DIR}/{run_name}/active"


def lease_path(run_name: str) -> str:
    """training.recovery.follow_master: touched by the supervisor's watch while every
    hostfile address answers; a takeover waits until it is older than `lease_s`."""
    return f"{LAUNCH_DIR}/{run_name}/lease"


def follow_program(name: str = "follow.py") -> str:
    """The text of infra/task/follow.py (or `name` beside it: takeover.py), which the
    launch script writes into the task."""
    return (Path(__file__).resolve().parents[1] / "task" / name).read_text()


EXIT_PREFIX = "exit."


def exit_record_path(run_name: str, node: str) -> str:
    """training.command: a supervisor's exit record of its last attempt
    (infra/task/exitrecord.py), `exit.<node>.json` in the run's log dir; `node` is
    `master` (pdsh) or the node rank."""
    return f"{log_dir(run_name)}/{EXIT_PREFIX}{node}.json"


def exitrecord_path(run_name: str) -> str:
    """training.command: the exit record program (infra/task/exitrecord.py), beside the
    hostfile."""
    return f"{LAUNCH_DIR}/{run_name}/exitrecord.py"


def log_dir(run_name: str) -> str:
    return f"{DATA_MOUNT}/logs/{run_name}"


def launcher_log(run_name: str) -> str:
    return f"{log_dir(run_name)}/launcher.log"
