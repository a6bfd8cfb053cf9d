"""infra.config.rules.command: each rule with its exact message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import problems, warnings_of

pytestmark = pytest.mark.unit

TUTORIAL = "deepspeed train.py --deepspeed --deepspeed_config ds_config.json"
# 3 hosts x 8 GPUs: world size 24.
GOOD_DS = {"train_batch_size": 48, "train_micro_batch_size_per_gpu": 2}


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A code dir in the tutorial's shape: the script and its ds_config.json beside it."""
    (tmp_path / "train.py").write_text("print('step')\n")
    (tmp_path / "ds_config.json").write_text(json.dumps(GOOD_DS))
    return tmp_path


def with_command(raw: dict[str, Any], code: Path, command: Any = TUTORIAL) -> dict[str, Any]:
    """raw whose job is `command` in the code dir `code`."""
    raw["training"] = {**raw["training"], "code": {"dir": str(code)}, "command": command}
    return raw


def test_tutorial_command_passes(raw: dict[str, Any], code: Path) -> None:
    """A command whose script and config are in the code dir is accepted."""
    cfg = parse_stack_config(with_command(raw, code))
    assert cfg.training.command == TUTORIAL and cfg.warnings() == []


def test_command_sets_the_launcher(raw: dict[str, Any], code: Path) -> None:
    """A torchrun command makes the run's launcher torchrun where none is given."""
    cfg = parse_stack_config(with_command(raw, code, "torchrun train.py"))
    assert cfg.training.launcher == "torchrun"


def test_plain_script_keeps_the_configured_launcher(raw: dict[str, Any], code: Path) -> None:
    """A plain python script runs under training.launcher as configured."""
    raw = with_command(raw, code, ["python", "train.py"])
    raw["training"]["launcher"] = "torchrun"
    assert parse_stack_config(raw).training.launcher == "torchrun"


def test_owned_option_is_refused_at_config_time(raw: dict[str, Any], code: Path) -> None:
    """An option the program owns is refused naming the key and the value."""
    command = "deepspeed --num_nodes=2 train.py"
    assert problems(with_command(raw, code, command)) == [
        "training.command: deepspeed option '--num_nodes=2' is the program's (set "
        "training.nodes); allowed: --account, --bind_core_list, --bind_cores_to_rank, "
        "--comment, --enable_each_rank_log, --module, --no_local_rank, --no_python, "
        f"--no_ssh_check, --save_pid (got {command!r})"
    ]


def test_command_with_script_is_refused(raw: dict[str, Any], code: Path) -> None:
    """A command with training.script is refused: the command holds the script."""
    raw = with_command(raw, code)
    raw["training"]["script"] = "train.py"
    assert problems(raw) == [
        f"training.script: 'train.py' with training.command {TUTORIAL!r}; allowed: the "
        "script and its arguments in the command alone (unset training.script)"
    ]


def test_command_with_args_is_refused(raw: dict[str, Any], code: Path) -> None:
    """A command with training.args is refused."""
    raw = with_command(raw, code)
    raw["training"]["args"] = ["--x"]
    assert problems(raw) == [
        f"training.args: ['--x'] with training.command {TUTORIAL!r}; allowed: the script "
        "and its arguments in the command alone (unset training.args)"
    ]


def test_contradicting_launcher_is_refused(raw: dict[str, Any], code: Path) -> None:
    """training.launcher other than the command's launcher is refused naming both."""
    raw = with_command(raw, code, "python -m torch.distributed.run train.py")
    raw["training"]["launcher"] = "deepspeed"
    assert problems(raw) == [
        "training.launcher: 'deepspeed' but training.command runs 'python -m "
        "torch.distributed.run'; allowed: 'torchrun' or unset (the command's launcher is "
        "the run's)"
    ]


def test_agreeing_launcher_passes(raw: dict[str, Any], code: Path) -> None:
    """training.launcher equal to the command's is accepted."""
    raw = with_command(raw, code, "torchrun train.py")
    raw["training"]["launcher"] = "torchrun"
    assert parse_stack_config(raw).training.launcher == "torchrun"


def test_script_missing_from_code_dir(raw: dict[str, Any], code: Path) -> None:
    """A command whose script is not in the code dir is refused, naming the files."""
    assert problems(with_command(raw, code, "torchrun main.py")) == [
        f"training.command: script 'main.py' is not a file of training.code.dir {str(code)!r} "
        "(excludes applied); allowed: one of its files, e.g. train.py"
    ]


