"""infra.config.models: field types, ranges and per-model validators, and derived views."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import monitored, problems
from tests.unit.infra.samples import host, stack_config

pytestmark = pytest.mark.unit


def test_valid_config_parses(raw: dict[str, Any]) -> None:
    """A sound three-host config validates into models."""
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.hosts] == ["gpu-01", "gpu-02", "gpu-03"]
    assert cfg.leader.name == "gpu-01" and cfg.master.name == "gpu-01"


def test_spare_is_not_a_training_host(raw: dict[str, Any]) -> None:
    """A spare adds no rank and no worker task: world size and workers leave it out."""
    raw["hosts"].append({**host(4), "spare": True})
    raw["training"] = {"gpus_per_node": 8, "procs_per_node": 1}
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.workers] == ["gpu-02", "gpu-03"]
    assert [h.name for h in cfg.training_hosts] == ["gpu-01", "gpu-02", "gpu-03"]
    assert cfg.world_size == 24


def test_drained_host_leaves_training(raw: dict[str, Any]) -> None:
    """A drained host carries no task: neither a training host nor an active one."""
    raw["hosts"][2]["availability"] = "drain"
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.training_hosts] == ["gpu-01", "gpu-02"]
    assert [h.name for h in cfg.active_hosts] == ["gpu-01", "gpu-02"]
    assert cfg.world_size == 16


@pytest.mark.parametrize("mtu", [1279, 9217])
def test_mtu_out_of_range(raw: dict[str, Any], mtu: int) -> None:
    """An overlay MTU outside 1280-9216 is refused with the range."""
    raw["network"]["mtu"] = mtu
    bound = "greater than or equal to 1280" if mtu < 1280 else "less than or equal to 9216"
    assert problems(raw) == [f"network.mtu: Input should be {bound} (got {mtu})"]


def test_unknown_launcher(raw: dict[str, Any]) -> None:
    """An unknown launcher is refused with the allowed ones."""
    raw["training"]["launcher"] = "mpirun"
    assert problems(raw) == [
        "training.launcher: Input should be 'deepspeed' or 'torchrun' (got 'mpirun')"
    ]


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


def test_service_labels_follow_the_label_rule(raw: dict[str, Any]) -> None:
    """The training services' extra labels obey the same key rule as node labels."""
    raw["training"]["service_labels"] = {"team": "nlp", "dss.role": "x"}
    assert problems(raw) == [
        "training.service_labels: label key 'dss.role' is not allowed; allowed: lower-case "
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


def test_monitoring_is_off_by_default() -> None:
    """The committed stacks deploy no monitoring unless they say so."""
    for stack in ("dev", "prod"):
        assert not parse_stack_config(stack_config(stack), {"secrets"}).monitoring.enabled, stack


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


def test_command_of_non_words_is_refused_by_its_type(raw: dict[str, Any]) -> None:
    """A command list of numbers is a type error naming the key, not a crash."""
    raw["training"]["command"] = [1]
    assert (
        problems(raw)[0] == "training.command.list[str][0]: Input should be a valid string (got 1)"
    )


def _named_job(*hosts: str) -> dict[str, Any]:
    """lab8 as a job that names `hosts`."""
    raw = stack_config("lab8")
    raw.pop("secrets", None)
    raw.update(kind="job", cluster="lab8")
    raw["training"].update(run_name="exp-n", hosts=list(hosts))
    return raw


def test_named_hosts_are_the_training_hosts_master_first() -> None:
    """A job's named hosts are its training hosts in their order; its master the first."""
    cfg = parse_stack_config(_named_job("lab-h6", "lab-h2"))
    assert [h.name for h in cfg.training_hosts] == ["lab-h6", "lab-h2"]
    assert cfg.master.name == "lab-h6" and [h.name for h in cfg.workers] == ["lab-h2"]
    assert cfg.world_size == 2 * cfg.training.ranks_per_node


def test_named_hosts_leave_every_other_training_host_unused() -> None:
    """Every active training host a job does not name is unused by it; the spare is not."""
    cfg = parse_stack_config(_named_job("lab-h6", "lab-h2"))
    assert [h.name for h in cfg.unused_hosts] == [f"lab-h{i}" for i in (1, 3, 4, 5, 7, 8)]


def test_monitoring_judges_the_clusters_first_host_not_a_jobs_master() -> None:
    """Prometheus runs on the cluster's first host: a job's master on a worker is fine."""
    raw = monitored(_named_job("lab-h6", "lab-h7"))
    assert parse_stack_config(raw).master.role == "worker"
