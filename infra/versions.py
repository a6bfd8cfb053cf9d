"""Release versions as the tools print them, compared on their numbers.

One parser for what a host reports of its engine and its NVIDIA container toolkit
(`20.10.24+dfsg1`, `28.5.2`, `1.19.0-rc.2`): the numeric release padded to three parts,
and whether it is a final release (a semver pre-release sorts before its release).
"""

from __future__ import annotations

import re


def release_key(version: str) -> tuple[tuple[int, ...], bool]:
    """`1.19.0-rc.2` -> ((1, 19, 0), False): the numeric release and whether it is a
    final release (a semver pre-release sorts before its release)."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)(.*)", version)
    if not m:
        return (), False
    nums = tuple(int(p) for p in m.group(1).split("."))
    nums = nums + (0,) * (3 - len(nums))
    return nums, not m.group(2).startswith("-")


def older_than(version: str, release: str) -> bool:
    """`version`'s numeric release is before `release`'s, compared on the numbers only
    (`20.10.24+dfsg1` is 20.10.24; the engines' checks ignore pre-release marks)."""
    return release_key(version)[0] < release_key(release)[0]
