"""What the config tests share: the problems or warnings of a raw config, and raw builders."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse_stack_config


def problems(raw: dict[str, Any], secret_keys: set[str] | None = None) -> list[str]:
    """The problems parse_stack_config refuses `raw` with (it must refuse it)."""
    with pytest.raises(ConfigError) as e:
        parse_stack_config(raw, secret_keys)
    return e.value.problems


def warnings_of(raw: dict[str, Any]) -> list[str]:
    """The preview warnings of a valid `raw`."""
    return parse_stack_config(raw).warnings()


def ds(raw: dict[str, Any], **config: Any) -> dict[str, Any]:
    """raw with an inline ds_config that the image's train.py accepts, plus `config`."""
    base = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 8,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
    }
    raw["training"]["ds_config"] = {**base, **config}
    return raw


def monitored(raw: dict[str, Any], **monitoring: Any) -> dict[str, Any]:
    """raw with monitoring on, plus `monitoring` keys."""
    raw["monitoring"] = {"enabled": True, **monitoring}
    return raw
