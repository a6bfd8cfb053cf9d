"""infra.config.rules.image: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.infra.config.checks import problems

pytestmark = pytest.mark.unit


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
