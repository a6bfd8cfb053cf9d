"""infra.config: every validation rule, each with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse_stack_config, stack_file_yaml
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


def test_lab8_stack_validates() -> None:
    """The committed 8-host acceptance stack validates: 9 hosts, one spare, world size 8."""
    cfg = parse_stack_config(stack_config("lab8"), {"secrets"})
    assert len(cfg.hosts) == 9 and [h.name for h in cfg.spares] == ["lab-h9"]
    assert len(cfg.managers) == 3 and cfg.world_size == 8 and cfg.warnings() == []


def test_spare_is_not_a_training_host(raw: dict[str, Any]) -> None:
    """A spare adds no rank and no worker task: world size and workers leave it out."""
    raw["hosts"].append({**host(4), "spare": True})
    raw["training"] = {"gpus_per_node": 8, "procs_per_node": 1}
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.workers] == ["gpu-02", "gpu-03"]
    assert [h.name for h in cfg.training_hosts] == ["gpu-01", "gpu-02", "gpu-03"]
    assert cfg.world_size == 24


def test_spare_cannot_be_the_master(raw: dict[str, Any]) -> None:
    """The first host (rank 0) cannot be the spare."""
    raw["hosts"][0]["spare"] = True
    assert problems(raw) == [
        "hosts[0].spare: true on 'gpu-01', the master (rank 0); allowed: spare on any host "
        "but the first"
    ]


def test_drained_host_leaves_training(raw: dict[str, Any]) -> None:
    """A drained host carries no task: neither a training host nor an active one."""
    raw["hosts"][2]["availability"] = "drain"
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.training_hosts] == ["gpu-01", "gpu-02"]
    assert [h.name for h in cfg.active_hosts] == ["gpu-01", "gpu-02"]
    assert cfg.world_size == 16


def test_master_cannot_be_drained(raw: dict[str, Any]) -> None:
    """The first host (rank 0) cannot be drained: another host must come first."""
    raw["hosts"][0]["availability"] = "drain"
    assert problems(raw) == [
        "hosts[0].availability: 'drain' on 'gpu-01', the master (rank 0); allowed: 'active' "
        "(to move the master, list another host first)"
    ]


def test_spare_needs_the_pdsh_launch(raw: dict[str, Any]) -> None:
    """Per-node launches are tied to hosts: a spare needs deepspeed with pdsh."""
    raw["hosts"][2]["spare"] = True
    raw["training"] = {"gpus_per_node": 8, "launch_mode": "no_ssh"}
    assert problems(raw) == [
        "hosts[].spare: spare hosts ['gpu-03'] with launcher 'deepspeed' and launch_mode "
        "'no_ssh'; allowed: spares only with launcher 'deepspeed' and launch_mode 'pdsh' (one "
        "launcher that follows the real placement; per-node launches are tied to hosts)"
    ]


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
        "deepspeed-swarm:secrets, deepspeed-swarm:preflight, deepspeed-swarm:jupyter, "
        "deepspeed-swarm:monitoring"
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
    """README's key and rule tables are the ones generated from the code (no drift)."""
    from infra.config import readme_with_reference
    from tests.unit.infra.samples import ROOT

    readme = (ROOT / "README.md").read_text()
    assert readme == readme_with_reference(readme), (
        "README config tables are stale: run `python -m infra.config --update-readme`"
    )


# -- cross-key rules added for issue 9 ----------------------------------------------
def warnings_of(raw: dict[str, Any]) -> list[str]:
    return parse_stack_config(raw).warnings()


def ds(raw: dict[str, Any], **config: Any) -> dict[str, Any]:
    """raw with an inline ds_config that the image's train.py accepts, plus `config`."""
    base = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 8,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
    }
    raw["training"]["ds_config"] = {**base, **config}
    return raw


def test_prod_stack_has_no_warnings() -> None:
    """The committed prod stack produces no preview warnings."""
    cfg = parse_stack_config(stack_config("prod"), {"secrets"})
    assert cfg.warnings() == [], "prod stack must preview without warnings"


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


