"""How a command job's run resumes at another world size: the facts the job command
(`scripts/job resize`, a `submit` at another size) and the launch read from the
DeepSpeed config file the command names (infra/config/rules/command.py reads it).

DeepSpeed 0.17 loads a ZeRO checkpoint (stage 1-3: the optimizer state partitioned by
rank) only at the data-parallel size it was saved at; a universal checkpoint loads at
any. docs/jobs.md, "Resizing a job".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.config.rules import deepspeed
from infra.config.rules.command import command_ds_file

if TYPE_CHECKING:
    from infra.config.models.job import Training


def loads_universal(ds: dict[str, Any]) -> bool:
    """Whether DeepSpeed loads universal checkpoints under `ds`: `checkpoint.load_universal`
    truthy, as DeepSpeed tests it (`load_checkpoint(dir)` then reads
    `dir/latest_universal`)."""
    ck = ds.get("checkpoint")
    return isinstance(ck, dict) and bool(ck.get("load_universal"))


def resumes_universal(t: Training) -> bool:
    """Whether the DeepSpeed config file the command names partitions the optimizer
    state (ZeRO stage 1-3) and loads universal checkpoints (`checkpoint.load_universal`):
    each start of its run then first makes the newest checkpoint universal
    (infra/task/universal.py), and the run resumes at any world size."""
    src, _ = command_ds_file(t)
    return src is not None and bool(deepspeed.zero_stage(src.ds)) and loads_universal(src.ds)


def world_size_problems(t: Training, saved_world: int, world: int) -> list[str]:
    """Why a command job (training `t`) could not resume at `world` ranks from the
    checkpoints its run saved at `saved_world`: its DeepSpeed config file partitions the
    optimizer state by rank (ZeRO) and does not load universal checkpoints, and
    DeepSpeed 0.17 loads such a checkpoint only at the data-parallel size it was saved
    at (`load_checkpoint` raises ZeRORuntimeException at its next start). [] when it
    can: the same size, no such file (the script's checkpoints are its own business),
    ZeRO off, or universal checkpoints loaded."""
    src, _ = command_ds_file(t)
    if world == saved_world or src is None or loads_universal(src.ds):
        return []
    stage = deepspeed.zero_stage(src.ds)
    if not stage:
        return []
    return [
        f"{src.at('zero_optimization.stage')}: {stage} partitions the optimizer state by "
        f"rank, and DeepSpeed loads its checkpoints only at the world size they were "
        f"saved at ({saved_world}), so at {world} the script's load_checkpoint would fail "
        f"at its next start; nothing was changed; allowed: "
        '"checkpoint": {"load_universal": true} in that file, then `scripts/job submit` '
        "the job again as it is (each start then resumes from its newest checkpoint made "
        'universal, at any world size: docs/jobs.md, "Resizing a job"), a world size '
        f"of {saved_world}, or another --name (a new run)"
    ]
