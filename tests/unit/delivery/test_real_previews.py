"""The classifier over previews the real engine wrote (fixtures/real, real_cases.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from delivery import preview
from tests.unit.delivery.real_cases import (
    CASES,
    HOW_TO_CAPTURE,
    REAL,
    SECRET_VALUES,
    Case,
    problems,
)
from tests.unit.delivery.rename import renamed, verdicts

pytestmark = pytest.mark.unit


def real_text(case: Case) -> str:
    """The engine's digest of a case; a missing file fails, saying how to capture it."""
    path = REAL / f"{case.name}.json"
    if not path.exists():
        pytest.fail(f"{path.name} is missing from fixtures/real: capture it with {HOW_TO_CAPTURE}")
    return path.read_text()


def real_digest(case: Case) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(real_text(case))
    return data


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_preview_verdicts(case: Case) -> None:
    """Each change the real engine previewed gets the case's verdicts."""
    found = problems(case, preview.changes(real_digest(case)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_preview_verdicts_survive_a_rename(case: Case) -> None:
    """Renaming the stack and every resource in a real preview changes no verdict."""
    d = real_digest(case)
    assert verdicts(renamed(d)) == verdicts(d)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_preview_holds_no_secret_value(case: Case) -> None:
    """The engine masked every secret: no test secret, plain or base64, is in a digest."""
    text = real_text(case)
    leaked = [s for s in SECRET_VALUES if s in text]
    assert not leaked, f"{case.name}.json holds secret values {leaked}"
