"""infra.config: every validation rule, each with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse_stack_config
from tests.unit.infra.samples import host, stack_config

pytestmark = pytest.mark.unit


def problems(raw: dict[str, Any], secret_keys: set[str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(raw, secret_keys)
    return e.value.problems


def test_valid_config_parses(raw: dict[str, Any]) -> None:
    """A sound three-host config validates into models."""
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.hosts] == ["gpu-01", "gpu-02", "gpu-03"]
    assert cfg.leader.name == "gpu-01" and cfg.master.name == "gpu-01"


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


def test_duplicate_host_name(raw: dict[str, Any]) -> None:
    """Two hosts with one name are refused, naming the name."""
    raw["hosts"][2]["name"] = "gpu-02"
    assert problems(raw) == ["hosts[].name: 'gpu-02' appears 2 times; allowed: each host name once"]


def test_duplicate_host_address(raw: dict[str, Any]) -> None:
    """Two hosts with one address are refused, naming the address."""
    raw["hosts"][1]["address"] = "10.0.0.1"
    assert problems(raw) == [
        "hosts[].address: '10.0.0.1' appears 2 times; allowed: each host address once"
    ]


def test_no_manager(raw: dict[str, Any]) -> None:
    """A swarm without a manager is refused."""
    raw["hosts"][0]["role"] = "worker"
    assert problems(raw) == [
        "hosts[].role: no host has role 'manager'; allowed: 1, 3, 5 or 7 managers "
        "(an odd number keeps Raft quorum)"
    ]


def test_even_managers(raw: dict[str, Any]) -> None:
    """Two managers are refused: an even count adds no fault tolerance."""
    raw["hosts"][1]["role"] = "manager"
    assert problems(raw) == [
        "hosts[].role: 2 managers ['gpu-01', 'gpu-02']; allowed: an odd number (1, 3, 5, 7): "
        "an even count adds a failure without adding fault tolerance"
    ]


def test_gpus_per_node_exceeds_host(raw: dict[str, Any]) -> None:
    """Asking more GPUs per node than a host declares names that host."""
    raw["hosts"][2]["gpus"]["count"] = 4
    assert problems(raw) == [
        "training.gpus_per_node: 8 is more than host 'gpu-03' declares "
        "(hosts[2].gpus.count=4); allowed: 0..4"
    ]


@pytest.mark.parametrize("mtu", [1279, 9217])
def test_mtu_out_of_range(raw: dict[str, Any], mtu: int) -> None:
    """An overlay MTU outside 1280-9216 is refused with the range."""
    raw["network"]["mtu"] = mtu
    bound = "greater than or equal to 1280" if mtu < 1280 else "less than or equal to 9216"
    assert problems(raw) == [f"network.mtu: Input should be {bound} (got {mtu})"]


def test_overlay_mtu_exceeds_underlay(raw: dict[str, Any]) -> None:
    """Overlay MTU + VXLAN overhead above the underlay MTU is refused with the max."""
    raw["network"]["underlay_mtu"] = 1500
    assert problems(raw) == [
        "network.mtu: 9000 + 50 (VXLAN) = 9050 exceeds network.underlay_mtu 1500; "
        "allowed: network.mtu <= 1450"
    ]


def test_encrypted_overlay_counts_ipsec(raw: dict[str, Any]) -> None:
    """An encrypted overlay needs room for IPsec on top of VXLAN."""
    raw["network"].update(encrypted=True, underlay_mtu=9050)
    assert problems(raw) == [
        "network.mtu: 9000 + 108 (VXLAN + IPsec) = 9108 exceeds network.underlay_mtu 9050; "
        "allowed: network.mtu <= 8942"
    ]


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


def test_master_port_collides_with_sshd(raw: dict[str, Any]) -> None:
    """A master port equal to the tasks' sshd port is refused."""
    raw["training"]["master_port"] = 2222
    assert problems(raw) == [
        "training.master_port: 2222 collides with training.sshd_port; allowed: any port "
        "except [2222, 2377, 4789, 7946]"
    ]


def test_master_port_collides_with_swarm(raw: dict[str, Any]) -> None:
    """A master port on a Swarm port is refused, naming what holds it."""
    raw["training"]["master_port"] = 2377
    assert problems(raw)[0].startswith("training.master_port: 2377 collides with swarm management")


