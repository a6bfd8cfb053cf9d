"""examples/: each example's command is one the program runs (infra/command.py) and its
code dir passes the preview's rules (infra/config) on the dev lab (2 hosts x 1 CPU rank),
under every launcher it is shown with; an example the preview would refuse fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.configs import dev_config, unprefixed
from infra.command import split_command
from infra.config import ConfigError, StackConfig, parse_stack_config
from tests.unit.examples.cases import (
    DDP,
    DEEPSPEED_ENV_VALUE,
    ENV_OUTPUT,
    EXAMPLES,
    EXAMPLES_DIR,
    TUTORIAL,
    Example,
    batch_refusal,
    with_command,
)

pytestmark = pytest.mark.unit

DEV_WORLD = 2
"""The dev lab's world size: 2 hosts x 1 CPU rank (Pulumi.dev.yaml)."""
IDS = [e.name for e in EXAMPLES]


def dev_with(code_dir: str | Path, command: str, **training: Any) -> StackConfig:
    """The dev stack running `command` in `code_dir`, validated as the preview does."""
    raw = unprefixed(dev_config())
    raw["training"] = with_command(raw["training"], code_dir, command, **training)
    return parse_stack_config(raw)


def relative(example: Example) -> str:
    """The example's code dir as a stack file in the project names it."""
    return example.dir.relative_to(EXAMPLES_DIR.parent).as_posix()


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_each_command_splits_into_its_launcher_and_script(example: Example) -> None:
    """The command parses; its script is the folder's train.py."""
    cmd = split_command(example.command)
    assert (cmd.launcher, cmd.target, cmd.module) == (
        "python" if example.command.startswith("python") else example.launcher,
        "train.py",
        False,
    )
    assert (example.dir / cmd.target).is_file()


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_each_example_passes_the_preview_rules_on_the_dev_lab(example: Example) -> None:
    """The dev stack with the example's command and code dir is valid, with no warning,
    its world size the dev lab's, and its launcher the command's."""
    cfg = dev_with(relative(example), example.command, env=dict(example.env))
    assert cfg.world_size == DEV_WORLD
    assert cfg.training.launcher == example.launcher
    assert cfg.warnings() == []


def test_the_tutorials_config_is_the_one_the_rules_read() -> None:
    """The tutorial's command names the ds_config.json beside it; that file is CPU-friendly
    (no fp16 or bf16), prints steps, and its batch size the dev world divides."""
    cmd = split_command(TUTORIAL.command)
    assert cmd.deepspeed_config == "ds_config.json"
    ds = json.loads((TUTORIAL.dir / "ds_config.json").read_text())
    assert not {"fp16", "bf16", "bfloat16"} & set(ds), ds
    assert ds["steps_per_print"] > 0
    assert ds["train_batch_size"] % (DEV_WORLD * ds.get("gradient_accumulation_steps", 1)) == 0


def test_a_batch_size_the_world_cannot_divide_is_refused(tmp_path: Path) -> None:
    """The tutorial copied with a train_batch_size of 15: refused, naming the file and
    the key (what the engine suite previews on the lab)."""
    code = tmp_path / "tutorial"
    shutil.copytree(TUTORIAL.dir, code)
    ds_file = code / "ds_config.json"
    ds_file.write_text(json.dumps({**json.loads(ds_file.read_text()), "train_batch_size": 15}))
    with pytest.raises(ConfigError) as refused:
        dev_with(code, TUTORIAL.command)
    (problem,) = refused.value.problems
    assert problem.startswith(batch_refusal(ds_file, 15, DEV_WORLD)), problem


@pytest.mark.parametrize(
    "mode",
    [
        {"launcher": "deepspeed", "launch_mode": "pdsh"},
        {"launcher": "deepspeed", "launch_mode": "no_ssh"},
        {"launcher": "torchrun"},
    ],
    ids=["pdsh", "no_ssh", "torchrun"],
)
def test_env_output_runs_under_every_launcher(mode: dict[str, str]) -> None:
    """The plain `python` example is valid under each launcher and launch mode the engine
    suite runs it with, its .deepspeed_env included."""
    cfg = dev_with(relative(ENV_OUTPUT), ENV_OUTPUT.command, env=dict(ENV_OUTPUT.env), **mode)
    assert cfg.training.launcher == mode["launcher"]
    assert cfg.warnings() == []
    env_file = (ENV_OUTPUT.dir / ".deepspeed_env").read_text()
    assert env_file == f"FROM_DEEPSPEED_ENV={DEEPSPEED_ENV_VALUE}\n"


def test_a_contradicting_launcher_is_refused() -> None:
    """The torchrun example with the dev stack's `launcher: deepspeed` kept is refused:
    the stack must leave the launcher to the command (as with_command does)."""
    with pytest.raises(ConfigError) as refused:
        dev_with(relative(DDP), DDP.command, launcher="deepspeed")
    assert refused.value.problems[0].startswith("training.launcher: 'deepspeed' but ")


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_the_readmes_show_the_command(example: Example) -> None:
    """The folder's README and examples/README.md give the command the tests run."""
    assert example.command in (example.dir / "README.md").read_text()
    assert f"`{example.command}`" in (EXAMPLES_DIR / "README.md").read_text()
