"""Small predicates the rule modules share."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Any

# RFC 1123 host name: dot-separated labels of 1-63 letters, digits and inner '-'.
DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"


def positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def enabled(section: Any) -> bool:
    return isinstance(section, dict) and section.get("enabled") is True


def overlaps(a: str, b: str) -> bool:
    """Whether one absolute path is the other or lies under it."""
    a, b = posixpath.normpath(a), posixpath.normpath(b)
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def pattern_problems(
    key: str, value: str, pattern: re.Pattern[str], what: str, allowed: str, max_len: int = 255
) -> list[str]:
    """One problem when `value` does not match `pattern` within `max_len` characters."""
    if pattern.match(value) and len(value) <= max_len:
        return []
    return [f"{key}: {value!r} is not {what}; allowed: {allowed}"]


def ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None
