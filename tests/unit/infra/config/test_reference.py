"""infra.config.reference: docs/configuration.md is what the code generates."""

from __future__ import annotations

import pytest

from infra.config import rules_reference, with_reference
from infra.config.reference import DOCS_PATH, END, START

pytestmark = pytest.mark.unit


def test_docs_document_every_key() -> None:
    """docs/configuration.md's key and rule tables are the ones generated from the code."""
    page = DOCS_PATH.read_text()
    assert START in page and END in page, "docs/configuration.md lost its markers"
    assert page == with_reference(page), (
        "docs/configuration.md tables are stale: run `python -m infra.config --update-docs`"
    )


def test_rule_table_has_a_row_per_rule() -> None:
    """Every registered rule is one row of the generated rule table."""
    from infra.config import RULES

    assert len(rules_reference().splitlines()) == 2 + len(RULES)


def test_update_docs_rewrites_only_between_the_markers(tmp_path: object) -> None:
    """--update-docs keeps the page's text around the markers and fills in the tables."""
    from pathlib import Path

    from infra.config import update_docs

    page = Path(str(tmp_path)) / "configuration.md"
    page.write_text(f"intro\n\n{START}\nstale\n{END}\n\nafter\n")
    update_docs(page)
    text = page.read_text()
    assert text.startswith(f"intro\n\n{START}\n| key | type |") and text.endswith(
        f"{END}\n\nafter\n"
    )
    assert "stale" not in text
