"""Prometheus' HTTP API, as the engine tests and benchmarks read it."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from harness.waits import wait_for

T = TypeVar("T")


def api(base: str, path: str, **params: str) -> Any:
    """GET Prometheus' HTTP API at `base` (prometheusAddress); the `data` field."""
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", f"{url}: {body}"
    return body["data"]


def query(base: str, promql: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(base, "query", query=promql)["result"]
    return result


def firing(base: str, alertname: str = "", **labels: str) -> list[dict[str, Any]]:
    """The alerts firing now: only those named `alertname` when given, and only those
    carrying each of `labels`."""
    return [
        a
        for a in api(base, "alerts")["alerts"]
        if a["state"] == "firing"
        and alertname in ("", a["labels"]["alertname"])
        and all(a["labels"].get(k) == v for k, v in labels.items())
    ]


def wait_for_prom(
    what: str, check: Callable[[], T | None], timeout: float, interval: float = 5.0
) -> T:
    """`wait_for` on Prometheus' API: while it is not answering yet, poll on."""
    return wait_for(what, check, timeout, interval, ignore=(OSError,))
