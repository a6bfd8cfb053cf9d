"""infra.versions: release versions as hosts print them, compared on their numbers."""

from __future__ import annotations

import pytest

from infra.versions import older_than, release_key

pytestmark = pytest.mark.unit


def test_release_key() -> None:
    """Numeric release first; a `-` suffix is a pre-release, a `+` suffix build metadata."""
    assert release_key("1.19.0-rc.2") == ((1, 19, 0), False)
    assert release_key("20.10.24+dfsg1") == ((20, 10, 24), True)
    assert release_key("v1.18") == ((1, 18, 0), True)
    assert release_key("1.19.0-rc.7") < release_key("1.19.0") < release_key("1.19.1")


@pytest.mark.parametrize(
    ("version", "release", "older"),
    [
        ("20.10.24+dfsg1", "23.0.2", True),
        ("23.0.2", "23.0.2", False),
        ("25.0.3-rc.1", "25.0.3", False),
        ("28.5.2", "25.0.3", False),
        ("19.03.15", "20.10.0", True),
    ],
)
def test_older_than_compares_the_numbers(version: str, release: str, older: bool) -> None:
    """`older_than` compares the numeric releases only (build and pre-release marks ignored)."""
    assert older_than(version, release) is older