def test_relative_dataset_source(raw: dict[str, Any]) -> None:
    """A relative bind source is refused."""
    raw["training"]["datasets"] = [{"source": "datasets", "target": "/datasets"}]
    assert problems(raw) == [
        "training.datasets[0].source: 'datasets' is a relative path; allowed: an absolute "
        "path (Docker bind mounts take no relative paths)"
    ]


def test_relative_data_dir(raw: dict[str, Any]) -> None:
    """A relative data_dir is refused."""
    raw["training"]["data_dir"] = "shared"
    assert problems(raw) == [
        "training.data_dir: 'shared' is a relative path; allowed: an absolute path (Docker "
        "bind mounts take no relative paths)"
    ]


@pytest.mark.parametrize(
    ("target", "taken"),
    [("/data", "/data (training.data_dir)"), ("/opt", "/opt/dss (the image home)")],
)
def test_dataset_target_reserved(raw: dict[str, Any], target: str, taken: str) -> None:
    """A dataset target on, above or inside a path the stack mounts is refused."""
    raw["training"]["datasets"] = [{"source": "/mnt/x", "target": target}]
    assert problems(raw) == [
        f"training.datasets[0].target: {target!r} collides with {taken}; allowed: a path "
        "outside /data, /dev/shm, /run/secrets, /opt/dss"
    ]


def test_dataset_target_duplicate(raw: dict[str, Any]) -> None:
    """Two datasets on one target are refused."""
    raw["training"]["datasets"] = [
        {"source": "/mnt/a", "target": "/datasets"},
        {"source": "/mnt/b", "target": "/datasets/"},
    ]
    assert problems(raw) == [
        "training.datasets[1].target: '/datasets/' is already the target of "
        "training.datasets[0]; allowed: one mount per target"
    ]


def test_dataset_source_in_data_dir_warns(raw: dict[str, Any]) -> None:
    """A dataset source inside data_dir is a warning (mounted twice)."""
    raw["training"]["datasets"] = [{"source": "/data/sets", "target": "/datasets"}]
    assert warnings_of(raw) == [
        "training.datasets[0].source: '/data/sets' overlaps training.data_dir '/data', which "
        "the tasks already mount read-write at /data"
    ]


def test_network_name(raw: dict[str, Any]) -> None:
    """A network name Swarm refuses is refused."""
    raw["network"]["name"] = "ds.net"
    assert problems(raw) == [
        "network.name: 'ds.net' is not a network name Swarm accepts; allowed: up to 56 letters "
        "and digits, with '-' or '_' only between them"
    ]


def test_repository_name(raw: dict[str, Any]) -> None:
    """An upper-case repository is refused."""
    raw["image"] = {"repository": "DeepSpeed/train"}
    assert problems(raw) == [
        "image.repository: 'DeepSpeed/train' is not a Docker repository name; allowed: "
        "'/'-separated lower-case [a-z0-9] components joined by '.', '_', '__' or '-'"
    ]


@pytest.mark.parametrize("registry", ["https://reg.example", "reg.example:70000"])
def test_registry_host(raw: dict[str, Any], registry: str) -> None:
    """A registry with a scheme or an impossible port is refused."""
    raw["image"] = {"registry": registry}
    assert problems(raw) == [
        f"image.registry: {registry!r} is not a registry host; allowed: host[:port], e.g. "
        "'registry.example.com:5000' (no scheme, no path)"
    ]


def test_shared_docker_endpoint(raw: dict[str, Any]) -> None:
    """Two hosts on one Docker engine endpoint are refused."""
    raw["hosts"][2]["docker_host"] = "ssh://root@gpu-02"
    assert problems(raw) == [
        "hosts[].docker_host: 'ssh://root@gpu-02' is the endpoint of 2 hosts; allowed: each "
        "host its own Docker engine (one engine is one swarm node)"
    ]


def test_subnet_contains_host(raw: dict[str, Any]) -> None:
    """An overlay subnet containing a host's address is refused."""
    raw["network"]["subnet"] = "10.0.0.0/16"
    assert problems(raw)[0] == (
        "network.subnet: 10.0.0.0/16 contains hosts[0].address 10.0.0.1; allowed: a subnet "
        "clear of the hosts' addresses (tasks would shadow the host)"
    )


