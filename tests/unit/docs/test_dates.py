"""The README, CONTRIBUTING and the reference pages say what the program does, not when it was
measured: a date (20YY-MM-DD) belongs in docs/benchmarks.md, beside its figure and command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.infra.samples import ROOT

pytestmark = pytest.mark.unit

DATE = re.compile(r"20\d\d-\d\d-\d\d")
# The pages that keep dates: the figures' own page and any changelog.
DATED = {ROOT / "docs" / "benchmarks.md"}


def pages() -> list[Path]:
    """README.md, CONTRIBUTING.md and docs/*.md, less the pages that keep dates."""
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in found if p not in DATED and "changelog" not in p.name.lower()]


def test_the_pages_checked_are_there() -> None:
    """The README, CONTRIBUTING and the reference pages are found: the glob is not empty."""
    names = {p.relative_to(ROOT).as_posix() for p in pages()}
    assert {"README.md", "CONTRIBUTING.md", "docs/run.md"} <= names, sorted(names)
    assert "docs/benchmarks.md" not in names


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_dates_outside_the_benchmarks(page: Path) -> None:
    """A reference page holds no date: dated figures and their runs go to docs/benchmarks.md."""
    hits = [
        f"{page.relative_to(ROOT)}:{n}: {m.group(0)}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for m in DATE.finditer(line)
    ]
    assert not hits, (
        "dates outside docs/benchmarks.md (move the dated figure there with its command, "
        "and say in this page what the program does, linking to it):\n" + "\n".join(hits)
    )
