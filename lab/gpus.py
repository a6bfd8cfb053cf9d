"""Pure functions: the fake GPUs of each lab host, how many and of which model
(`lab up --gpus 8,8,4 --gpu-models fake-a,fake-a,fake-b`), as `lab up` records them in
lab.json and `lab status` reports them. Nothing here touches the system.

One value stands for every host (`--gpus 8`, as before models were per host); a comma
list gives each host its own, lab-h1 first, one per host.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_GPU_MODEL = "fake-gpu"
"""Every host's model unless `--gpu-models` says otherwise: the model the committed lab
stacks name (Pulumi.dev.yaml, Pulumi.lab8.yaml: `gpus: {count: 2, model: fake-gpu}`)."""

_DISPLAY = {DEFAULT_GPU_MODEL: "Lab Fake GPU"}
"""The product name the fake `nvidia-smi -L` prints for a model, where it is not the model
itself: the default keeps the name the fake printed before models were per host."""

_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_MODEL_ALLOWED = "letters, digits, '.', '_' and '-', starting with a letter or digit (1-63)"
_COUNTS_ALLOWED = "one count >= 0 for every host, or a comma list of counts, one per host"
_MODELS_ALLOWED = "one model for every host, or a comma list of models, one per host"


def _refused(flag: str, value: object, why: str, allowed: str) -> ValueError:
    return ValueError(f"{flag} {flag_value(value)!r}: {why}; allowed: {allowed}")


def parse_counts(text: str) -> int | list[int]:
    """`--gpus`: `8` (every host) or `8,8,4` (per host); ValueError naming the flag,
    the value and what is allowed."""
    counts: list[int] = []
    for item in text.split(","):
        try:
            counts.append(int(item))
        except ValueError:
            raise _refused("--gpus", text, f"{item!r} is not a count", _COUNTS_ALLOWED) from None
    return counts[0] if len(counts) == 1 else counts


def parse_models(text: str) -> str | list[str]:
    """`--gpu-models`: `fake-a` (every host) or `fake-a,fake-b` (per host); each name is
    checked by `lab_gpus`."""
    models = text.split(",")
    return models[0] if len(models) == 1 else models


def _check_models(value: object, models: Sequence[str]) -> tuple[str, ...]:
    """Model names the fake nvidia-smi can print and a node label can hold."""
    for m in models:
        if not _MODEL.match(m):
            raise _refused("--gpu-models", value, f"{m!r} is not a model name", _MODEL_ALLOWED)
    return tuple(models)


def display_name(model: str) -> str:
    """What the fake `nvidia-smi -L` names a GPU of `model` (`GPU 0: <this> (UUID: ...)`):
    the model itself, the default's name as before aside."""
    return _DISPLAY.get(model) or _check_models(model, [model])[0]


def _one_per_host(flag: str, values: Sequence[T], hosts: int, allowed: str) -> tuple[T, ...]:
    if len(values) != hosts:
        why = f"{len(values)} values for --hosts {hosts}"
        raise _refused(flag, values, why, f"{allowed} (exactly {hosts}, lab-h1 first)")
    return tuple(values)


@dataclass(frozen=True)
class LabGpus:
    """Each host's fake GPUs: `counts[i - 1]` of model `models[i - 1]` on lab-h<i>."""

    counts: tuple[int, ...]
    models: tuple[str, ...]

    def count(self, i: int) -> int:
        return self.counts[i - 1]

    def model(self, i: int) -> str:
        return self.models[i - 1]

    @property
    def uniform_count(self) -> int | None:
        """The count every host has, None where hosts differ (or there are none)."""
        return self.counts[0] if len(set(self.counts)) == 1 else None

    def state(self) -> dict[str, Any]:
        """lab.json's keys for them: `gpus` one count where every host has it (as before
        per-host counts), else the list; `gpu_models` only where a host's model is not
        the default (one name or the list). `lab_gpus` reads them back."""
        out: dict[str, Any] = {"gpus": _one_or_list(self.counts)}
        if any(m != DEFAULT_GPU_MODEL for m in self.models):
            out["gpu_models"] = _one_or_list(self.models)
        return out


def _one_or_list(values: tuple[T, ...]) -> T | list[T]:
    return values[0] if len(set(values)) == 1 else list(values)


def lab_gpus(
    hosts: int,
    counts: int | Sequence[int],
    models: str | Sequence[str] = DEFAULT_GPU_MODEL,
) -> LabGpus:
    """The GPUs of lab-h1..h<hosts>: `counts` and `models` each one value for every host
    or one per host. ValueError naming the flag, the value and what is allowed."""
    if isinstance(counts, int):
        per_count: tuple[int, ...] = (counts,) * hosts
    else:
        per_count = _one_per_host("--gpus", counts, hosts, _COUNTS_ALLOWED)
    for n in per_count:
        if n < 0:
            raise _refused("--gpus", counts, f"{n} is below 0", _COUNTS_ALLOWED)
    if isinstance(models, str):
        per_model: tuple[str, ...] = (models,) * hosts
    else:
        per_model = _one_per_host("--gpu-models", models, hosts, _MODELS_ALLOWED)
    return LabGpus(per_count, _check_models(models, per_model))


def from_state(state: dict[str, Any], hosts: int) -> LabGpus | None:
    """The GPUs lab.json records (None: it records no count, or not one `lab_gpus` takes
    for `hosts`). A lab.json from before per-host models names none: the default."""
    if "gpus" not in state:
        return None
    try:
        return lab_gpus(hosts, state["gpus"], state.get("gpu_models", DEFAULT_GPU_MODEL))
    except (TypeError, ValueError):
        return None


def flag_value(value: object) -> str:
    """`--gpus`/`--gpu-models`' text for one value or a per-host list (`8,8,4`)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(str(v) for v in value)
    return str(value)