def test_script_leaving_the_code_dir(raw: dict[str, Any], code: Path) -> None:
    """A script path with `..` is refused."""
    assert problems(with_command(raw, code, "torchrun ../train.py")) == [
        f"training.command: script '../train.py' leaves training.code.dir; allowed: a path "
        f"inside {str(code)!r}, or an absolute path in the image"
    ]


def test_module_is_not_looked_for(raw: dict[str, Any], code: Path) -> None:
    """A module may be the image's: it is not looked for in the code dir."""
    cfg = parse_stack_config(with_command(raw, code, "python -m mypkg.train"))
    assert cfg.training.parsed_command is not None and cfg.training.parsed_command.module


def test_training_script_unchecked_with_command(raw: dict[str, Any], code: Path) -> None:
    """With a command, training.script's default (a path in the image) is no error."""
    cfg = parse_stack_config(with_command(raw, code))
    assert cfg.training.script == "/opt/dss/train.py"


def test_ds_config_file_batch_not_divisible(raw: dict[str, Any], code: Path) -> None:
    """A batch size the world size cannot divide is refused naming the file and key."""
    (code / "ds_config.json").write_text(json.dumps({"train_batch_size": 100}))
    assert problems(with_command(raw, code)) == [
        f"{code}/ds_config.json (--deepspeed_config 'ds_config.json' of training.command) "
        "key train_batch_size: 100 is not a multiple of world size 24 (3 training hosts x 8 "
        "ranks per node) = 24; allowed: a multiple of 24"
    ]


def test_ds_config_file_other_rules_run(raw: dict[str, Any], code: Path) -> None:
    """The file passes the other training.ds_config rules too (here: precision)."""
    ds = {**GOOD_DS, "fp16": {"enabled": True}, "bf16": {"enabled": True}}
    (code / "ds_config.json").write_text(json.dumps(ds))
    assert problems(with_command(raw, code)) == [
        f"{code}/ds_config.json (--deepspeed_config 'ds_config.json' of training.command): "
        "fp16.enabled and bf16.enabled are both true; allowed: at most one of them"
    ]


def test_ds_config_file_warnings(raw: dict[str, Any], code: Path) -> None:
    """The file's warnings show in the preview, naming the file and key."""
    ds = {**GOOD_DS, "zero_optimization": {"stage": 1, "offload_param": {"device": "cpu"}}}
    (code / "ds_config.json").write_text(json.dumps(ds))
    assert warnings_of(with_command(raw, code)) == [
        f"{code}/ds_config.json (--deepspeed_config 'ds_config.json' of training.command) key "
        "zero_optimization.offload_param: offloads to 'cpu' at ZeRO stage 1; DeepSpeed "
        "offloads parameters only at stage 3 and ignores it here"
    ]


def test_ds_config_file_missing(raw: dict[str, Any], code: Path) -> None:
    """A --deepspeed_config the code dir does not hold is refused."""
    (code / "ds_config.json").unlink()
    (code / "other.json").write_text("{}")
    assert problems(with_command(raw, code)) == [
        "training.command: --deepspeed_config 'ds_config.json' of training.command is not a "
        f"file of training.code.dir {str(code)!r} (every rank starts in the code dir, where "
        "DeepSpeed opens it; excludes applied); allowed: a JSON file beside the script, e.g. "
        "other.json"
    ]


def test_ds_config_file_not_json(raw: dict[str, Any], code: Path) -> None:
    """A config file that is not JSON is refused naming it and the parse error."""
    (code / "ds_config.json").write_text("{train_batch_size: 8}")
    assert problems(with_command(raw, code)) == [
        f"{code}/ds_config.json (--deepspeed_config 'ds_config.json' of training.command): "
        "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)); allowed: a DeepSpeed JSON config"
    ]


def test_ds_config_absolute_is_not_read(raw: dict[str, Any], code: Path) -> None:
    """An absolute --deepspeed_config is the task's file: not read here."""
    command = "deepspeed train.py --deepspeed_config /opt/dss/ds_config.json"
    assert parse_stack_config(with_command(raw, code, command)).training.command == command


