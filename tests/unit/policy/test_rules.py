"""policy.rules: each policy fires on a bad resource and stays quiet on the real ones."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, PolicyResourceOptions, ResourceValidationArgs, Secret

from infra.config import parse_stack_config
from policy import rules
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit

CONFIG_DIR = Path(rules.__file__).parent / "config"
Check = Callable[[str, Mapping[str, Any], Mapping[str, Any]], list[str]]
DIGEST = "registry:5000/deepspeed-swarm/train@sha256:" + "ab" * 32


def pack_config(stack: str) -> dict[str, Any]:
    """policy/config/<stack>.json, as `--policy-pack-config` hands it over."""
    data: dict[str, Any] = json.loads((CONFIG_DIR / f"{stack}.json").read_text())
    return data


def service(role: str = "worker", **container: Any) -> dict[str, Any]:
    """A training service's inputs as the engine names them, good unless overridden."""
    spec = {"image": DIGEST, "user": "1000", "env": {"DSS_RUN": "run"}, **container}
    return {
        "name": f"ds-{role}",
        "labels": [{"label": "dss.role", "value": role}],
        "taskSpec": {
            "containerSpec": spec,
            "resources": {
                "reservation": {"genericResources": {"discreteResourcesSpecs": ["NVIDIA-GPU=8"]}}
            },
            "restartPolicy": {"condition": "on-failure"},
        },
    }


GPU_CFG = {"cpu_only": False, "mtu": 9000}


def test_gpu_reservation_fires_without_gpus() -> None:
    """A worker service reserving no NVIDIA-GPU is refused on a GPU stack."""
    bad = service()
    del bad["taskSpec"]["resources"]
    (msg,) = rules.check_gpu_reservation(rules.SERVICE, bad, GPU_CFG)
    assert "NVIDIA-GPU" in msg


def test_gpu_reservation_quiet_on_cpu_only() -> None:
    """A CPU-only stack needs no GPU reservation."""
    bad = service()
    del bad["taskSpec"]["resources"]
    assert rules.check_gpu_reservation(rules.SERVICE, bad, {"cpu_only": True}) == []


def test_overlay_mtu_fires_on_default_mtu() -> None:
    """An overlay without the configured MTU option is refused, naming both values."""
    net = {"driver": "overlay", "options": {rules.MTU_OPTION: "1500"}}
    (msg,) = rules.check_overlay_mtu(rules.NETWORK, net, GPU_CFG)
    assert "'1500'" in msg and "'9000'" in msg


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WANDB_API_KEY", "abc"),
        ("HF_TOKEN", "x"),
        ("DB_PASSWORD_PLAIN", "hunter2"),
        ("NOTE", "hf_" + "a1" * 20),
        ("NOTE", "-----BEGIN OPENSSH PRIVATE KEY-----"),
        ("NOTE", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdo"),
    ],
)
def test_secret_in_env_fires(name: str, value: str) -> None:
    """Credential-named env vars with literal values and token-like values are refused."""
    bad = service(env={name: value})
    (msg,) = rules.check_no_secrets(rules.SERVICE, bad, GPU_CFG)
    assert name in msg


def test_pulumi_secret_in_label_fires() -> None:
    """A Pulumi secret used as a label value is refused."""
    bad = service()
    bad["labels"].append({"label": "token", "value": Secret("s3cr3t")})
    (msg,) = rules.check_no_secrets(rules.SERVICE, bad, GPU_CFG)
    assert "Pulumi secret" in msg


def test_secret_file_path_is_fine() -> None:
    """A credential name pointing at a mounted secret file is fine."""
    good = service(env={"HF_TOKEN": "/run/secrets/hf_token"})
    assert rules.check_no_secrets(rules.SERVICE, good, GPU_CFG) == []


@pytest.mark.parametrize("user", [None, "root", "0", "0:0"])
def test_root_user_fires(user: str | None) -> None:
    """A service without a user, or running as root, is refused."""
    assert rules.check_non_root(rules.SERVICE, service(user=user), GPU_CFG) != []


def test_restart_policy_fires_when_missing() -> None:
    """A training service without a restart policy is refused."""
    bad = service()
    del bad["taskSpec"]["restartPolicy"]
    assert rules.check_restart_policy(rules.SERVICE, bad, GPU_CFG) != []


