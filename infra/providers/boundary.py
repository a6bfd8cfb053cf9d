"""The boundary between the Pulumi engine and this program's dynamic providers.

The engine carries properties as protobuf `Struct`s, whose only number type is a
double: an `int` the program registers reaches a provider as `22.0`, in `props`,
`olds` and `news` alike (seen under the real engine: `ssh root@host:22.0` ->
"Bad port '22.0'"). Mocks pass Python values through untouched, so they never
show it. Every provider here derives from `BoundaryProvider`, which normalises
what each method receives exactly once, before any provider code runs; the
providers themselves then see the types the program sent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pulumi.dynamic import DiffResult, ResourceProvider

# The ResourceProvider methods the engine calls with properties.
_ENGINE_METHODS = ("check", "create", "diff", "update", "read", "delete")


def normalize(value: Any) -> Any:
    """Integral floats back to ints, recursively through dicts and lists.

    Every number in this program's dynamic inputs is an integer (ports, counts,
    MTUs, timeouts), so an integral double can only be an int that crossed the
    wire; other floats are left alone.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def _normalizing(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: ResourceProvider, *args: Any) -> Any:
        return method(self, *(normalize(a) for a in args))

    call.__dss_normalizing__ = True  # type: ignore[attr-defined]  # marker read by tests
    return call


class BoundaryProvider(ResourceProvider):
    """A dynamic provider whose engine-facing methods receive normalised properties."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _ENGINE_METHODS:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__dss_normalizing__", False):
                setattr(cls, name, _normalizing(method))


def diff_keys(
    olds: dict[str, Any],
    news: dict[str, Any],
    keys: tuple[str, ...],
    *,
    replace_on: tuple[str, ...] = (),
    delete_before_replace: bool = False,
) -> DiffResult:
    """Compare `keys`; replace when one in `replace_on` changed. (The Python SDK's
    DiffResult cannot name changed keys, so a preview shows the properties that
    differ, not the provider's reasons.)"""
    changed = [k for k in keys if olds.get(k) != news.get(k)]
    return DiffResult(
        changes=bool(changed),
        replaces=[k for k in changed if k in replace_on],
        delete_before_replace=delete_before_replace,
    )
