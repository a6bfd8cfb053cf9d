"""Pure renderers of a `training.command` launch: the launcher command line with only
the launcher's own flags inserted, the script's absolute path in the synced code dir, the
rank pattern the stop and the probe look for, and the launch's environment file with
the shell that hands it to the ranks. No Pulumi, no I/O: tested directly and by golden
files. Used only where `training.command` is set; a launch of `training.script` is
infra/render/launch.py's alone.

The environment's shell is a file, infra/task/envsetup.sh (rendered by
infra/render/template.py), run by the supervisor before its loop: its bytes are part of
the launch script, a resource input, so a changed byte relaunches every command run on
upgrade.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from posixpath import join

from infra.command import Command
from infra.config import Training
from infra.layout import DATA_MOUNT, IMAGE_HOME, LAUNCH_DIR, SECRETS_DIR
from infra.render import template
from infra.render.runfiles import forkserver_path, log_dir

ENV_FILE = "env"
"""Beside the hostfile: the launch's environment file (`env`, `env-<node rank>`)."""


def workdir(code_path: str | None) -> str:
    """Every rank's working directory: the synced code dir, else the image's code."""
    return code_path or IMAGE_HOME


def script_path(cmd: Command, code_path: str | None) -> str:
    """The command's target as the ranks run it: a relative script becomes its absolute
    path in the code dir (the only change the script sees, and what keeps the stop's
    pattern unique); a module or an absolute path stays as typed."""
    if cmd.module or cmd.target.startswith("/"):
        return cmd.target
    return join(workdir(code_path), cmd.target)


def rank_pattern(cmd: Command, code_path: str | None) -> str:
    """What `pkill -f`/`pgrep -f` look for: the script's absolute path, or for a module
    `-m <module>` / `--module <module>` as a regex (never starting with `-`, which pkill
    would read as an option; a bare module name could match the supervisor's file)."""
    if not cmd.module:
        return script_path(cmd, code_path)
    return f"(-m|--module) {re.escape(cmd.target)}( |$)"


def env_path(run_name: str, node_rank: int | None = None) -> str:
    """The launch's environment file (one per supervisor, as its file)."""
    suffix = "" if node_rank is None else f"-{node_rank}"
    return f"{LAUNCH_DIR}/{run_name}/{ENV_FILE}{suffix}"


def run_dirs(run_name: str) -> dict[str, str]:
    """The run's directories on the shared data dir, by the variable that names them."""
    return {
        "DSS_CHECKPOINT_DIR": f"{DATA_MOUNT}/checkpoints/{run_name}",
        "DSS_LOG_DIR": log_dir(run_name),
        "DSS_OUTPUT_DIR": f"{DATA_MOUNT}/outputs/{run_name}",
    }


@dataclass(frozen=True)
class Placement:
    """Where one launcher of the command runs: what it is told of the cluster."""

    master_addr: str
    nnodes: int
    node_rank: int | None
    """None: the one SSH-based launch on the master (pdsh)."""
    hostfile: str
    """The hostfile's path in the task."""


def command_argv(t: Training, cmd: Command, where: Placement, code_path: str | None) -> list[str]:
    """The launcher command line: the command's launcher with only its own flags
    inserted before the user's options, then the script (absolute) and its arguments.
    A plain python script runs under `training.launcher` (deepspeed with
    `--no_local_rank`: the script did not ask for `--local_rank`)."""
    target = script_path(cmd, code_path)
    launcher = t.launcher if cmd.launcher == "python" else cmd.launcher
    rank = 0 if where.node_rank is None else where.node_rank
    user = [] if cmd.launcher == "python" else list(cmd.options)
    if launcher == "torchrun":
        wrapped = ["-m"] if cmd.launcher == "python" and cmd.module else []
        return [
            "torchrun",
            f"--nnodes={where.nnodes}",
            f"--nproc_per_node={t.ranks_per_node}",
            f"--node_rank={rank}",
            f"--master_addr={where.master_addr}",
            f"--master_port={t.master_port}",
            *user,
            *wrapped,
            target,
            *cmd.args,
        ]
    runner = (
        [forkserver_path(t.run_name), "-u", "-m", "deepspeed.launcher.runner"]
        if t.fork_server
        else ["deepspeed"]
    )
    argv = [
        *runner,
        f"--hostfile={where.hostfile}",
        f"--master_addr={where.master_addr}",
        f"--master_port={t.master_port}",
    ]
    if t.launch_mode == "no_ssh":
        argv += ["--no_ssh", f"--node_rank={rank}"]
    else:
        argv += [f"--launcher={t.launch_mode}", f"--ssh_port={t.sshd_port}"]
        argv.append(f"--num_nodes={where.nnodes}")
    if cmd.launcher == "python":
        user = ["--no_local_rank", *(["--module"] if cmd.module else [])]
    return [*argv, *user, target, *cmd.args]


