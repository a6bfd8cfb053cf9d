"""infra.render.command: a command's launcher line, script path, rank pattern and
environment file (the whole launch per launcher and mode: the resources-dev-command*
goldens of tests/unit/infra/test_program_resources.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.command import split_command
from infra.config import Training, parse_stack_config
from infra.render.command import (
    Placement,
    RunEnv,
    command_argv,
    env_file,
    env_path,
    env_setup,
    quoted,
    rank_pattern,
    run_variables,
    script_path,
)

pytestmark = pytest.mark.unit

CODE = "/data/code/run/abc123"
PDSH = Placement("10.0.1.3", 3, None, "/data/.dss/run/hostfile")


def training(raw: dict[str, Any], tmp_path: Path, command: str, **keys: Any) -> Training:
    """The sample's training with `command` in a code dir holding train.py."""
    (tmp_path / "train.py").write_text("print(1)\n")
    raw["training"].update(code={"dir": str(tmp_path)}, command=command, **keys)
    return parse_stack_config(raw).training


def test_deepspeed_pdsh_inserts_only_its_flags(raw: dict[str, Any], tmp_path: Path) -> None:
    """pdsh: hostfile, master, launcher, ssh port, node count; then the user's line."""
    t = training(raw, tmp_path, "deepspeed --no_ssh_check train.py --deepspeed --epochs 3")
    assert command_argv(t, split_command(str(t.command)), PDSH, CODE) == [
        "deepspeed",
        "--hostfile=/data/.dss/run/hostfile",
        "--master_addr=10.0.1.3",
        "--master_port=29500",
        "--launcher=pdsh",
        "--ssh_port=2222",
        "--num_nodes=3",
        "--no_ssh_check",
        f"{CODE}/train.py",
        "--deepspeed",
        "--epochs",
        "3",
    ]


def test_deepspeed_no_ssh_gets_its_node_rank(raw: dict[str, Any], tmp_path: Path) -> None:
    """no_ssh: --no_ssh and this node's rank in place of pdsh's flags."""
    t = training(raw, tmp_path, "deepspeed train.py", launch_mode="no_ssh")
    where = Placement("10.0.1.3", 3, 2, "/data/.dss/run/hostfile")
    argv = command_argv(t, split_command("deepspeed train.py"), where, CODE)
    assert argv[4:] == ["--no_ssh", "--node_rank=2", f"{CODE}/train.py"]


def test_torchrun_inserts_only_its_flags(raw: dict[str, Any], tmp_path: Path) -> None:
    """torchrun: nnodes, procs per node, node rank, master; the user's options after."""
    t = training(raw, tmp_path, "torchrun --max_restarts 0 train.py --lr 1")
    where = Placement("10.0.1.3", 3, 1, "/data/.dss/run/hostfile")
    assert command_argv(t, split_command(str(t.command)), where, CODE) == [
        "torchrun",
        "--nnodes=3",
        "--nproc_per_node=8",
        "--node_rank=1",
        "--master_addr=10.0.1.3",
        "--master_port=29500",
        "--max_restarts",
        "0",
        f"{CODE}/train.py",
        "--lr",
        "1",
    ]


def test_python_m_torch_distributed_run_runs_torchrun(raw: dict[str, Any], tmp_path: Path) -> None:
    """`python -m torch.distributed.run` runs as the image's torchrun."""
    t = training(raw, tmp_path, "python -m torch.distributed.run train.py")
    where = Placement("10.0.1.3", 3, 0, "/data/.dss/run/hostfile")
    argv = command_argv(t, split_command(str(t.command)), where, CODE)
    assert argv[0] == "torchrun" and argv[-1] == f"{CODE}/train.py", argv


