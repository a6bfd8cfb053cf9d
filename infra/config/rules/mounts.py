"""Rules about what the tasks mount: binds, their targets, Prometheus' storage."""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from infra.config.rules.common import overlaps
from infra.layout import DATA_MOUNT, IMAGE_HOME, SECRETS_DIR, SHM_MOUNT

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

# Where the stack itself mounts into every task (infra/render/taskspecs.py) and where the
# image keeps its code (images/Dockerfile); a dataset mount must stay clear of them.
RESERVED_TARGETS = {
    DATA_MOUNT: "training.data_dir",
    SHM_MOUNT: "training.shm_size",
    SECRETS_DIR: "secrets",
    IMAGE_HOME: "the image home",
}
# Docker's volume name rule (daemon/names RestrictedNamePattern).
_VOLUME_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


def _mounts(cfg: StackConfig) -> list[tuple[str, str, str]]:
    """(config key, source, target) of every bind the tasks get."""
    t = cfg.training
    return [
        ("training.data_dir", t.data_dir, DATA_MOUNT),
        *((f"training.datasets[{i}]", m.source, m.target) for i, m in enumerate(t.datasets)),
    ]


def absolute_paths(cfg: StackConfig) -> list[str]:
    out = []
    for key, source, target in _mounts(cfg):
        for part, path in (("source", source), ("target", target)):
            if not path.startswith("/"):
                where = key if key == "training.data_dir" else f"{key}.{part}"
                out.append(
                    f"{where}: {path!r} is a relative path; allowed: an absolute path "
                    "(Docker bind mounts take no relative paths)"
                )
    return out


def mount_targets(cfg: StackConfig) -> list[str]:
    out = []
    seen: dict[str, str] = {}
    for key, _, target in _mounts(cfg)[1:]:
        norm = posixpath.normpath(target)
        taken = [p for p in RESERVED_TARGETS if overlaps(norm, p)]
        if taken:
            out.append(
                f"{key}.target: {target!r} collides with {taken[0]} "
                f"({RESERVED_TARGETS[taken[0]]}); allowed: a path outside "
                f"{', '.join(RESERVED_TARGETS)}"
            )
        elif norm in seen:
            out.append(
                f"{key}.target: {target!r} is already the target of {seen[norm]}; "
                "allowed: one mount per target"
            )
        seen.setdefault(norm, key)
    return out


def dataset_sources(cfg: StackConfig) -> list[str]:
    t = cfg.training
    return [
        f"training.datasets[{i}].source: {m.source!r} overlaps training.data_dir "
        f"{t.data_dir!r}, which the tasks already mount read-write at {DATA_MOUNT}"
        for i, m in enumerate(t.datasets)
        if overlaps(m.source, t.data_dir)
    ]


def prometheus_storage(cfg: StackConfig) -> list[str]:
    # infra/components/monitoring.py binds an absolute path and takes anything else as a
    # volume name: a relative path (`prom/data`, `./prom`) reaches the node as a
    # volume name Docker refuses, and the task never starts.
    mon = cfg.monitoring
    if not mon.enabled or mon.storage.startswith("/") or _VOLUME_NAME.match(mon.storage):
        return []
    return [
        f"monitoring.storage: {mon.storage!r} is neither an absolute host path nor a Docker "
        "volume name (Docker would take a relative path as a volume name and refuse it); "
        "allowed: an absolute path on the master host, or a volume name of letters, digits, "
        "'_', '.' and '-' (at least 2 characters)"
    ]
