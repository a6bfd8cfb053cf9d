"""The DeepSpeed config's rules in the registry, in the order they run (last in
`RULES`): the inline `training.ds_config`'s, then the warnings of a config file a
`training.command` names (its errors run with the command's rules)."""

from __future__ import annotations

from infra.config.rules import command, deepspeed
from infra.config.rules.rule import Rule
from infra.layout import DEFAULT_SCRIPT

DEEPSPEED_RULES: tuple[Rule, ...] = (
    Rule(
        "training.ds_config",
        "error",
        "train_batch_size = micro batch x gradient accumulation x world size (hosts x ranks "
        "per node); a missing one of the three must divide out evenly.",
        deepspeed.ds_batch,
    ),
    Rule(
        "training.ds_config",
        "error",
        f"With the image's {DEFAULT_SCRIPT}: train_micro_batch_size_per_gpu, "
        "gradient_accumulation_steps and optimizer.type are set.",
        deepspeed.ds_image_trainer,
    ),
    Rule(
        "training.ds_config",
        "error",
        "zero_optimization.stage is 0, 1, 2 or 3.",
        deepspeed.ds_zero_stage,
    ),
    Rule(
        "training.ds_config",
        "error",
        "fp16 and bf16 are not both enabled.",
        deepspeed.ds_precision,
    ),
    Rule(
        "training.ds_config",
        "error",
        "optimizer.type is a DeepSpeed optimizer or a torch.optim class; no max_grad_norm param.",
        deepspeed.ds_optimizer,
    ),
    Rule(
        "training.ds_config",
        "error",
        "scheduler.type is a DeepSpeed schedule or a torch.optim.lr_scheduler class.",
        deepspeed.ds_scheduler,
    ),
    Rule(
        "training.ds_config",
        "error",
        "Under ZeRO (stage 1-3): no 1-bit Adam/Lamb or 0/1 Adam; an optimizer other than "
        "Adam, AdamW, Adagrad, Lion (or Muon) needs zero_allow_untested_optimizer.",
        deepspeed.ds_zero_optimizer,
    ),
    Rule(
        "training.ds_config",
        "error",
        "Lamb and OneBitLamb: dynamic loss scaling (no bf16; fp16 with loss_scale 0).",
        deepspeed.ds_dynamic_loss_scale,
    ),
    Rule(
        "training.ds_config",
        "error",
        "offload_optimizer: a ratio below 1 only at stage 3; on GPUs, with a DeepSpeed "
        "CPU optimizer, not at stage 0.",
        deepspeed.ds_offload_optimizer,
    ),
    Rule(
        "training.ds_config",
        "warning",
        "On a CPU-only run: no ZeRO offload, no fp16.",
        deepspeed.ds_cpu_only,
    ),
    Rule(
        "training.ds_config",
        "warning",
        "offload_param only at ZeRO stage 3 (DeepSpeed ignores it below).",
        deepspeed.ds_offload_param,
    ),
    Rule(
        "training.command",
        "warning",
        "A `--deepspeed_config` file it names: the training.ds_config warnings above.",
        command.ds_config_file_warnings,
    ),
)
