"""infra.config.parse: the committed stacks, secrets, unknown keys, load()."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import problems
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit


def test_dev_stack_validates() -> None:
    """The committed dev stack file validates."""
    cfg = parse_stack_config(stack_config("dev"), {"secrets"})
    assert cfg.training.cpu_only and len(cfg.hosts) == 2


def test_prod_stack_validates() -> None:
    """The committed prod stack (8 hosts x 8 GPUs) validates; its secrets are encrypted."""
    raw = stack_config("prod")
    secrets = raw.get("secrets", {})
    assert secrets and all(isinstance(v, dict) and "secure" in v for v in secrets.values())
    cfg = parse_stack_config(raw, {"secrets"})
    assert len(cfg.hosts) == 8 and all(h.gpus.count == 8 for h in cfg.hosts)
    assert cfg.network.mtu == 9000 and all(h.rdma_interface for h in cfg.hosts)


def test_lab8_stack_validates() -> None:
    """The committed 8-host acceptance stack validates: 9 hosts, one spare, world size 8."""
    cfg = parse_stack_config(stack_config("lab8"), {"secrets"})
    assert len(cfg.hosts) == 9 and [h.name for h in cfg.spares] == ["lab-h9"]
    assert len(cfg.managers) == 3 and cfg.world_size == 8 and cfg.warnings() == []


def test_prod_stack_has_no_warnings() -> None:
    """The committed prod stack produces no preview warnings."""
    cfg = parse_stack_config(stack_config("prod"), {"secrets"})
    assert cfg.warnings() == [], "prod stack must preview without warnings"


def test_plaintext_secret(raw: dict[str, Any]) -> None:
    """A secret written in plaintext in the stack file is refused, value not echoed."""
    raw["secrets"] = {"wandb_api_key": "hunter2-plaintext"}
    msgs = problems(raw, secret_keys=set())
    assert msgs == [
        "secrets: ['wandb_api_key'] are stored in plaintext in the stack file; allowed: only "
        "encrypted values, set with `pulumi config set --secret --path 'secrets.<name>' <value>`"
    ]
    assert "hunter2" not in str(msgs)


def test_encrypted_secret_accepted(raw: dict[str, Any]) -> None:
    """Secrets the engine reports as secret are accepted; only names are kept."""
    raw["secrets"] = {"wandb_api_key": "value"}
    cfg = parse_stack_config(raw, {"secrets"})
    assert cfg.secret_names == ["wandb_api_key"]


def test_unknown_top_level_key(raw: dict[str, Any]) -> None:
    """A misspelt top-level key is reported, not ignored."""
    raw["trainng"] = {}
    assert problems(raw)[0] == (
        "trainng: unknown config key deepspeed-swarm:trainng; allowed: deepspeed-swarm:hosts, "
        "deepspeed-swarm:network, deepspeed-swarm:image, deepspeed-swarm:training, "
        "deepspeed-swarm:secrets, deepspeed-swarm:preflight, deepspeed-swarm:jupyter, "
        "deepspeed-swarm:monitoring, deepspeed-swarm:kind, deepspeed-swarm:cluster, "
        "deepspeed-swarm:manager, "
        "deepspeed-swarm:ssh"
    )


def test_load_emits_warnings(
    mocks: object, raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """load() shows each rule warning through pulumi.log.warn (visible in the preview)."""
    import pulumi

    from infra import config
    from tests.unit.infra.samples import set_stack_config

    shown: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: shown.append(msg))
    raw["training"]["stop_grace_period"] = "10s"
    set_stack_config(raw)
    config.load()
    assert shown == parse_stack_config(raw).warnings() and len(shown) == 1, "one warning shown"


def test_load_reports_a_bad_config_without_a_traceback(mocks: object, raw: dict[str, Any]) -> None:
    """load() raises a RunError (the engine prints its message alone), naming the key."""
    import pulumi

    from infra import config
    from tests.unit.infra.samples import set_stack_config

    raw["network"]["mtu"] = 9100
    set_stack_config(raw)
    with pytest.raises(pulumi.RunError, match=r"network\.mtu: 9100 \+ 50 .*allowed"):
        config.load()
