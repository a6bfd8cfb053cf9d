"""Rules about a DeepSpeed config: batch sizes, the image's trainer, ZeRO stage,
precision, optimizer and scheduler names. Each judges the inline `training.ds_config`
(a ds_config path is read only inside the image), or the source it is given: the file a
`training.command` names as `--deepspeed_config` (infra/config/rules/command.py).

They mirror DeepSpeed 0.17.6; tests/image/test_config_rules.py checks them against
the DeepSpeed in the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.config.rules.common import enabled, positive_int
from infra.layout import DEFAULT_SCRIPT

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

# DeepSpeed 0.17.6 (deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS): its own
# optimizers, matched case-insensitively; any other name is looked up as a
# torch.optim class (engine._configure_basic_optimizer), case-sensitively.
DS_OPTIMIZERS = (
    "adagrad",
    "adam",
    "adamw",
    "lamb",
    "onebitadam",
    "onebitlamb",
    "zerooneadam",
    "muadam",
    "muadamw",
    "musgd",
    "lion",
    "muon",
)
TORCH_OPTIMIZERS = (
    "ASGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "LBFGS",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
    "SparseAdam",
)
# deepspeed/runtime/lr_schedules.py VALID_LR_SCHEDULES, else a torch.optim.lr_scheduler
# class (engine._scheduler_from_config); both case-sensitive.
DS_SCHEDULERS = ("LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
TORCH_SCHEDULERS = (
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
)
ZERO_STAGES = (0, 1, 2, 3)


def ds_config(cfg: StackConfig) -> dict[str, Any]:
    """The inline ds_config, or {} when it is a path inside the image."""
    ds = cfg.training.ds_config
    return ds if isinstance(ds, dict) else {}


@dataclass(frozen=True)
class DsSource:
    """A DeepSpeed config the rules judge and how their messages name it: the inline
    `training.ds_config` (keys as `training.ds_config.<key>`), or a file the command
    gives as `--deepspeed_config` (`<file> key <key>`)."""

    ds: dict[str, Any]
    label: str = "training.ds_config"
    file: bool = False

    def at(self, key: str = "") -> str:
        """The config, or one of its keys (dotted), as a message names it."""
        if not key:
            return self.label
        return f"{self.label} key {key}" if self.file else f"{self.label}.{key}"


def inline(cfg: StackConfig) -> DsSource:
    """The inline ds_config as the rules' source ({} when it is a path in the image)."""
    return DsSource(ds_config(cfg))


def zero_stage(ds: dict[str, Any]) -> int | None:
    """The ZeRO stage DeepSpeed reads (legacy `true` is stage 1); None when not one."""
    zero = ds.get("zero_optimization", {})
    if isinstance(zero, bool):
        return 1 if zero else 0
    stage = zero.get("stage", 0) if isinstance(zero, dict) else None
    if isinstance(stage, int) and not isinstance(stage, bool) and stage in ZERO_STAGES:
        return stage
    return None


