"""Bringing a lab up for a test module, one lab at a time: `python -m lab up` with
each host's fake GPUs (one count and model for every host, or one per host), down again
afterwards whatever happens."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from harness.lab import lab_cli, lab_status
from lab.gpus import flag_value


def lab_up_args(
    hosts: int,
    gpus: int | Sequence[int] = 2,
    gpu_models: str | Sequence[str] | None = None,
    swarm: bool = False,
) -> list[str]:
    """`python -m lab up`'s arguments: `hosts` hosts, `gpus` fake GPUs (one count for
    every host, or one per host, lab-h1 first) of `gpu_models` (likewise; None: the
    lab's default model, the flag left out), the swarm formed with `swarm`."""
    args = ["up", "--hosts", str(hosts), "--gpus", flag_value(gpus)]
    if gpu_models is not None:
        args += ["--gpu-models", flag_value(gpu_models)]
    return [*args, "--swarm"] if swarm else args


@contextlib.contextmanager
def running_lab(
    hosts: int,
    gpus: int | Sequence[int] = 2,
    gpu_models: str | Sequence[str] | None = None,
    swarm: bool = False,
) -> Iterator[dict[str, Any]]:
    """A lab brought up as `lab_up_args` says (any lab before it downed first: one lab
    at a time), its `lab status --json` yielded, down again afterwards whatever happens."""
    lab_cli("down", check=False)
    try:
        lab_cli(*lab_up_args(hosts, gpus, gpu_models, swarm))
        yield lab_status()
    finally:
        lab_cli("down", check=False)