def test_deepspeed_env_good(raw: dict[str, Any], code: Path) -> None:
    """`.deepspeed_env` with KEY=VALUE lines (shell text, unquoted) passes."""
    (code / ".deepspeed_env").write_text('FOO=1\nBAR=a b\nPATHS=/x:$PATH\nQ=say \\"hi\\"')
    assert parse_stack_config(with_command(raw, code)).training.code.dir == str(code)


def test_deepspeed_env_blank_line(raw: dict[str, Any], code: Path) -> None:
    """A blank line, on which DeepSpeed's runner raises, is refused naming file and line."""
    (code / ".deepspeed_env").write_text("FOO=1\n\n")
    assert problems(with_command(raw, code)) == [
        f"{code}/.deepspeed_env line 2: '' has no '=' (DeepSpeed's runner raises on it; a "
        "blank line too); allowed: KEY=VALUE lines only, no blank or comment lines"
    ]


def test_deepspeed_env_bad_name(raw: dict[str, Any], code: Path) -> None:
    """A key that is no variable name (a comment) is refused."""
    (code / ".deepspeed_env").write_text("# note=x\n")
    assert problems(with_command(raw, code)) == [
        f"{code}/.deepspeed_env line 1: '# note=x' names '# note'; allowed: a variable name "
        "([A-Za-z_][A-Za-z0-9_]*) before '='"
    ]


def test_deepspeed_env_launcher_variable(raw: dict[str, Any], code: Path) -> None:
    """A variable the launcher sets per rank is refused."""
    (code / ".deepspeed_env").write_text("RANK=0\n")
    (message,) = problems(with_command(raw, code))
    assert message.startswith(
        f"{code}/.deepspeed_env line 1: 'RANK=0' sets RANK, which the launcher sets per rank"
    )


def test_deepspeed_env_spaces_around_value(raw: dict[str, Any], code: Path) -> None:
    """Spaces around a value are refused: DeepSpeed strips them, a shell would not."""
    (code / ".deepspeed_env").write_text("FOO= 1\n")
    assert problems(with_command(raw, code)) == [
        f"{code}/.deepspeed_env line 1: 'FOO= 1' has spaces around its value (DeepSpeed "
        "strips them); allowed: none"
    ]


def test_deepspeed_env_quoted_value(raw: dict[str, Any], code: Path) -> None:
    """A quoted value is refused: DeepSpeed's own double quotes would end at it."""
    (code / ".deepspeed_env").write_text('FOO="a b"\n')
    (message,) = problems(with_command(raw, code))
    assert message.startswith(f'{code}/.deepspeed_env line 1: \'FOO="a b"\' has a " in its value')


def test_secret_env_names_a_secret(raw: dict[str, Any], code: Path) -> None:
    """A secret_env entry naming a secret the stack has passes."""
    raw = with_command(raw, code)
    raw["training"]["secret_env"] = {"HF_TOKEN": "hf_token"}
    raw["secrets"] = {"hf_token": "x"}
    cfg = parse_stack_config(raw, {"secrets"})
    assert cfg.training.secret_env == {"HF_TOKEN": "hf_token"}


def test_secret_env_unknown_secret(raw: dict[str, Any], code: Path) -> None:
    """A secret_env entry naming no secret of the stack is refused."""
    raw = with_command(raw, code)
    raw["training"]["secret_env"] = {"HF_TOKEN": "hf_token"}
    assert problems(raw) == [
        "training.secret_env.HF_TOKEN: 'hf_token' is not a secret of the stack; allowed: a "
        "name under secrets (none set)"
    ]


def test_secret_env_launcher_variable(raw: dict[str, Any], code: Path) -> None:
    """A secret_env variable the launcher sets per rank is refused."""
    raw = with_command(raw, code)
    raw["training"]["secret_env"] = {"RANK": "tok"}
    raw["secrets"] = {"tok": "x"}
    (message,) = problems(raw, {"secrets"})
    assert message.startswith("training.secret_env: 'RANK' is not a variable a rank may be given")


def test_secret_env_without_command(raw: dict[str, Any]) -> None:
    """secret_env without a command is refused: only a command's env file carries it."""
    raw["training"]["secret_env"] = {"HF_TOKEN": "tok"}
    raw["secrets"] = {"tok": "x"}
    assert problems(raw, {"secrets"}) == [
        "training.secret_env: ['HF_TOKEN'] without training.command; allowed: with a command "
        "(its environment file carries them), or unset"
    ]
