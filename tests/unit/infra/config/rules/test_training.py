"""infra.config.rules.training: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.infra.config.checks import problems, warnings_of
from tests.unit.infra.samples import host

pytestmark = pytest.mark.unit


def test_gpus_per_node_exceeds_host(raw: dict[str, Any]) -> None:
    """Asking more GPUs per node than a host declares names that host."""
    raw["hosts"][2]["gpus"]["count"] = 4
    assert problems(raw) == [
        "training.gpus_per_node: 8 is more than host 'gpu-03' declares "
        "(hosts[2].gpus.count=4); allowed: 0..4"
    ]


def test_zero_workers_with_multi_node_launcher() -> None:
    """pdsh with a single host (zero workers) is refused; no_ssh is the way out."""
    raw = {"hosts": [host(1, "manager")], "training": {"launch_mode": "pdsh"}}
    assert problems(raw) == [
        "training.launch_mode: 'pdsh' is a multi-node launcher but the stack has zero workers "
        "(one host); allowed: add worker hosts, or launch_mode 'no_ssh'"
    ]


@pytest.mark.parametrize("name", ["RANK", "LOCAL_WORLD_SIZE", "CROSS_RANK", "NODE_RANK"])
def test_env_launcher_owned(raw: dict[str, Any], name: str) -> None:
    """A variable the launcher sets per rank is refused in training.env."""
    raw["training"]["env"] = {name: "0"}
    assert problems(raw) == [
        f"training.env: {name} is set per rank by the launcher; allowed: any variable except "
        "RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NODE_RANK, "
        "GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, CROSS_RANK, CROSS_SIZE, "
        "CUDA_VISIBLE_DEVICES, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, "
        "TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_USE_AGENT_STORE"
    ]


def test_env_stack_owned(raw: dict[str, Any]) -> None:
    """A variable the stack derives from another key is refused, naming that key."""
    raw["training"]["env"] = {"DSS_SSH_PORT": "22"}
    assert problems(raw) == [
        "training.env: DSS_SSH_PORT is derived from training.sshd_port; allowed: set that "
        "key instead"
    ]


def test_metrics_env_is_derived(raw: dict[str, Any]) -> None:
    """DSS_METRICS_PORT in training.env is refused: monitoring.rank_metrics_port sets it."""
    raw["training"]["env"] = {"DSS_METRICS_PORT": "9999"}
    assert problems(raw) == [
        "training.env: DSS_METRICS_PORT is derived from monitoring.rank_metrics_port; allowed: "
        "set that key instead"
    ]


def test_checkpoint_after_last_step_warns(raw: dict[str, Any]) -> None:
    """checkpoint_every above steps is a warning: only the final checkpoint is written."""
    raw["training"].update(steps=100, checkpoint_every=500)
    assert warnings_of(raw) == [
        "training.checkpoint_every: 500 > training.steps 100: the only checkpoint is the final "
        "one; a failure restarts from step 0"
    ]


def test_short_grace_period_warns(raw: dict[str, Any]) -> None:
    """A stop grace period under 30s is a warning."""
    raw["training"]["stop_grace_period"] = "10s"
    assert warnings_of(raw) == [
        "training.stop_grace_period: 10s leaves little time for the final checkpoint before "
        "SIGKILL; suggested: at least 30s"
    ]