def quoted(value: str) -> str:
    """`value` as text inside double quotes that reads back as `value` (DeepSpeed exports
    each env file line as `KEY="VALUE"`)."""
    return re.sub(r'([\\"$`])', r"\\\1", value)


@dataclass(frozen=True)
class RunEnv:
    """What the launch's environment file holds, besides the run's own variables."""

    deepspeed_env: str = ""
    """The code dir's `.deepspeed_env`, verbatim (checked by the config rules)."""
    env: Mapping[str, str] | None = None
    """training.env (quoted in the file)."""
    secret_env: Mapping[str, str] | None = None
    """training.secret_env: variable -> secret name (read on the node, never a value)."""


def run_variables(
    t: Training, code_path: str | None, nodes: Sequence[str], node_rank: int | None, ds_config: str
) -> dict[str, str]:
    """The DSS_* variables every rank of a command sees (the docs' table); `nodes`: the
    hostfile's addresses in node-rank order."""
    env = {
        "DSS_CODE_DIR": workdir(code_path),
        **run_dirs(t.run_name),
        "DSS_METRICS_FILE": f"{log_dir(t.run_name)}/metrics.jsonl",
        "DSS_NODES": ",".join(nodes),
    }
    if node_rank is not None:
        env["DSS_NODE_RANK"] = str(node_rank)
    # What the image's train.py reads when its options are not on its command line.
    env |= {
        "DSS_HOSTFILE": f"{LAUNCH_DIR}/{t.run_name}/hostfile",
        "DSS_STEPS": str(t.steps),
        "DSS_CKPT_EVERY": str(t.checkpoint_every),
        "DSS_DS_CONFIG": ds_config,
    }
    return env


def env_file(run_vars: Mapping[str, str], extra: RunEnv) -> str:
    """The launch's environment file: `KEY=VALUE` lines as DeepSpeed's runner reads its
    `.deepspeed_env` (split at the first `=`, the value exported in double quotes; no
    comment or blank line, which it refuses). Later lines win: the code dir's file,
    then training.env, the run's variables, the secrets."""
    lines = [line for line in extra.deepspeed_env.splitlines() if line]
    lines += [f"{k}={quoted(v)}" for k, v in (extra.env or {}).items()]
    lines += [f"{k}={quoted(v)}" for k, v in run_vars.items()]
    lines += [f"{k}=$(cat {SECRETS_DIR}/{name})" for k, name in (extra.secret_env or {}).items()]
    return "\n".join(lines) + "\n"


def env_setup(t: Training, path: str, run_vars: Mapping[str, str], pdsh: bool) -> str:
    """Shell the supervisor runs before its loop: the run's directories made, and the
    environment file handed on. The supervisor exports each line itself, as DeepSpeed's
    runner would; under pdsh the runner also exports the file on every node it reaches
    (`DS_ENV_FILE`, an absolute path it reads as it is), which it does only for a
    hostfile of more than one node. So the ranks see the same values under every
    launcher and node count."""
    q = shlex.quote
    dirs = " ".join(q(run_vars[k]) for k in ("DSS_CHECKPOINT_DIR", "DSS_OUTPUT_DIR"))
    values = {"DIRS": dirs, "ENV_FILE": q(path)}
    return template.render(
        "envsetup.sh", values, {"ds_env_file": pdsh and t.launcher == "deepspeed"}
    )