def test_unknown_launcher(raw: dict[str, Any]) -> None:
    """An unknown launcher is refused with the allowed ones."""
    raw["training"]["launcher"] = "mpirun"
    assert problems(raw) == [
        "training.launcher: Input should be 'deepspeed' or 'torchrun' (got 'mpirun')"
    ]


def test_zero_workers_with_multi_node_launcher() -> None:
    """pdsh with a single host (zero workers) is refused; no_ssh is the way out."""
    raw = {"hosts": [host(1, "manager")], "training": {"launch_mode": "pdsh"}}
    assert problems(raw) == [
        "training.launch_mode: 'pdsh' is a multi-node launcher but the stack has zero workers "
        "(one host); allowed: add worker hosts, or launch_mode 'no_ssh'"
    ]


def test_unknown_top_level_key(raw: dict[str, Any]) -> None:
    """A misspelt top-level key is reported, not ignored."""
    raw["trainng"] = {}
    assert problems(raw)[0] == (
        "trainng: unknown config key deepspeed-swarm:trainng; allowed: deepspeed-swarm:hosts, "
        "deepspeed-swarm:network, deepspeed-swarm:image, deepspeed-swarm:training, "
        "deepspeed-swarm:secrets, deepspeed-swarm:preflight"
    )


def test_unknown_nested_key(raw: dict[str, Any]) -> None:
    """A misspelt nested key is reported with its path."""
    raw["network"]["mut"] = 9000
    assert problems(raw) == ["network.mut: Extra inputs are not permitted (got 9000)"]


def test_plain_tcp_docker_endpoint(raw: dict[str, Any]) -> None:
    """An unauthenticated tcp:// Docker endpoint is refused."""
    raw["hosts"][1]["docker_host"] = "tcp://gpu-02:2375"
    assert problems(raw) == [
        "hosts[1]: docker_host 'tcp://gpu-02:2375' is plain tcp:// without "
        "docker_tls; allowed: tcp:// with docker_tls (ca, cert, key), or ssh:// / unix://"
    ]


def test_gpu_uuid_count_mismatch(raw: dict[str, Any]) -> None:
    """Pinned GPU UUIDs must match the declared count."""
    raw["hosts"][0]["gpus"]["uuids"] = ["GPU-a"]
    assert problems(raw) == [
        "hosts[0].gpus: uuids lists 1 GPUs but count is 8; allowed: exactly "
        "`count` UUIDs, or leave uuids unset"
    ]


def test_reserved_label_prefix(raw: dict[str, Any]) -> None:
    """User labels may not use the project's reserved `dss.` prefix."""
    raw["hosts"][0]["labels"] = {"dss.role": "x"}
    assert problems(raw) == [
        "hosts[0].labels: label key 'dss.role' is not allowed; allowed: lower-case "
        "[a-z0-9._-] keys, not starting with the reserved prefix 'dss.'"
    ]


def test_bad_grace_period(raw: dict[str, Any]) -> None:
    """A stop grace period Docker cannot parse is refused with the allowed forms."""
    raw["training"]["stop_grace_period"] = "2 minutes"
    assert problems(raw) == [
        "training.stop_grace_period: duration '2 minutes': allowed forms are <n>s, <n>m, <n>h "
        "(got '2 minutes')"
    ]


def test_bad_shm_size(raw: dict[str, Any]) -> None:
    """A /dev/shm size Docker cannot parse is refused with the allowed forms."""
    raw["training"]["shm_size"] = "1GiB"
    assert problems(raw) == [
        "training.shm_size: size '1GiB': allowed forms are <n>, <n>k, <n>m, <n>g (got '1GiB')"
    ]


def test_duration_and_size_units() -> None:
    """Durations and sizes convert with Docker's units."""
    from infra.config import duration_seconds, size_bytes

    assert [duration_seconds(v) for v in ("90s", "2m", "1h")] == [90, 120, 3600]
    assert [size_bytes(v) for v in ("4096", "64k", "256m", "1g")] == [
        4096,
        65536,
        256 << 20,
        1 << 30,
    ]


def test_readme_documents_every_key() -> None:
    """README's config table is the one generated from the models (no drift)."""
    from infra.config import readme_with_reference
    from tests.unit.infra.samples import ROOT

    readme = (ROOT / "README.md").read_text()
    assert readme == readme_with_reference(readme), (
        "README config table is stale: run `python -m infra.config --update-readme`"
    )