def test_plain_python_under_deepspeed_has_no_local_rank(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """A plain script under deepspeed gets --no_local_rank: it did not ask for it."""
    t = training(raw, tmp_path, "python -u train.py --x")
    argv = command_argv(t, split_command(str(t.command)), PDSH, CODE)
    assert argv[7:] == ["--no_local_rank", f"{CODE}/train.py", "--x"], argv


def test_plain_python_module_under_deepspeed(raw: dict[str, Any], tmp_path: Path) -> None:
    """A module under deepspeed runs with --module, its name as typed."""
    t = training(raw, tmp_path, "python -m pkg.train")
    argv = command_argv(t, split_command(str(t.command)), PDSH, CODE)
    assert argv[7:] == ["--no_local_rank", "--module", "pkg.train"], argv


def test_plain_python_module_under_torchrun(raw: dict[str, Any], tmp_path: Path) -> None:
    """A module under torchrun runs with its -m flag."""
    t = training(raw, tmp_path, "python -m pkg.train --a", launcher="torchrun")
    where = Placement("10.0.1.3", 3, 0, "/data/.dss/run/hostfile")
    argv = command_argv(t, split_command(str(t.command)), where, CODE)
    assert argv[6:] == ["-m", "pkg.train", "--a"], argv


def test_fork_server_runs_the_runner_through_its_client(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """fork_server: the runner through the client, as for training.script."""
    t = training(raw, tmp_path, "deepspeed train.py", fork_server=True)
    argv = command_argv(t, split_command("deepspeed train.py"), PDSH, CODE)
    assert argv[:4] == ["/data/.dss/run/bin/python", "-u", "-m", "deepspeed.launcher.runner"]


def test_script_path_is_absolute_in_the_code_dir() -> None:
    """A relative script becomes its path in the code dir; an absolute one stays."""
    assert script_path(split_command("torchrun sub/t.py"), CODE) == f"{CODE}/sub/t.py"
    assert script_path(split_command("torchrun /opt/x.py"), CODE) == "/opt/x.py"


def test_script_path_without_code_dir_is_the_images() -> None:
    """Without a code dir a relative script is the image's."""
    assert script_path(split_command("torchrun t.py"), None) == "/opt/dss/t.py"


def test_rank_pattern_of_a_module_never_starts_with_a_dash() -> None:
    """A module's pattern is a regex of `-m`/`--module` and the escaped name."""
    pattern = rank_pattern(split_command("python -m pkg.train"), CODE)
    assert pattern == r"(-m|--module) pkg\.train( |$)"


def test_env_path_per_supervisor() -> None:
    """One env file per launch: beside the hostfile, suffixed per node rank."""
    assert (env_path("run"), env_path("run", 1)) == ("/data/.dss/run/env", "/data/.dss/run/env-1")


def test_quoted_reads_back_inside_double_quotes() -> None:
    """A value is escaped for DeepSpeed's double quotes."""
    assert quoted('a "b" $c `d` \\e') == 'a \\"b\\" \\$c \\`d\\` \\\\e'


def test_env_file_order_and_secrets() -> None:
    """The code dir's file verbatim, training.env quoted, the run's variables, then each
    secret read on the node (never its value)."""
    text = env_file(
        {"DSS_RUN_VAR": "/x"},
        RunEnv("A=$HOME\n\nB=2\n", {"C": "say $x"}, {"TOKEN": "hf_token"}),
    )
    assert text == (
        "A=$HOME\nB=2\nC=say \\$x\nDSS_RUN_VAR=/x\nTOKEN=$(cat /run/secrets/hf_token)\n"
    )


def test_run_variables_per_node(raw: dict[str, Any], tmp_path: Path) -> None:
    """The run's directories and files, the nodes, and a per-node launch's node rank."""
    t = training(raw, tmp_path, "torchrun train.py")
    env = run_variables(t, CODE, ["10.0.1.3", "10.0.1.4"], 1, "/opt/dss/ds_config.json")
    assert env == {
        "DSS_CODE_DIR": CODE,
        "DSS_CHECKPOINT_DIR": "/data/checkpoints/run",
        "DSS_LOG_DIR": "/data/logs/run",
        "DSS_OUTPUT_DIR": "/data/outputs/run",
        "DSS_METRICS_FILE": "/data/logs/run/metrics.jsonl",
        "DSS_NODES": "10.0.1.3,10.0.1.4",
        "DSS_NODE_RANK": "1",
        "DSS_HOSTFILE": "/data/.dss/run/hostfile",
        "DSS_STEPS": "1000",
        "DSS_CKPT_EVERY": "50",
        "DSS_DS_CONFIG": "/opt/dss/ds_config.json",
    }


def test_env_setup_under_pdsh_hands_the_file_to_deepspeed(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """pdsh: the runner is told the file (DS_ENV_FILE), which it exports on every node of
    a hostfile of more than one; the supervisor exports it too, for a one-node hostfile,
    whose ranks the runner starts with its own environment."""
    t = training(raw, tmp_path, "deepspeed train.py")
    setup = env_setup(t, "/data/.dss/run/env", run_variables(t, CODE, [], None, "x"), True)
    lines = setup.splitlines()
    assert lines[:2] == [
        "mkdir -p /data/checkpoints/run /data/outputs/run",
        "export DS_ENV_FILE=/data/.dss/run/env",
    ]
    ssh_less = env_setup(t, "/data/.dss/run/env", run_variables(t, CODE, [], 0, "x"), False)
    assert lines[2:] == ssh_less.splitlines()[1:] and "done </data/.dss/run/env" in setup


def test_env_setup_ssh_less_exports_as_deepspeed_would(raw: dict[str, Any], tmp_path: Path) -> None:
    """SSH-less, the supervisor's loop gives each line the value DeepSpeed's
    `export KEY="VALUE"` would (run here with sh)."""
    t = training(raw, tmp_path, "torchrun train.py")
    path = tmp_path / "env"
    path.write_text(
        env_file({}, RunEnv("GREETING=hi $WHO\nSPACED=a b", {"QUOTED": 'a "b" $c'}, {}))
        + "UNSET=x$NOPE"
    )
    run_vars = {"DSS_CHECKPOINT_DIR": str(tmp_path / "ck"), "DSS_OUTPUT_DIR": str(tmp_path / "o")}
    setup = env_setup(t, str(path), run_vars, False)
    script = f'set -u\n{setup}printf \'%s|\' "$GREETING" "$SPACED" "$QUOTED" "$UNSET"\n'
    env = {"PATH": os.environ["PATH"], "WHO": "you"}
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == 'hi you|a b|a "b" $c|x|', out.stderr
    assert (tmp_path / "ck").is_dir() and (tmp_path / "o").is_dir()
