"""A preview digest with the stack and every resource renamed, types and properties kept:
what a renamed stack or a restructured `__main__.py` previews like to the classifier."""

from __future__ import annotations

from typing import Any

from delivery import preview


def renamed(digest: Any, stack: str = "renamed") -> Any:
    """`digest` with every URN's stack set to `stack` and its name to an opaque one
    (the same name for the same URN, wherever the URN appears)."""
    names: dict[str, str] = {}

    def urn(value: str) -> str:
        parts = value.split("::")
        name = names.setdefault(parts[3], f"r{len(names)}")
        return "::".join([f"urn:pulumi:{stack}", parts[1], parts[2], name, *parts[4:]])

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and value.startswith("urn:pulumi:"):
            return urn(value)
        return value

    return walk(digest)


def verdicts(digest: Any) -> list[tuple[str, str, str, tuple[str, ...], str, str]]:
    """Per change, in order: type, component, op, changed keys, impact, reason."""
    return [
        (c.type, c.component, c.op, c.keys, c.impact.label, c.why) for c in preview.changes(digest)
    ]
