"""Golden files: rendered text compared byte for byte with the file committed beside
its test. `DSS_UPDATE_GOLDEN=1` rewrites the file instead (review the diff)."""

from __future__ import annotations

import os
from pathlib import Path


def check_golden(path: Path, text: str) -> None:
    """`text` equals the golden file `path`; with DSS_UPDATE_GOLDEN=1 it is written there
    first (its folder made)."""
    if os.environ.get("DSS_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), (
        f"{path.name} differs from its golden file (DSS_UPDATE_GOLDEN=1)"
    )
