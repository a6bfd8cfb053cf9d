"""What a training.command's script sees in its environment, as data: the run's own
`DSS_*` variables (infra/render/command.py `run_variables` writes them; a unit test
holds its keys equal to `RUN_VARIABLES`), the launchers' standard variables, and what
the job itself adds. docs/jobs.md's table "What a script sees" is generated from it
(`python -m infra.render.scriptenv --update-docs`; a unit test holds the page equal).

The launchers' variables are read from the stored sources of DeepSpeed 0.17.6
(`deepspeed/launcher/launch.py`) and torch's `torch/distributed/run.py` (its elastic
agent's worker environment); they are not yet checked on the image's own versions.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.layout import IMAGE_HOME
from infra.render.code import code_path
from infra.render.command import run_dirs
from infra.render.runfiles import log_dir

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
START, END = "<!-- script-env:start -->", "<!-- script-env:end -->"

ALL = "all"
PER_NODE = "no_ssh, torchrun"
DEEPSPEED = "deepspeed (pdsh, no_ssh)"
TORCHRUN = "torchrun"
RUN = "<job>"


@dataclass(frozen=True)
class Variable:
    """One row of the table."""

    name: str
    set_by: str
    launchers: str
    meaning: str


_DIRS = run_dirs(RUN)
RUN_VARIABLES: Sequence[Variable] = (
    Variable(
        "DSS_CODE_DIR",
        "the program",
        ALL,
        f"the synced code dir, `{code_path(RUN, '<digest>')}` (without one, the image's "
        f"`{IMAGE_HOME}`): every rank's working directory, so a path relative to the "
        "script's files works",
    ),
    Variable(
        "DSS_CHECKPOINT_DIR",
        "the program",
        ALL,
        f"`{_DIRS['DSS_CHECKPOINT_DIR']}` on the shared data dir, writable, kept across "
        "relaunches: save (`save_checkpoint`) and load here to resume",
    ),
    Variable(
        "DSS_LOG_DIR",
        "the program",
        ALL,
        f"`{_DIRS['DSS_LOG_DIR']}`: the launcher log and the exit records",
    ),
    Variable(
        "DSS_OUTPUT_DIR",
        "the program",
        ALL,
        f"`{_DIRS['DSS_OUTPUT_DIR']}` on the shared data dir, writable: the script's outputs",
    ),
    Variable(
        "DSS_METRICS_FILE",
        "the program",
        ALL,
        f"`{log_dir(RUN)}/metrics.jsonl`: optional, one JSON line per step "
        '(`{"step": N, "loss": X}`) for `job list`\'s step and loss',
    ),
    Variable(
        "DSS_NODES",
        "the program",
        ALL,
        "the hostfile's addresses, comma-separated, in node-rank order",
    ),
    Variable(
        "DSS_NODE_RANK",
        "the program",
        PER_NODE,
        "this node's rank (one launch per node); under pdsh use the launcher's own",
    ),
    Variable("DSS_HOSTFILE", "the program", ALL, "the hostfile (`<address> slots=<n>`)"),
    Variable("DSS_STEPS", "the program", ALL, "`training.steps` (read by the image's train.py)"),
    Variable(
        "DSS_CKPT_EVERY",
        "the program",
        ALL,
        "`training.checkpoint_every` (read by the image's train.py)",
    ),
    Variable(
        "DSS_DS_CONFIG",
        "the program",
        ALL,
        "the stack's DeepSpeed config file (`training.ds_config`), for a script that "
        "does not bring its own",
    ),
)

LAUNCHER_VARIABLES: Sequence[Variable] = (
    Variable("RANK", "the launcher", ALL, "the rank's global rank"),
    Variable("LOCAL_RANK", "the launcher", ALL, "the rank on its node"),
    Variable("WORLD_SIZE", "the launcher", ALL, "the number of ranks"),
    Variable("MASTER_ADDR", "the launcher", ALL, "rank 0's node address"),
    Variable("MASTER_PORT", "the launcher", ALL, "`training.master_port`"),
    Variable("CROSS_RANK", "the launcher", DEEPSPEED, "the node's rank"),
    Variable("CROSS_SIZE", "the launcher", DEEPSPEED, "the number of nodes"),
    Variable("LOCAL_SIZE", "the launcher", DEEPSPEED, "the ranks on this node"),
    Variable(
        "--local_rank=N",
        "the launcher",
        DEEPSPEED,
        "an argument, not a variable: appended to a `deepspeed` command's script "
        "arguments (not to a plain `python` command's, run with `--no_local_rank`)",
    ),
    Variable("GROUP_RANK", "the launcher", TORCHRUN, "the node's rank"),
    Variable("GROUP_WORLD_SIZE", "the launcher", TORCHRUN, "the number of nodes"),
    Variable("LOCAL_WORLD_SIZE", "the launcher", TORCHRUN, "the ranks on this node"),
    Variable("TORCHELASTIC_*", "the launcher", TORCHRUN, "torchrun's own (restart count, run id)"),
)

JOB_VARIABLES: Sequence[Variable] = (
    Variable(
        "`.deepspeed_env`",
        "you (a file in the code dir)",
        ALL,
        "`KEY=VALUE` lines, as DeepSpeed documents them; every rank sees them",
    ),
    Variable("`training.env`", "you (the job's keys)", ALL, "every rank sees them"),
    Variable(
        "`training.secret_env`",
        "you (`VAR: <secret name>`)",
        ALL,
        "a secret of the stack (a job's: its cluster's), read on the node; never in a "
        "file, the state or a log",
    ),
)


def table() -> str:
    """The docs' table: the run's variables, the launchers', then what the job adds
    (later sources win: `.deepspeed_env`, `training.env`, the run's, the secrets)."""
    rows = [*RUN_VARIABLES, *LAUNCHER_VARIABLES, *JOB_VARIABLES]
    lines = ["| variable | set by | launchers | meaning |", "| --- | --- | --- | --- |"]
    for v in rows:
        name = v.name if v.name.startswith("`") else f"`{v.name}`"
        lines.append(f"| {name} | {v.set_by} | {v.launchers} | {v.meaning} |")
    return "\n".join(lines) + "\n"


def with_table(text: str) -> str:
    """`text` with the generated table between its markers."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}{END}{tail}"


def update_docs(path: Path = DOCS_PATH) -> None:
    path.write_text(with_table(path.read_text()))


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-docs"]:
        print("usage: python -m infra.render.scriptenv --update-docs", file=sys.stderr)
        sys.exit(2)
    update_docs()
