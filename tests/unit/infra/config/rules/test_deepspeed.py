"""infra.config.rules.deepspeed: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import ds, problems, warnings_of

pytestmark = pytest.mark.unit


def test_image_ds_config_passes(raw: dict[str, Any]) -> None:
    """The image's own ds_config.json, given inline, passes every rule on the sample."""
    import json

    from tests.unit.infra.samples import ROOT

    raw["training"]["ds_config"] = json.loads((ROOT / "images/ds_config.json").read_text())
    cfg = parse_stack_config(raw)
    assert cfg.world_size == 24 and cfg.warnings() == [], "3 hosts x 8 GPUs, no warnings"


def test_ds_batch_mismatch(raw: dict[str, Any]) -> None:
    """train_batch_size unequal to micro x GA x world size is refused with the product."""
    assert problems(ds(raw, train_batch_size=64)) == [
        "training.ds_config.train_batch_size: 64 != train_micro_batch_size_per_gpu 1 x "
        "gradient_accumulation_steps 8 x world size 24 (3 training hosts x 8 ranks per node) "
        "= 192; "
        "allowed: 192, or leave one unset"
    ]


def test_ds_batch_not_divisible(raw: dict[str, Any]) -> None:
    """A train_batch_size DeepSpeed cannot divide into the missing factor is refused."""
    raw = ds(raw, train_batch_size=100)
    del raw["training"]["ds_config"]["gradient_accumulation_steps"]
    raw["training"]["script"] = "/app/mine.py"
    assert problems(raw) == [
        "training.ds_config.train_batch_size: 100 is not a multiple of "
        "train_micro_batch_size_per_gpu 1 x world size 24 (3 training hosts x 8 ranks per "
        "node) = 24; "
        "allowed: a multiple of 24"
    ]


def test_ds_batch_derivable(raw: dict[str, Any]) -> None:
    """A train_batch_size that divides evenly lets DeepSpeed derive the missing factor."""
    raw = ds(raw, train_batch_size=96)
    del raw["training"]["ds_config"]["gradient_accumulation_steps"]
    raw["training"]["script"] = "/app/mine.py"
    ds_config = parse_stack_config(raw).training.ds_config
    assert isinstance(ds_config, dict) and ds_config["train_batch_size"] == 96


def test_ds_batch_not_positive(raw: dict[str, Any]) -> None:
    """A batch key that is not a positive integer is refused."""
    assert problems(ds(raw, gradient_accumulation_steps=0)) == [
        "training.ds_config.gradient_accumulation_steps: 0 is not a positive integer; "
        "allowed: an integer >= 1"
    ]


def test_ds_batch_unset(raw: dict[str, Any]) -> None:
    """Neither train_batch_size nor the micro batch set is refused (DeepSpeed asserts)."""
    raw["training"].update(script="/app/mine.py", ds_config={"gradient_accumulation_steps": 2})
    assert problems(raw) == [
        "training.ds_config: neither train_batch_size nor train_micro_batch_size_per_gpu is "
        "set; allowed: either (DeepSpeed derives the rest)"
    ]


def test_ds_image_trainer_keys(raw: dict[str, Any]) -> None:
    """With the image's train.py, micro batch, GA and optimizer.type are required."""
    raw["training"]["ds_config"] = {"train_batch_size": 24}
    assert problems(raw) == [
        "training.ds_config: train_micro_batch_size_per_gpu, gradient_accumulation_steps, "
        "optimizer.type not set; allowed: set them (/opt/dss/train.py in the image requires them)"
    ]


def test_ds_zero_stage(raw: dict[str, Any]) -> None:
    """A ZeRO stage outside 0..3 is refused."""
    assert problems(ds(raw, zero_optimization={"stage": 4})) == [
        "training.ds_config.zero_optimization.stage: 4 is not a ZeRO stage; allowed: 0, 1, 2, 3"
    ]


def test_ds_fp16_and_bf16(raw: dict[str, Any]) -> None:
    """fp16 and bf16 both enabled is refused (DeepSpeed asserts)."""
    raw = ds(raw, fp16={"enabled": True}, bfloat16={"enabled": True})
    assert problems(raw) == [
        "training.ds_config: fp16.enabled and bf16.enabled are both true; allowed: at most one "
        "of them"
    ]


def test_ds_unknown_optimizer(raw: dict[str, Any]) -> None:
    """An optimizer neither DeepSpeed nor torch.optim knows is refused with both lists."""
    assert problems(ds(raw, optimizer={"type": "Adamm"})) == [
        "training.ds_config.optimizer.type: 'Adamm' is not an optimizer DeepSpeed knows; "
        "allowed: adagrad, adam, adamw, lamb, onebitadam, onebitlamb, zerooneadam, muadam, "
        "muadamw, musgd, lion, muon (any case), or torch.optim's ASGD, Adadelta, Adafactor, "
        "Adagrad, Adam, AdamW, Adamax, LBFGS, NAdam, RAdam, RMSprop, Rprop, SGD, SparseAdam"
    ]


def test_ds_optimizer_names_accepted(raw: dict[str, Any]) -> None:
    """DeepSpeed's optimizers in any case and torch.optim's classes are accepted."""
    for name in ("OneBitAdam", "ZeroOneAdam", "Lion", "SGD", "RMSprop"):
        parse_stack_config(ds(raw, optimizer={"type": name}))


def test_ds_max_grad_norm(raw: dict[str, Any]) -> None:
    """max_grad_norm as an optimizer parameter is refused (DeepSpeed raises)."""
    raw = ds(raw, optimizer={"type": "AdamW", "params": {"max_grad_norm": 1.0}})
    assert problems(raw) == [
        "training.ds_config.optimizer.params.max_grad_norm: DeepSpeed refuses it; allowed: "
        "the top-level gradient_clipping key"
    ]


def test_ds_unknown_scheduler(raw: dict[str, Any]) -> None:
    """A scheduler neither DeepSpeed nor torch knows is refused with both lists."""
    assert problems(ds(raw, scheduler={"type": "Cosine"})) == [
        "training.ds_config.scheduler.type: 'Cosine' is not a scheduler DeepSpeed knows; "
        "allowed: LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR, or "
        "torch.optim.lr_scheduler's ChainedScheduler, ConstantLR, CosineAnnealingLR, "
        "CosineAnnealingWarmRestarts, CyclicLR, ExponentialLR, LambdaLR, LinearLR, MultiStepLR, "
        "MultiplicativeLR, OneCycleLR, PolynomialLR, ReduceLROnPlateau, SequentialLR, StepLR"
    ]


def test_ds_cpu_offload_warns(dev_raw: dict[str, Any]) -> None:
    """ZeRO offload on a CPU-only run is a warning."""
    zero = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    raw = ds(dev_raw, zero_optimization=zero, gradient_accumulation_steps=1)
    assert warnings_of(raw) == [
        "training.ds_config.zero_optimization.offload_optimizer: offloads to 'cpu' on a "
        "CPU-only run, where the model already lives in host memory"
    ]


def test_ds_cpu_fp16_warns(dev_raw: dict[str, Any]) -> None:
    """fp16 on a CPU-only run is a warning."""
    assert warnings_of(ds(dev_raw, fp16={"enabled": True})) == [
        "training.ds_config.fp16: enabled on a CPU-only run; DeepSpeed's CPU accelerator "
        "refuses fp16 unless the CPU has native fp16 (use bf16)"
    ]
