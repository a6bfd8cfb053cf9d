"""ds_config loading/validation and hostfile parsing (pure Python, no torch)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from . import DssError

ZERO_STAGES = (0, 1, 2, 3)


def load_ds_config(path: str | Path) -> dict[str, Any]:
    """Read a ds_config.json; a missing or malformed file is a DssError naming it."""
    p = Path(path)
    if not p.is_file():
        raise DssError(f"ds_config not found: {p}")
    try:
        cfg = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise DssError(f"ds_config {p} is not valid JSON: {e.msg} at line {e.lineno} "
                       f"column {e.colno}") from None
    if not isinstance(cfg, dict):
        raise DssError(f"ds_config {p} must be a JSON object, got {type(cfg).__name__}")
    return cfg


def apply_overrides(cfg: dict[str, Any], zero_stage: int | None = None,
                    lr: float | None = None) -> dict[str, Any]:
    """Return a copy of cfg with the ZeRO stage and/or peak learning rate replaced."""
    out = copy.deepcopy(cfg)
    if zero_stage is not None:
        out.setdefault("zero_optimization", {})["stage"] = zero_stage
    if lr is not None:
        out.setdefault("optimizer", {}).setdefault("params", {})["lr"] = lr
        sched = out.get("scheduler", {}).get("params")
        if isinstance(sched, dict) and "warmup_max_lr" in sched:
            sched["warmup_max_lr"] = lr
    return out


def _pos_int(cfg: dict[str, Any], key: str, where: str) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise DssError(f"ds_config {where}: '{key}' must be a positive integer, got {v!r}")
    return v


def validate_ds_config(cfg: dict[str, Any], world_size: int, where: str = "") -> dict[str, Any]:
    """Check the keys the trainer relies on; fill train_batch_size; raise DssError if wrong."""
    where = where or "(in memory)"
    micro = _pos_int(cfg, "train_micro_batch_size_per_gpu", where)
    ga = _pos_int(cfg, "gradient_accumulation_steps", where)
    tbs = cfg.get("train_batch_size")
    if tbs is not None and tbs != micro * ga * world_size:
        raise DssError(
            f"ds_config {where}: train_batch_size={tbs} but micro batch {micro} x gradient "
            f"accumulation {ga} x world size {world_size} = {micro * ga * world_size}")
    opt = cfg.get("optimizer")
    if not isinstance(opt, dict) or not isinstance(opt.get("type"), str):
        raise DssError(f"ds_config {where}: 'optimizer' with a 'type' is required")
    zero = cfg.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise DssError(f"ds_config {where}: 'zero_optimization' must be an object")
    stage = zero.get("stage", 0)
    if stage not in ZERO_STAGES:
        raise DssError(f"ds_config {where}: zero_optimization.stage must be one of "
                       f"{ZERO_STAGES}, got {stage!r}")
    sched = cfg.get("scheduler")
    if sched is not None and (not isinstance(sched, dict) or "type" not in sched):
        raise DssError(f"ds_config {where}: 'scheduler' must be an object with a 'type'")
    out = copy.deepcopy(cfg)
    out["train_batch_size"] = micro * ga * world_size
    return out


_HOST_LINE = re.compile(r"^(\S+)(?:\s+slots=(\d+))?$")


def parse_hostfile(text: str, name: str = "hostfile") -> list[tuple[str, int]]:
    """Parse a DeepSpeed hostfile ('host slots=N' per line, # comments) into (host, slots)."""
    hosts: list[tuple[str, int]] = []
    seen: set[str] = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _HOST_LINE.match(line)
        if not m:
            raise DssError(f"{name} line {n}: expected 'host slots=N', got {raw.strip()!r}")
        host, slots = m.group(1), int(m.group(2) or 1)
        if slots < 1:
            raise DssError(f"{name} line {n}: slots must be >= 1")
        if host in seen:
            raise DssError(f"{name} line {n}: host {host!r} listed twice")
        seen.add(host)
        hosts.append((host, slots))
    if not hosts:
        raise DssError(f"{name} lists no hosts")
    return hosts


def check_world_size(hosts: list[tuple[str, int]], world_size: int, name: str = "hostfile") -> None:
    """Raise DssError when WORLD_SIZE differs from the sum of the hostfile's slots."""
    total = sum(s for _, s in hosts)
    if total != world_size:
        raise DssError(f"world size {world_size} does not match {name}: {len(hosts)} hosts "
                       f"with {total} slots in all")
