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


def zero(raw: dict[str, Any], stage: int, optimizer: str, **config: Any) -> dict[str, Any]:
    """raw with a ds_config at ZeRO `stage` with `optimizer`, plus `config`."""
    zero_cfg = {"stage": stage, **config.pop("zero", {})}
    return ds(raw, zero_optimization=zero_cfg, optimizer={"type": optimizer}, **config)


def test_untested_optimizer_under_zero(raw: dict[str, Any]) -> None:
    """An optimizer outside ZeRO's tested list is refused under ZeRO (DeepSpeed asserts)."""
    assert problems(zero(raw, 2, "SGD")) == [
        "training.ds_config.optimizer.type: 'SGD' is not an optimizer DeepSpeed has tested "
        "with ZeRO (zero_optimization.stage 2); allowed: Adam, AdamW, Adagrad or Lion, or "
        "zero_allow_untested_optimizer: true"
    ]


def test_untested_optimizer_allowed(raw: dict[str, Any]) -> None:
    """zero_allow_untested_optimizer lets any known optimizer run under ZeRO."""
    parse_stack_config(zero(raw, 1, "Lamb", zero_allow_untested_optimizer=True))


@pytest.mark.parametrize("name", ["Adam", "adamw", "Adagrad", "Lion", "Muon"])
def test_tested_optimizers_under_zero(raw: dict[str, Any], name: str) -> None:
    """ZeRO's tested optimizers (and Muon, not mirrored) pass at every stage."""
    parse_stack_config(zero(raw, 3, name))


def test_onebit_optimizer_under_zero(raw: dict[str, Any]) -> None:
    """1-bit Adam under ZeRO is refused even with untested optimizers allowed."""
    assert problems(zero(raw, 1, "OneBitAdam", zero_allow_untested_optimizer=True)) == [
        "training.ds_config.optimizer.type: 'OneBitAdam' does not run under ZeRO "
        "(zero_optimization.stage 1); allowed: zero_optimization.stage 0, or another optimizer"
    ]


def test_lamb_with_bf16(raw: dict[str, Any]) -> None:
    """Lamb with bf16 (a fixed loss scale) is refused: it needs dynamic loss scaling."""
    assert problems(zero(raw, 0, "Lamb", bf16={"enabled": True})) == [
        "training.ds_config.optimizer.type: 'Lamb' needs dynamic loss scaling, but bf16 is "
        "enabled (DeepSpeed fixes the loss scale at 1); allowed: fp16 with loss_scale 0, or "
        "neither fp16 nor bf16"
    ]


def test_lamb_with_static_fp16_scale(raw: dict[str, Any]) -> None:
    """Lamb with a static fp16 loss scale is refused; the dynamic default passes."""
    assert problems(zero(raw, 0, "Lamb", fp16={"enabled": True, "loss_scale": 128})) == [
        "training.ds_config.optimizer.type: 'Lamb' needs dynamic loss scaling, but "
        "fp16.loss_scale is 128 (static); allowed: fp16 with loss_scale 0, or neither fp16 "
        "nor bf16"
    ]


def test_lamb_with_dynamic_fp16_scale(raw: dict[str, Any]) -> None:
    """Lamb with fp16's default (dynamic) loss scale passes."""
    parse_stack_config(zero(raw, 0, "Lamb", fp16={"enabled": True}))


def test_partial_offload_below_stage_3(raw: dict[str, Any]) -> None:
    """An optimizer offload ratio below 1 is refused below stage 3 (DeepSpeed asserts)."""
    offload = {"offload_optimizer": {"device": "cpu", "ratio": 0.5}}
    assert problems(zero(raw, 2, "Adam", zero=offload)) == [
        "training.ds_config.zero_optimization.offload_optimizer.ratio: 0.5 at ZeRO stage 2; "
        "allowed: 1.0 (DeepSpeed offloads partially only at stage 3)"
    ]
    parse_stack_config(zero(raw, 3, "Adam", zero=offload))


def test_optimizer_offload_without_zero_on_gpus(raw: dict[str, Any]) -> None:
    """Optimizer offload at stage 0 on GPUs (a CPU optimizer on GPU params) is refused."""
    offload = {"offload_optimizer": {"device": "cpu"}}
    assert problems(zero(raw, 0, "AdamW", zero=offload)) == [
        "training.ds_config.zero_optimization.offload_optimizer: offloads to 'cpu' at ZeRO "
        "stage 0, where DeepSpeed's CPU AdamW would step parameters that stay on the GPUs and "
        "fails; allowed: zero_optimization.stage 1, 2 or 3, or no offload_optimizer"
    ]


def test_param_offload_below_stage_3_warns(raw: dict[str, Any]) -> None:
    """offload_param below stage 3 is a warning: DeepSpeed ignores it."""
    offload = {"offload_param": {"device": "cpu"}}
    assert warnings_of(zero(raw, 2, "Adam", zero=offload)) == [
        "training.ds_config.zero_optimization.offload_param: offloads to 'cpu' at ZeRO stage "
        "2; DeepSpeed offloads parameters only at stage 3 and ignores it here"
    ]