def test_subnet_too_small(raw: dict[str, Any]) -> None:
    """An overlay subnet without room for every host's tasks is refused."""
    raw["network"]["subnet"] = "10.20.0.0/29"
    assert problems(raw) == [
        "network.subnet: 10.20.0.0/29 has 5 usable addresses but 3 hosts need 9; allowed: a "
        "prefix with at least 12 addresses"
    ]


def test_subnet_docker_pool_warns(raw: dict[str, Any]) -> None:
    """An overlay subnet in Docker's local pool is a warning."""
    raw["network"]["subnet"] = "172.18.0.0/16"
    assert warnings_of(raw) == [
        "network.subnet: 172.18.0.0/16 overlaps 172.18.0.0/15 (Docker's local pool (docker0, "
        "docker_gwbridge)); tasks may route that range the wrong way, or the network create "
        "may be refused"
    ]


def test_subnet_ingress_warns(raw: dict[str, Any]) -> None:
    """An overlay subnet on the swarm's default ingress is a warning."""
    raw["hosts"] = [host(i, "manager" if i == 1 else "worker") for i in (1, 2, 3)]
    for h in raw["hosts"]:
        h["address"] = h["address"].replace("10.0.0.", "192.0.2.")
    raw["network"]["subnet"] = "10.0.0.0/23"
    assert warnings_of(raw) == [
        "network.subnet: 10.0.0.0/23 overlaps 10.0.0.0/24 (the swarm's default ingress "
        "network); tasks may route that range the wrong way, or the network create may be "
        "refused"
    ]


