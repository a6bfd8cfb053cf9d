"""infra.config.rules.mounts: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import problems, warnings_of

pytestmark = pytest.mark.unit


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


def test_prometheus_storage_relative_path(raw: dict[str, Any]) -> None:
    """A relative Prometheus storage path (Docker would take it as a volume name) is refused."""
    raw["monitoring"] = {"enabled": True, "storage": "prom/data"}
    assert problems(raw) == [
        "monitoring.storage: 'prom/data' is neither an absolute host path nor a Docker volume "
        "name (Docker would take a relative path as a volume name and refuse it); allowed: an "
        "absolute path on the master host, or a volume name of letters, digits, '_', '.' and "
        "'-' (at least 2 characters)"
    ]


@pytest.mark.parametrize("storage", ["dss-prometheus", "/data/prometheus"])
def test_prometheus_storage_volume_or_path(raw: dict[str, Any], storage: str) -> None:
    """A volume name or an absolute host path is accepted."""
    raw["monitoring"] = {"enabled": True, "storage": storage}
    assert parse_stack_config(raw).monitoring.storage == storage


def test_prometheus_storage_unchecked_when_off(raw: dict[str, Any]) -> None:
    """With monitoring off nothing is mounted: the storage is not checked."""
    raw["monitoring"] = {"storage": "./prom"}
    assert not parse_stack_config(raw).monitoring.enabled
