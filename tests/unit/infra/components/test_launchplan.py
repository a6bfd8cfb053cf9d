"""infra.components.launchplan: a training.command target's launch script, per launcher
and launch mode (golden files: the whole script a host runs, readable as shell)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from infra.components.launchplan import TrainingLaunchArgs, follow_of, target_script
from infra.config import StackConfig, parse_stack_config
from infra.layout import IMAGE_HOME
from infra.render.supervisor import Follow
from tests.unit.golden import check_golden

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parents[1] / "golden"
CODE = "/data/code/run/0123456789ab"
HOSTFILE = "10.0.1.3 slots=8\n10.0.1.4 slots=8\n10.0.1.5 slots=8\n"


def golden(name: str, text: str) -> None:
    """Compare with golden/<name>; DSS_UPDATE_GOLDEN=1 rewrites it."""
    check_golden(GOLDEN / name, text)


def launch_args(cfg: StackConfig) -> TrainingLaunchArgs:
    """What target_script reads of a launch (no services, swarm or image: unused)."""
    none = cast(Any, None)
    return TrainingLaunchArgs(
        training=cfg.training,
        master=cfg.master,
        training_hosts=cfg.training_hosts,
        hosts=cfg.hosts,
        network=cfg.network,
        preflight=cfg.preflight,
        services=none,
        swarm=none,
        image=none,
    )


def command_config(raw: dict[str, Any], tmp_path: Path, command: str, **keys: Any) -> StackConfig:
    """The sample (3 hosts x 8 GPUs) running `command` from a code dir in the tutorial's
    shape, with a variable from training.env and one from `.deepspeed_env`."""
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "ds_config.json").write_text('{"train_batch_size": 24}')
    (tmp_path / ".deepspeed_env").write_text("FROM_DS_ENV=1\n")
    raw["training"].update(code={"dir": str(tmp_path)}, command=command, env={"A": "b c"}, **keys)
    return parse_stack_config(raw)


@pytest.mark.parametrize(
    ("name", "command", "keys", "node_rank"),
    [
        ("pdsh", "deepspeed train.py --deepspeed --deepspeed_config ds_config.json", {}, None),
        (
            "no_ssh",
            "deepspeed train.py --deepspeed --deepspeed_config ds_config.json",
            {"launch_mode": "no_ssh"},
            1,
        ),
        ("torchrun", "torchrun train.py --epochs 2", {}, 1),
    ],
)
def test_command_launch_script_golden(
    raw: dict[str, Any],
    tmp_path: Path,
    name: str,
    command: str,
    keys: dict[str, Any],
    node_rank: int | None,
) -> None:
    """A command's launch script (env file, supervisor with its setup and exit record,
    the launcher line) matches golden/launch_command_<mode>.sh."""
    cfg = command_config(raw, tmp_path, command, **keys)
    script = target_script(
        launch_args(cfg),
        f"{CODE}/train.py",
        None,
        HOSTFILE,
        "10.0.1.3",
        "ds-master" if not node_rank else "ds-worker",
        node_rank,
        CODE,
    )
    golden(f"launch_command_{name}.sh", script)


def test_training_script_launch_runs_in_the_code_path(
    raw: dict[str, Any],
) -> None:
    """Without a command the code path changes two lines of the launch script: the
    environment file's DSS_CODE_DIR and the supervisor's working directory (the script,
    given here as the image's, is what the caller says)."""
    args = launch_args(parse_stack_config(raw))
    common = ("/opt/dss/train.py", None, HOSTFILE, "10.0.1.3", "ds-master", None)
    image, synced = target_script(args, *common), target_script(args, *common, CODE)
    changed = [
        (a, b) for a, b in zip(image.splitlines(), synced.splitlines(), strict=True) if a != b
    ]
    assert changed == [
        (f"printf %s 'DSS_CODE_DIR={IMAGE_HOME}", f"printf %s 'DSS_CODE_DIR={CODE}"),
        (f"cd {IMAGE_HOME}", f"cd {CODE}"),
    ]


def test_follow_master_of_a_module_command_names_the_module(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """follow_master with `python -m <module>`: the follow settings name the module (the
    takeover's watch finds its ranks by it); with a script they name none."""
    recovery = {"follow_moves": True, "follow_master": True}
    raw["hosts"][-1]["spare"] = True  # where the master may go
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    services = cast(Any, SimpleNamespace(master_name="ds-master", worker_name="ds-worker"))

    def follow(command: str, pattern: str) -> Follow | None:
        args = launch_args(command_config(raw, tmp_path, command, recovery=recovery))
        return follow_of(replace(args, services=services), pattern)

    module = follow("python -m mypkg.train", "(-m|--module) mypkg\\.train( |$)")
    assert module is not None and module.module == "mypkg.train"
    script = follow("deepspeed train.py", f"{CODE}/train.py")
    assert script is not None and script.module == ""
