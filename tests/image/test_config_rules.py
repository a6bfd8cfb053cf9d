"""infra.config's DeepSpeed rules agree with the DeepSpeed (and torch) inside the image.

The rules mirror DeepSpeed 0.17.6 because DeepSpeed cannot run on the operator's
machine without torch; this checks the mirror against the real thing: the name
lists, and for each ds_config case whether DeepSpeedConfig (at the case's world
size) refuses it exactly when infra.config does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra import config
from infra.config import ConfigError, parse_stack_config
from tests.image.conftest import docker

pytestmark = pytest.mark.image

# Runs in the image: DeepSpeedConfig with the world size patched in (no process
# group needed), plus the names DeepSpeed and torch know.
PROBE = r"""
import json, sys
import torch
from torch.optim import lr_scheduler
import deepspeed.comm as dist
from deepspeed.runtime import config as dsc, lr_schedules

cases = json.load(sys.stdin)
verdicts = []
for case in cases:
    dist.get_world_size = lambda *a, **k: case["world"]
    dist.get_rank = lambda *a, **k: 0
    try:
        dsc.DeepSpeedConfig(case["ds_config"])
        verdicts.append(None)
    except Exception as e:
        verdicts.append(f"{type(e).__name__}: {e}")
optimizers = sorted(n for n, c in vars(torch.optim).items() if isinstance(c, type)
                    and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer)
schedulers = sorted(n for n, c in vars(lr_scheduler).items() if isinstance(c, type)
                    and not n.startswith("_") and c is not lr_scheduler.LRScheduler
                    and issubclass(c, (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau)))
print(json.dumps({"verdicts": verdicts, "ds_optimizers": list(dsc.DEEPSPEED_OPTIMIZERS),
                  "ds_schedulers": list(lr_schedules.VALID_LR_SCHEDULES),
                  "torch_optimizers": optimizers, "torch_schedulers": schedulers}))
"""

# (hosts, ranks per node, ds_config): accepted and refused cases of each rule.
BASE = {"optimizer": {"type": "Adam", "params": {"lr": 1e-4}}}
CASES: list[tuple[int, int, dict[str, Any]]] = [
    (2, 2, {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8}),
    (
        2,
        2,
        {
            "train_batch_size": 32,
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 8,
        },
    ),
    (
        2,
        2,
        {
            "train_batch_size": 30,
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 8,
        },
    ),
    (2, 2, {"train_batch_size": 24, "train_micro_batch_size_per_gpu": 2}),
    (2, 2, {"train_batch_size": 20, "train_micro_batch_size_per_gpu": 3}),
    (2, 2, {"train_batch_size": 24, "gradient_accumulation_steps": 3}),
    (2, 2, {"train_batch_size": 26, "gradient_accumulation_steps": 3}),
    (3, 1, {"train_batch_size": 9}),
    (3, 1, {"train_batch_size": 10}),
    (3, 1, {"train_micro_batch_size_per_gpu": 4}),
    (3, 1, {"gradient_accumulation_steps": 4}),
    (2, 1, {"train_micro_batch_size_per_gpu": 0, "gradient_accumulation_steps": 1}),
    *[
        (2, 1, {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": s}})
        for s in (0, 1, 2, 3, 4)
    ],
    (
        2,
        1,
        {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    ),
    (
        2,
        1,
        {
            "train_micro_batch_size_per_gpu": 1,
            "fp16": {"enabled": True},
            "bfloat16": {"enabled": True},
        },
    ),
    (2, 1, {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}),
    # A partial optimizer offload (DeepSpeedZeroConfig offload_ratio_check). The
    # optimizer/ZeRO rules DeepSpeed checks only in deepspeed.initialize are not here:
    # DeepSpeedConfig accepts those configs.
    *[
        (
            2,
            1,
            {
                "train_micro_batch_size_per_gpu": 1,
                "zero_optimization": {
                    "stage": s,
                    "offload_optimizer": {"device": "cpu", "ratio": 0.5},
                },
            },
        )
        for s in (2, 3)
    ],
]


def ours(hosts: int, ranks: int, ds_config: dict[str, Any]) -> list[str]:
    """infra.config's problems with this ds_config on `hosts` CPU hosts x `ranks`."""
    raw = {
        "hosts": [
            {
                "name": f"h{i}",
                "address": f"192.0.2.{i + 1}",
                "docker_host": f"ssh://root@h{i}",
                "role": "manager" if i == 0 else "worker",
            }
            for i in range(hosts)
        ],
        # ssh:// hosts need a known_hosts file (strict host keys by default); read when
        # the program runs, never by the config rules checked here.
        "ssh": {"known_hosts_file": "~/.ssh/known_hosts"},
        # Not the image's train.py: only DeepSpeed's own rules apply.
        "training": {
            "cpu_only": True,
            "procs_per_node": ranks,
            "gpus_per_node": 0,
            "script": "/app/train.py",
            "ds_config": ds_config,
        },
    }
    try:
        parse_stack_config(raw)
    except ConfigError as e:
        return e.problems
    return []


@pytest.fixture(scope="module")
def probe(image: str) -> dict[str, Any]:
    """What the image's DeepSpeed says about every case, and the names it knows."""
    cases = [{"world": h * r, "ds_config": {**BASE, **ds}} for h, r, ds in CASES]
    r = docker(
        "run",
        "--rm",
        "-i",
        "--network",
        "none",
        "-e",
        "DS_ACCELERATOR=cpu",
        "--entrypoint",
        "python",
        image,
        "-c",
        PROBE,
        input=json.dumps(cases),
    )
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("index", range(len(CASES)))
def test_ds_config_verdicts_agree(probe: dict[str, Any], index: int) -> None:
    """infra.config refuses a ds_config exactly when the image's DeepSpeedConfig does."""
    hosts, ranks, ds_config = CASES[index]
    mine = ours(hosts, ranks, {**BASE, **ds_config})
    theirs = probe["verdicts"][index]
    assert bool(mine) == bool(theirs), (
        f"world {hosts}x{ranks} {ds_config}: infra.config says {mine or 'valid'}, "
        f"DeepSpeed says {theirs or 'valid'}"
    )


def test_optimizer_names_agree(probe: dict[str, Any]) -> None:
    """The optimizer names infra.config allows are the ones DeepSpeed and torch know."""
    assert list(config.DS_OPTIMIZERS) == probe["ds_optimizers"], "DEEPSPEED_OPTIMIZERS differ"
    assert sorted(config.TORCH_OPTIMIZERS) == probe["torch_optimizers"], "torch.optim differs"


def test_scheduler_names_agree(probe: dict[str, Any]) -> None:
    """The scheduler names infra.config allows are the ones DeepSpeed and torch know."""
    assert list(config.DS_SCHEDULERS) == probe["ds_schedulers"], "VALID_LR_SCHEDULES differ"
    assert sorted(config.TORCH_SCHEDULERS) == probe["torch_schedulers"], "lr_scheduler differs"
