"""The examples (examples/) as the tests run them: each one's code dir, its command,
and the dev stack's `training` section that runs it. The unit suite checks them
against the preview's rules (test_examples.py); the engine suite runs them on the lab
(tests/engine/test_bring_your_script.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import ROOT

EXAMPLES_DIR = ROOT / "examples"
TRAINER_KEYS = ("script", "args", "launcher")
"""The dev stack's trainer keys a command replaces: `script` and `args` may not be
given with one, and its launcher is the command's (or, for `python`, the default)."""


@dataclass(frozen=True)
class Example:
    """One folder of examples/ and the command its README gives."""

    name: str
    command: str
    launcher: str
    """The launcher the command runs under on the dev stack."""
    env: Mapping[str, str] = field(default_factory=dict)
    """training.env the example reads."""

    @property
    def dir(self) -> Path:
        return EXAMPLES_DIR / self.name


TUTORIAL = Example(
    "deepspeed-tutorial",
    "deepspeed train.py --deepspeed --deepspeed_config ds_config.json --steps 40",
    "deepspeed",
)
DDP = Example("torchrun-ddp", "torchrun train.py --epochs 2", "torchrun")
ENV_OUTPUT = Example("env-output", "python train.py", "deepspeed", {"GREETING": "hello"})
EXAMPLES = (TUTORIAL, DDP, ENV_OUTPUT)

DEEPSPEED_ENV_VALUE = "set-by-.deepspeed_env"
"""What examples/env-output/.deepspeed_env sets FROM_DEEPSPEED_ENV to."""


def with_command(
    training: Mapping[str, Any], code_dir: str | Path, command: str, **keys: Any
) -> dict[str, Any]:
    """A stack's `training` section that runs `command` in `code_dir` instead of the
    image's trainer: the trainer's keys dropped (TRAINER_KEYS), `keys` added."""
    out = {k: v for k, v in training.items() if k not in TRAINER_KEYS}
    return {**out, "code": {"dir": str(code_dir)}, "command": command, **keys}


def batch_refusal(ds_config: Path, tbs: int, world: int) -> str:
    """The start of the preview's refusal of a `--deepspeed_config` file beside the
    script whose train_batch_size (with gradient_accumulation_steps 1) the world size
    cannot divide: it names the file and the key."""
    return (
        f"{ds_config} (--deepspeed_config 'ds_config.json' of training.command) key "
        f"train_batch_size: {tbs} is not a multiple of gradient_accumulation_steps 1 x "
        f"world size {world}"
    )
