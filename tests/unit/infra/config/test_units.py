"""infra.config.units: Docker's durations and sizes."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_duration_and_size_units() -> None:
    """Durations and sizes convert with Docker's units."""
    from infra.config import duration_seconds, size_bytes

    assert [duration_seconds(v) for v in ("90s", "2m", "1h")] == [90, 120, 3600]
    assert [size_bytes(v) for v in ("4096", "64k", "256m", "1g")] == [
        4096,
        65536,
        256 << 20,
        1 << 30,
    ]