def ds_batch(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds, world = src.ds, cfg.world_size
    names = (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
    )
    bad = [n for n in names if n in ds and not positive_int(ds[n])]
    if bad:
        return [
            f"{src.at(n)}: {ds[n]!r} is not a positive integer; allowed: an integer >= 1"
            for n in bad
        ]
    tbs, micro, ga = (ds.get(n) for n in names)
    if tbs is None:
        if micro is None and ds:
            return [
                f"{src.at()}: neither train_batch_size nor "
                "train_micro_batch_size_per_gpu is set; allowed: either (DeepSpeed "
                "derives the rest)"
            ]
        return []
    world_desc = (
        f"world size {world} ({len(cfg.training_hosts)} training hosts x "
        f"{cfg.training.ranks_per_node} ranks per node)"
    )
    if micro is not None and ga is not None:
        if tbs == micro * ga * world:
            return []
        return [
            f"{src.at('train_batch_size')}: {tbs} != train_micro_batch_size_per_gpu "
            f"{micro} x gradient_accumulation_steps {ga} x {world_desc} = "
            f"{micro * ga * world}; allowed: {micro * ga * world}, or leave one unset"
        ]
    # DeepSpeed derives the missing factor(s) by integer division, then asserts.
    given = [f"{n} {ds[n]}" for n in names[1:] if n in ds]
    divisor = (micro or 1) * (ga or 1) * world
    if tbs % divisor == 0:
        return []
    return [
        f"{src.at('train_batch_size')}: {tbs} is not a multiple of "
        f"{' x '.join([*given, world_desc])} = {divisor}; allowed: a multiple of {divisor}"
    ]


def ds_image_trainer(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds = src.ds
    if not ds or cfg.training.script != DEFAULT_SCRIPT:
        return []
    opt = ds.get("optimizer")
    missing = [
        n for n in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps") if n not in ds
    ]
    if not (isinstance(opt, dict) and isinstance(opt.get("type"), str)):
        missing.append("optimizer.type")
    if not missing:
        return []
    return [
        f"{src.at()}: {', '.join(missing)} not set; allowed: set them "
        f"({DEFAULT_SCRIPT} in the image requires them)"
    ]


def ds_zero_stage(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    zero = src.ds.get("zero_optimization", {})
    if isinstance(zero, bool):  # DeepSpeed's legacy spelling: true is stage 1
        return []
    stage = zero.get("stage", 0) if isinstance(zero, dict) else None
    if isinstance(stage, int) and not isinstance(stage, bool) and stage in ZERO_STAGES:
        return []
    return [
        f"{src.at('zero_optimization.stage')}: {stage!r} is not a ZeRO stage; "
        f"allowed: {', '.join(map(str, ZERO_STAGES))}"
    ]


def ds_precision(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds = src.ds
    # DeepSpeed reads `bf16`, falling back to the older `bfloat16` spelling.
    bf16 = ds.get("bf16", ds.get("bfloat16"))
    if enabled(ds.get("fp16")) and enabled(bf16):
        return [
            f"{src.at()}: fp16.enabled and bf16.enabled are both true; allowed: at most one of them"
        ]
    return []


def ds_optimizer(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    opt = src.ds.get("optimizer")
    if not isinstance(opt, dict):
        return []
    out = []
    name = opt.get("type")
    if name is not None and not (
        isinstance(name, str) and (name.lower() in DS_OPTIMIZERS or name in TORCH_OPTIMIZERS)
    ):
        out.append(
            f"{src.at('optimizer.type')}: {name!r} is not an optimizer DeepSpeed "
            f"knows; allowed: {', '.join(DS_OPTIMIZERS)} (any case), or torch.optim's "
            f"{', '.join(TORCH_OPTIMIZERS)}"
        )
    params = opt.get("params")
    if isinstance(params, dict) and "max_grad_norm" in params:
        out.append(
            f"{src.at('optimizer.params.max_grad_norm')}: DeepSpeed refuses it; "
            "allowed: the top-level gradient_clipping key"
        )
    return out


def ds_scheduler(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    sched = src.ds.get("scheduler")
    name = sched.get("type") if isinstance(sched, dict) else None
    if name is None or name in DS_SCHEDULERS or name in TORCH_SCHEDULERS:
        return []
    return [
        f"{src.at('scheduler.type')}: {name!r} is not a scheduler DeepSpeed knows; "
        f"allowed: {', '.join(DS_SCHEDULERS)}, or torch.optim.lr_scheduler's "
        f"{', '.join(TORCH_SCHEDULERS)}"
    ]


def ds_cpu_only(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    if not cfg.training.cpu_only:
        return []
    ds = src.ds
    zero = ds.get("zero_optimization")
    out = [
        f"{src.at('zero_optimization.' + part)}: offloads to "
        f"{section.get('device')!r} on a CPU-only run, where the model already lives in "
        "host memory"
        for part in ("offload_optimizer", "offload_param")
        if isinstance(zero, dict)
        and isinstance(section := zero.get(part), dict)
        and section.get("device") not in (None, "none")
    ]
    if enabled(ds.get("fp16")):
        out.append(
            f"{src.at('fp16')}: enabled on a CPU-only run; DeepSpeed's CPU "
            "accelerator refuses fp16 unless the CPU has native fp16 (use bf16)"
        )
    return out


# -- ZeRO and the optimizer: what DeepSpeed refuses only at deepspeed.initialize or at
# the first step. Mirrored from deepspeed/runtime/engine.py (_do_sanity_check,
# _configure_basic_optimizer, _do_optimizer_sanity_check), runtime/zero/utils.py and
# runtime/zero/config.py. Not mirrored: `zero_force_ds_cpu_optimizer`, which DeepSpeed
# checks only for an optimizer the script passes in, which a stack config cannot see.

# Names whose class is in ZeRO's tested list (zero/utils.py ZERO_SUPPORTED_OPTIMIZERS:
# torch Adam/AdamW/Adagrad, FusedAdam, DeepSpeedCPUAdam/Adagrad/Lion, FusedLion).
# Muon is left unchecked: its ZeRO support is newer than the mirrored source.
ZERO_TESTED_OPTIMIZERS = ("adam", "adamw", "adagrad", "lion", "muon")
# _configure_basic_optimizer asserts `not self.zero_optimization()` for these.
ZERO_INCOMPATIBLE_OPTIMIZERS = ("onebitadam", "zerooneadam", "onebitlamb")
# _do_sanity_check asserts dynamic_loss_scale() (loss_scale == 0) for these.
DYNAMIC_SCALE_OPTIMIZERS = ("lamb", "onebitlamb")
# With an optimizer offload these build DeepSpeedCPUAdam/Adagrad/Lion, whose step()
# asserts that the parameters it updates are on the CPU.
CPU_STEP_OPTIMIZERS = ("adam", "adamw", "adagrad", "lion")


def _optimizer(ds: dict[str, Any]) -> tuple[str, str] | None:
    """(as written, as DeepSpeed reads it) of a known optimizer.type, else None."""
    opt = ds.get("optimizer")
    name = opt.get("type") if isinstance(opt, dict) else None
    if not isinstance(name, str):
        return None
    # runtime/config.py: DeepSpeed's own names case-insensitively, torch's as written.
    if name.lower() in DS_OPTIMIZERS:
        return name, name.lower()
    return (name, name) if name in TORCH_OPTIMIZERS else None


def _offload(ds: dict[str, Any], part: str) -> dict[str, Any] | None:
    zero = ds.get("zero_optimization")
    section = zero.get(part) if isinstance(zero, dict) else None
    return section if isinstance(section, dict) else None


def ds_zero_optimizer(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds = src.ds
    stage, opt = zero_stage(ds), _optimizer(ds)
    if not stage or opt is None:
        return []
    written, name = opt
    if name in ZERO_INCOMPATIBLE_OPTIMIZERS:
        return [
            f"{src.at('optimizer.type')}: {written!r} does not run under ZeRO "
            f"(zero_optimization.stage {stage}); allowed: zero_optimization.stage 0, or "
            "another optimizer"
        ]
    if name in ZERO_TESTED_OPTIMIZERS or ds.get("zero_allow_untested_optimizer"):
        return []
    return [
        f"{src.at('optimizer.type')}: {written!r} is not an optimizer DeepSpeed has "
        f"tested with ZeRO (zero_optimization.stage {stage}); allowed: Adam, AdamW, Adagrad "
        "or Lion, or zero_allow_untested_optimizer: true"
    ]


def ds_dynamic_loss_scale(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds = src.ds
    opt = _optimizer(ds)
    if opt is None or opt[1] not in DYNAMIC_SCALE_OPTIMIZERS:
        return []
    # runtime/config.py get_loss_scale: fp16's loss_scale (0 = dynamic), 1 with bf16.
    fp16: Any = ds.get("fp16")
    bf16 = ds.get("bf16", ds.get("bfloat16"))
    if enabled(fp16):
        scale = fp16.get("loss_scale", 0)
        if scale == 0:
            return []
        why = f"fp16.loss_scale is {scale!r} (static)"
    elif enabled(bf16):
        why = "bf16 is enabled (DeepSpeed fixes the loss scale at 1)"
    else:
        return []
    return [
        f"{src.at('optimizer.type')}: {opt[0]!r} needs dynamic loss scaling, but "
        f"{why}; allowed: fp16 with loss_scale 0, or neither fp16 nor bf16"
    ]


def ds_offload_optimizer(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds = src.ds
    stage, section = zero_stage(ds), _offload(ds, "offload_optimizer")
    if stage is None or section is None:
        return []
    out = []
    ratio = section.get("ratio", 1.0)
    # zero/config.py offload_ratio_check.
    if isinstance(ratio, int | float) and ratio < 1.0 and stage != 3:
        out.append(
            f"{src.at('zero_optimization.offload_optimizer.ratio')}: {ratio} at ZeRO "
            f"stage {stage}; allowed: 1.0 (DeepSpeed offloads partially only at stage 3)"
        )
    device, opt, t = section.get("device", "none"), _optimizer(ds), cfg.training
    params = ds["optimizer"].get("params") if opt is not None else None
    torch_adam = isinstance(params, dict) and bool(params.get("torch_adam"))
    on_gpus = not t.cpu_only and t.gpus_per_node > 0
    if (
        stage == 0
        and device in ("cpu", "nvme")
        and on_gpus
        and opt is not None
        and opt[1] in CPU_STEP_OPTIMIZERS
        and not (torch_adam and opt[1] in ("adam", "adamw"))
    ):
        # Without ZeRO nothing moves the parameters off the GPUs.
        out.append(
            f"{src.at('zero_optimization.offload_optimizer')}: offloads to {device!r} "
            f"at ZeRO stage 0, where DeepSpeed's CPU {opt[0]} would step parameters that stay "
            "on the GPUs and fails; allowed: zero_optimization.stage 1, 2 or 3, or no "
            "offload_optimizer"
        )
    return out


def ds_offload_param(cfg: StackConfig, src: DsSource | None = None) -> list[str]:
    src = src or inline(cfg)
    ds = src.ds
    stage, section = zero_stage(ds), _offload(ds, "offload_param")
    device = section.get("device", "none") if section is not None else "none"
    # Only the stage 3 optimizer reads offload_param (engine._configure_zero_optimizer).
    if stage is None or stage == 3 or device == "none":
        return []
    return [
        f"{src.at('zero_optimization.offload_param')}: offloads to {device!r} at ZeRO "
        f"stage {stage}; DeepSpeed offloads parameters only at stage 3 and ignores it here"
    ]
