"""infra.config.stackfile: stack files written and read back."""

from __future__ import annotations

import pytest

from infra.config import stack_file_yaml

pytestmark = pytest.mark.unit


def test_stack_file_quotes_numeric_strings() -> None:
    """Strings that look like numbers are written quoted, so Pulumi reads them as strings."""
    text = stack_file_yaml({"deepspeed-swarm:training": {"args": ["--lr", "1e-3"], "steps": 10}})
    assert '- "1e-3"' in text and "steps: 10" in text, text


def test_stack_file_values_read_back_what_stack_file_yaml_writes() -> None:
    """A stack file written by `stack_file_yaml` reads back to the same raw values,
    prefix stripped (tests and benches rely on the pair)."""
    from infra.config import stack_file_values, stack_file_yaml

    raw = {"training": {"args": ["--lr", "1e-3"], "steps": 200}, "network": {"mtu": 9000}}
    text = stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()})
    assert stack_file_values(text) == raw