def test_host_address_not_a_name(raw: dict[str, Any]) -> None:
    """A host address that is neither an IP nor a DNS name is refused."""
    raw["hosts"][1]["address"] = "gpu_02.example"
    assert problems(raw) == [
        "hosts[1].address: 'gpu_02.example' is neither an IP address nor a DNS host name; "
        "allowed: an IP address, or dot-separated labels of letters, digits and inner '-'"
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


def test_gpu_uuid_on_two_hosts(raw: dict[str, Any]) -> None:
    """One GPU UUID pinned on two hosts is refused."""
    for h in raw["hosts"][:2]:
        h["gpus"].update(count=1, uuids=["GPU-a"])
    raw["training"]["gpus_per_node"] = 1
    assert problems(raw) == [
        "hosts[].gpus.uuids: 'GPU-a' is listed on hosts ['gpu-01', 'gpu-02']; allowed: each "
        "GPU UUID on one host"
    ]


def test_driver_version_not_numeric(raw: dict[str, Any]) -> None:
    """A minimum driver version that is not dotted numbers is refused."""
    raw["preflight"] = {"min_driver_version": "r550"}
    assert problems(raw) == [
        "preflight.min_driver_version: 'r550' is not a driver version; allowed: dotted numbers, "
        "e.g. '535.0' or '550.54.15'"
    ]


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


def test_stack_file_quotes_numeric_strings() -> None:
    """Strings that look like numbers are written quoted, so Pulumi reads them as strings."""
    text = stack_file_yaml({"deepspeed-swarm:training": {"args": ["--lr", "1e-3"], "steps": 10}})
    assert '- "1e-3"' in text and "steps: 10" in text, text


def test_stack_file_values_read_back_what_stack_file_yaml_writes() -> None:
    """A stack file written by `stack_file_yaml` reads back to the same raw values,
    prefix stripped (tests and benches rely on the pair)."""
    from infra.config import stack_file_values, stack_file_yaml

    raw = {"training": {"args": ["--lr", "1e-3"], "steps": 200}, "network": {"mtu": 9000}}
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    assert stack_file_values(text) == raw


def test_load_reports_a_bad_config_without_a_traceback(mocks: object, raw: dict[str, Any]) -> None:
    """load() raises a RunError (the engine prints its message alone), naming the key."""
    import pulumi

    from infra import config
    from tests.unit.infra.samples import set_stack_config

    raw["network"]["mtu"] = 9100
    set_stack_config(raw)
    with pytest.raises(pulumi.RunError, match=r"network\.mtu: 9100 \+ 50 .*allowed"):
        config.load()


# -- monitoring (issue 12) -------------------------------------------------------------
def monitored(raw: dict[str, Any], **monitoring: Any) -> dict[str, Any]:
    """raw with monitoring on, plus `monitoring` keys."""
    raw["monitoring"] = {"enabled": True, **monitoring}
    return raw


def test_monitoring_is_off_by_default() -> None:
    """The committed stacks deploy no monitoring unless they say so."""
    for stack in ("dev", "prod"):
        assert not parse_stack_config(stack_config(stack), {"secrets"}).monitoring.enabled, stack


def test_rank_metrics_ports_clear_of_the_master_port(raw: dict[str, Any]) -> None:
    """A rank metrics port range (8 ranks per node) reaching the master port is refused."""
    monitored(raw, rank_metrics_port=29495)
    assert problems(raw) == [
        "monitoring.rank_metrics_port: local rank 5 would serve on 29500, which is "
        "training.master_port; allowed: a base port whose 8 ports (29495-29502) avoid "
        "[2222, 2377, 4789, 7946, 29500]"
    ]


def test_rank_metrics_ports_are_not_checked_when_off(raw: dict[str, Any]) -> None:
    """With monitoring off no rank serves metrics: the port is not checked."""
    raw["monitoring"] = {"rank_metrics_port": 29500}
    assert not parse_stack_config(raw).monitoring.enabled


def test_prometheus_port_clear_of_swarm(raw: dict[str, Any]) -> None:
    """Prometheus published on a port Swarm holds on the master host is refused."""
    monitored(raw, prometheus_port=7946)
    assert problems(raw) == [
        "monitoring.prometheus_port: 7946 is published on the master host, where it is swarm "
        "gossip; allowed: any port except [22, 2377, 4789, 7946]"
    ]


def test_prometheus_needs_a_manager_master(raw: dict[str, Any]) -> None:
    """Prometheus runs on the master host, which must be a manager."""
    raw["hosts"][0]["role"], raw["hosts"][1]["role"] = "worker", "manager"
    monitored(raw)
    assert problems(raw) == [
        "monitoring.enabled: Prometheus runs on the master host 'gpu-01', which has role "
        "'worker'; allowed: a manager as hosts[0] (the master)"
    ]


def test_subnet_room_for_monitoring(raw: dict[str, Any]) -> None:
    """With monitoring, the overlay also needs a node exporter per host and Prometheus."""
    raw["hosts"].append(host(4))
    raw["network"]["subnet"] = "10.20.0.0/28"
    assert parse_stack_config(raw), "4 hosts fit a /28 without monitoring"
    assert problems(monitored(raw)) == [
        "network.subnet: 10.20.0.0/28 has 13 usable addresses but 4 hosts need 17; allowed: a "
        "prefix with at least 20 addresses"
    ]


def test_retention_is_a_prometheus_duration(raw: dict[str, Any]) -> None:
    """A retention Prometheus cannot read is refused, naming the units."""
    monitored(raw, retention="two weeks")
    assert problems(raw) == [
        "monitoring.retention: allowed: a Prometheus duration: <n> and one of ms, s, m, h, d, "
        "w, y (got 'two weeks')"
    ]


def test_stall_window_needs_three_intervals(raw: dict[str, Any]) -> None:
    """Fewer than 3 scrape intervals cannot tell a stalled rank from scrape jitter."""
    monitored(raw, alerts={"stall_intervals": 2})
    assert problems(raw) == [
        "monitoring.alerts.stall_intervals: Input should be greater than or equal to 3 (got 2)"
    ]


def test_slow_evaluation_warns(raw: dict[str, Any]) -> None:
    """Rules evaluated less often than the data arrives are a warning."""
    monitored(raw, evaluation_interval="1m")
    assert warnings_of(raw) == [
        "monitoring.evaluation_interval: 1m is longer than monitoring.scrape_interval 15s: "
        "alerts see new samples late"
    ]


def test_metrics_env_is_derived(raw: dict[str, Any]) -> None:
    """DSS_METRICS_PORT in training.env is refused: monitoring.rank_metrics_port sets it."""
    raw["training"]["env"] = {"DSS_METRICS_PORT": "9999"}
    assert problems(raw) == [
        "training.env: DSS_METRICS_PORT is derived from monitoring.rank_metrics_port; allowed: "
        "set that key instead"
    ]
