"""Docker's spellings of durations and sizes, as the stack file writes them."""

from __future__ import annotations


def duration_seconds(value: str) -> int:
    """Seconds in a Docker duration like `120s`, `2m`, `1h` (whole units only)."""
    units = {"s": 1, "m": 60, "h": 3600}
    if value and value[-1] in units and value[:-1].isdigit():
        return int(value[:-1]) * units[value[-1]]
    raise ValueError(f"duration {value!r}: allowed forms are <n>s, <n>m, <n>h")


def size_bytes(size: str) -> int:
    """`1g` / `512m` / `65536k` / `4096` -> bytes (Docker's --shm-size spelling)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = size.strip().lower()
    if s and s[-1] in units and s[:-1].isdigit():
        return int(s[:-1]) * units[s[-1]]
    if s.isdigit():
        return int(s)
    raise ValueError(f"size {size!r}: allowed forms are <n>, <n>k, <n>m, <n>g")
