"""ds_config, hostfile and launch-environment validation give named errors."""

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from dss_train import DssError
from dss_train.config import (
    apply_overrides,
    check_world_size,
    load_ds_config,
    parse_hostfile,
    validate_ds_config,
)
from dss_train.launch import needs_master_wait, read_dist_env, wait_for_master

pytestmark = pytest.mark.unit
IMAGES = Path(__file__).resolve().parents[3] / "images"


def good() -> dict[str, Any]:
    return dict(json.loads((IMAGES / "ds_config.json").read_text()))


def test_shipped_config_is_valid() -> None:
    """The image's default ds_config validates and matches the documented defaults."""
    cfg = validate_ds_config(good(), world_size=2)
    assert cfg["train_micro_batch_size_per_gpu"] == 1
    assert cfg["gradient_accumulation_steps"] == 8
    assert cfg["train_batch_size"] == 16
    assert cfg["optimizer"]["params"]["lr"] == 1e-4
    assert cfg["optimizer"]["params"]["betas"] == [0.9, 0.99]
    assert cfg["scheduler"]["type"] == "WarmupDecayLR"


def test_missing_config_is_named(tmp_path: Path) -> None:
    """A missing ds_config names the path."""
    with pytest.raises(DssError, match=r"ds_config not found: .*nope\.json"):
        load_ds_config(tmp_path / "nope.json")


def test_malformed_config_names_line(tmp_path: Path) -> None:
    """Invalid JSON is reported with file, line and column."""
    p = tmp_path / "ds.json"
    p.write_text('{\n "a": 1,\n}')
    with pytest.raises(DssError, match=r"not valid JSON: .* line 3 column 1"):
        load_ds_config(p)


def test_non_object_config_is_rejected(tmp_path: Path) -> None:
    """A JSON list is not a ds_config."""
    p = tmp_path / "ds.json"
    p.write_text("[]")
    with pytest.raises(DssError, match="must be a JSON object"):
        load_ds_config(p)


def test_bad_micro_batch_is_rejected() -> None:
    """A non-positive micro batch is named."""
    cfg = good() | {"train_micro_batch_size_per_gpu": 0}
    with pytest.raises(DssError, match="train_micro_batch_size_per_gpu"):
        validate_ds_config(cfg, 1)


def test_inconsistent_train_batch_size_is_rejected() -> None:
    """train_batch_size must equal micro x accumulation x world size."""
    cfg = good() | {"train_batch_size": 10}
    with pytest.raises(DssError, match=r"train_batch_size=10 .* = 16"):
        validate_ds_config(cfg, 2)


def test_bad_zero_stage_is_rejected() -> None:
    """Only ZeRO stages 0-3 exist."""
    with pytest.raises(DssError, match=r"zero_optimization\.stage"):
        validate_ds_config(apply_overrides(good(), zero_stage=5), 1)


def test_missing_optimizer_is_rejected() -> None:
    """The optimizer section is required."""
    cfg = good()
    del cfg["optimizer"]
    with pytest.raises(DssError, match="optimizer"):
        validate_ds_config(cfg, 1)


def test_overrides_set_stage_and_lr() -> None:
    """--zero-stage and --lr override the config without mutating it."""
    base = good()
    out = apply_overrides(base, zero_stage=2, lr=1e-3)
    assert out["zero_optimization"]["stage"] == 2
    assert out["optimizer"]["params"]["lr"] == 1e-3
    assert out["scheduler"]["params"]["warmup_max_lr"] == 1e-3
    assert base["optimizer"]["params"]["lr"] == 1e-4


def test_hostfile_parses_slots() -> None:
    """Hostfile lines give hosts and slots; comments and blanks are ignored."""
    assert parse_hostfile("# c\nnode1 slots=2\n\nnode2\n") == [("node1", 2), ("node2", 1)]


def test_malformed_hostfile_line_is_named() -> None:
    """A bad hostfile line is reported with its number."""
    with pytest.raises(DssError, match="line 2"):
        parse_hostfile("node1 slots=1\nnode2 gpus=4\n")


def test_world_size_mismatch_is_named() -> None:
    """WORLD_SIZE that differs from the hostfile's slots is an error."""
    with pytest.raises(DssError, match=r"world size 3 does not match .* 2 hosts with 2 slots"):
        check_world_size([("a", 1), ("b", 1)], 3)


def test_no_launch_env_means_single_process() -> None:
    """Without RANK etc. the trainer runs as one process."""
    assert read_dist_env({}).world_size == 1


def test_partial_launch_env_is_named() -> None:
    """A launch env missing variables names them."""
    with pytest.raises(DssError, match="MASTER_ADDR, MASTER_PORT not set"):
        read_dist_env({"RANK": "0", "WORLD_SIZE": "2"})


def test_rank_outside_world_is_rejected() -> None:
    """RANK must be below WORLD_SIZE."""
    env = {"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}
    with pytest.raises(DssError, match="outside WORLD_SIZE"):
        read_dist_env(env)


def test_unresolvable_master_is_named() -> None:
    """A master host name that does not resolve is reported as such."""
    with pytest.raises(DssError, match="does not resolve"):
        wait_for_master("no-such-host.invalid", 29500, timeout=1)


def test_unreachable_master_is_named() -> None:
    """A master port nobody listens on is reported as unreachable after the timeout."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(DssError, match=rf"master 127.0.0.1:{port} unreachable after"):
        wait_for_master("127.0.0.1", port, timeout=0.5, interval=0.1)


def test_only_non_master_ranks_wait_under_deepspeed() -> None:
    """Under deepspeed's launcher rank 0 hosts the store, so only others wait."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}
    assert not needs_master_wait(env, read_dist_env(env))
    env1 = env | {"RANK": "1"}
    assert needs_master_wait(env1, read_dist_env(env1))
    env0t = env | {"TORCHELASTIC_USE_AGENT_STORE": "True"}
    assert needs_master_wait(env0t, read_dist_env(env0t))
