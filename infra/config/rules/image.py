"""Rules about the training image: its repository, registry and build args."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from infra.config.rules.common import DNS_LABEL, pattern_problems
from infra.layout import TRAIN_UID

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

# Docker's reference grammar (distribution/reference): path components and the
# registry domain[:port].
_REPO_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_REPO_COMPONENT}(?:/{_REPO_COMPONENT})*$")
_REGISTRY = re.compile(rf"^(?:{DNS_LABEL}(?:\.{DNS_LABEL})*|\[[0-9a-fA-F:.]+\])(?::(\d+))?$")

# The project (image.context is relative to it, as in infra/components/image.py).
PROJECT_DIR = Path(__file__).resolve().parents[3]
# Build args Docker honours without an ARG line (the Dockerfile reference,
# "Predefined ARGs"), and BuildKit's own BUILDKIT_* args and SOURCE_DATE_EPOCH.
PREDEFINED_ARGS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "FTP_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SOURCE_DATE_EPOCH",
)
# `ARG NAME`, `ARG NAME=value`, `ARG A=1 B=2` (instructions are case-insensitive).
_ARG_LINE = re.compile(r"^\s*ARG\s+(.+)$", re.IGNORECASE | re.MULTILINE)
_ARG_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=.*)?$")


def dockerfile_args(text: str) -> list[str]:
    """The ARG names a Dockerfile declares, in order, each once."""
    names: list[str] = []
    for line in _ARG_LINE.findall(text):
        for word in line.split():
            m = _ARG_NAME.match(word)
            if m and m.group(1) not in names:
                names.append(m.group(1))
    return names


def declared_args(context: str, dockerfile: str) -> list[str] | None:
    """The ARGs of the image's Dockerfile; None when it is not in the project."""
    path = PROJECT_DIR / context / dockerfile
    try:
        return dockerfile_args(path.read_text())
    except OSError:
        return None


# For the reference: what the committed images/Dockerfile declares.
IMAGE_ARGS = declared_args("images", "Dockerfile") or []


def _predefined(name: str) -> bool:
    return name.upper() in PREDEFINED_ARGS or name.startswith("BUILDKIT_")


def repository(cfg: StackConfig) -> list[str]:
    return pattern_problems(
        "image.repository",
        cfg.image.repository,
        _REPOSITORY,
        "a Docker repository name",
        "'/'-separated lower-case [a-z0-9] components joined by '.', '_', '__' or '-'",
        max_len=255,
    )


def registry(cfg: StackConfig) -> list[str]:
    reg = cfg.image.registry
    if reg is None:
        return []
    m = _REGISTRY.match(reg)
    if m and (m.group(1) is None or 1 <= int(m.group(1)) <= 65535):
        return []
    return [
        f"image.registry: {reg!r} is not a registry host; allowed: host[:port], e.g. "
        "'registry.example.com:5000' (no scheme, no path)"
    ]


def build_args(cfg: StackConfig) -> list[str]:
    img = cfg.image
    declared = declared_args(img.context, img.dockerfile)
    out = []
    if declared is not None:
        # Docker builds on with only a "build-args were not consumed" warning: the
        # value would silently not reach the image.
        where = f"{img.context}/{img.dockerfile}"
        out += [
            f"image.build_args: {name} is not an ARG of {where}, so the build ignores it; "
            f"allowed: {', '.join(declared)} (the ARGs it declares), or Docker's "
            f"predefined {', '.join(PREDEFINED_ARGS)}"
            for name in img.build_args
            if name not in declared and not _predefined(name)
        ]
    uid = img.build_args.get("DSS_UID")
    if uid is not None and uid != TRAIN_UID:
        # The services, `docker exec` and the secret files use uid TRAIN_UID
        # (infra/layout.py): another uid for the image's `dss` user leaves the
        # tasks without its home, keys and sshd.
        out.append(
            f"image.build_args.DSS_UID: {uid!r} is not the uid the tasks run as; allowed: "
            f"{TRAIN_UID!r} (infra/layout.py TRAIN_UID), or leave it unset"
        )
    return out