@pytest.mark.parametrize("image", ["train", "train:latest", "reg:5000/train:v1"])
def test_floating_image_fires(image: str) -> None:
    """Images without a digest or content tag (latest, none, a release name) are refused."""
    assert rules.check_image_pinned(rules.SERVICE, service(image=image), GPU_CFG) != []


def test_content_tag_is_pinned() -> None:
    """The program's content-hash tag counts as pinned (registry-less stacks)."""
    assert rules.image_reason("deepspeed-swarm/train:4be70a13c2d9") is None


def test_validate_reports_through_the_sdk() -> None:
    """The pack's policy objects report violations, named by resource, via the SDK."""
    policy = next(p for p in rules.POLICIES if p.name == "non-root-user")
    args = ResourceValidationArgs(
        resource_type=rules.SERVICE,
        props=service(user="root"),
        urn="urn:pulumi:prod::deepspeed-swarm::docker:index/service:Service::prod-train-worker",
        name="prod-train-worker",
        opts=PolicyResourceOptions(False, [], None, [], None, [], None),  # type: ignore[arg-type]
        provider=None,
    )
    seen: list[str] = []
    policy.validate(args, lambda msg, urn: seen.append(msg))
    assert seen and seen[0].startswith("prod-train-worker: "), seen


ALL_CHECKS: list[Check] = [
    rules.check_gpu_reservation,
    rules.check_overlay_mtu,
    rules.check_no_secrets,
    rules.check_non_root,
    rules.check_restart_policy,
    rules.check_image_pinned,
]


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_quiet_on_the_real_program(
    check: Check, real_resources: tuple[str, list[tuple[str, str, dict[str, Any]]]]
) -> None:
    """The committed stacks' own resources pass every policy with their pack config."""
    stack, resources = real_resources
    cfg = pack_config(stack)
    policy_cfg = {**cfg.get("gpu-reservation", {}), **cfg.get("overlay-mtu", {})}
    found = {name: check(typ, props, policy_cfg) for typ, name, props in resources}
    assert {n: m for n, m in found.items() if m} == {}, f"{stack}: {check.__name__}"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_pack_config_matches_stack(stack: str) -> None:
    """policy/config/<stack>.json carries the stack's MTU and cpu_only."""
    raw = stack_config(stack)
    raw.pop("secrets", None)
    cfg = parse_stack_config(raw)
    pack = pack_config(stack)
    assert pack["overlay-mtu"]["mtu"] == cfg.network.mtu, f"{stack}: overlay-mtu.mtu"
    assert pack["gpu-reservation"]["cpu_only"] == cfg.training.cpu_only, f"{stack}: cpu_only"


@pytest.mark.parametrize(("stack", "level"), [("dev", "advisory"), ("prod", "mandatory")])
def test_enforcement_per_stack(stack: str, level: str) -> None:
    """Prod enforces every policy; dev only advises."""
    assert EnforcementLevel(pack_config(stack)["all"]).value == level


def test_flag_named_like_a_key_is_fine() -> None:
    """A switch such as DSS_REQUIRE_SSH_KEY=1 is not a credential."""
    good = service(env={"DSS_REQUIRE_SSH_KEY": "1"})
    assert rules.check_no_secrets(rules.SERVICE, good, GPU_CFG) == []


def test_pack_normalises_numbers_from_the_engine() -> None:
    """An integer policy option arrives from the engine as a double (9000.0); the pack
    compares it as the integer it is (found by the real engine, invisible under mocks)."""
    policy = next(p for p in rules.POLICIES if p.name == "overlay-mtu")
    args = ResourceValidationArgs(
        resource_type=rules.NETWORK,
        props={"driver": "overlay", "options": {rules.MTU_OPTION: "9000"}},
        urn="urn:pulumi:dev::deepspeed-swarm::docker:index/network:Network::dev-net-overlay",
        name="dev-net-overlay",
        opts=PolicyResourceOptions(False, [], None, [], None, [], None),  # type: ignore[arg-type]
        provider=None,
        config={"mtu": 9000.0},
    )
    seen: list[str] = []
    policy.validate(args, lambda msg, urn: seen.append(msg))
    assert seen == [], f"dev-net-overlay: 9000 vs 9000.0 reported: {seen}"
