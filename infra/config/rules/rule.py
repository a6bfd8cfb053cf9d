"""A cross-key rule: its key, severity, the summary docs/configuration.md shows, and
its check (infra/config/rules/__init__.py registers them in the order they run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    """A cross-key rule: errors refuse the stack, warnings show in the preview."""

    key: str
    severity: Severity
    summary: str
    check: Callable[[StackConfig], list[str]]
