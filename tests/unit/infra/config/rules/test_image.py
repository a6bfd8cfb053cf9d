"""infra.config.rules.image: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
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


def test_build_arg_not_declared(raw: dict[str, Any]) -> None:
    """A build arg images/Dockerfile does not declare is refused (Docker would ignore it)."""
    raw["image"] = {"build_args": {"TORCH_VERSION": "2.6.0"}}
    assert problems(raw) == [
        "image.build_args: TORCH_VERSION is not an ARG of images/Dockerfile, so the build "
        "ignores it; allowed: BASE_IMAGE, BUILD_IMAGE, TORCH_SPEC, PIP_OFFLINE, DS_ACCELERATOR, "
        "DS_PREBUILD_CPU_OPS, DSS_UID (the ARGs it declares), or Docker's predefined "
        "HTTP_PROXY, HTTPS_PROXY, FTP_PROXY, NO_PROXY, ALL_PROXY, SOURCE_DATE_EPOCH"
    ]


def test_declared_and_predefined_build_args_pass(raw: dict[str, Any]) -> None:
    """Declared ARGs, Docker's proxy args (any case) and BUILDKIT_* args are accepted."""
    args = {"TORCH_SPEC": "torch==2.6.0", "https_proxy": "http://proxy:3128"}
    raw["image"] = {"build_args": {**args, "BUILDKIT_INLINE_CACHE": "1"}}
    assert parse_stack_config(raw).image.build_args["TORCH_SPEC"] == "torch==2.6.0"


def test_build_args_unchecked_without_the_dockerfile(raw: dict[str, Any]) -> None:
    """A Dockerfile outside the project cannot be read: its args are not checked."""
    raw["image"] = {"context": "no-such-context", "build_args": {"ANYTHING": "1"}}
    assert parse_stack_config(raw).image.build_args == {"ANYTHING": "1"}


def test_dss_uid_must_be_the_task_uid(raw: dict[str, Any]) -> None:
    """DSS_UID other than the uid the tasks run as is refused."""
    raw["image"] = {"build_args": {"DSS_UID": "1001"}}
    assert problems(raw) == [
        "image.build_args.DSS_UID: '1001' is not the uid the tasks run as; allowed: '1000' "
        "(infra/layout.py TRAIN_UID), or leave it unset"
    ]


def test_dockerfile_args_parses_arg_lines() -> None:
    """ARG lines with and without defaults, several per line, any case, each name once."""
    from infra.config.rules.image import dockerfile_args

    text = 'ARG A\nFROM x\narg B=1 C="two"\n# ARG D\nRUN echo ARG E\nARG A=2\n'
    assert dockerfile_args(text) == ["A", "B", "C"]
