"""infra.render.scriptenv: the table of what a command's script sees is the renderer's
own variables, and docs/jobs.md holds the table the code generates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.render import scriptenv
from infra.render.command import run_variables
from tests.unit.infra.render.test_command import training

pytestmark = pytest.mark.unit


def test_docs_hold_the_generated_table() -> None:
    """docs/jobs.md's "What a script sees" table is the one generated from the code."""
    page = scriptenv.DOCS_PATH.read_text()
    assert scriptenv.START in page and scriptenv.END in page, "docs/jobs.md lost its markers"
    assert page == scriptenv.with_table(page), (
        "docs/jobs.md's script table is stale: run `python -m infra.render.scriptenv --update-docs`"
    )


def test_the_table_names_every_variable_the_renderer_writes(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """A per-node launch's env file holds exactly the documented run variables."""
    t = training(raw, tmp_path, "torchrun train.py")
    written = run_variables(t, "/data/code/run/abc", ["10.0.1.3"], 0, "/opt/dss/ds.json")
    assert list(written) == [v.name for v in scriptenv.RUN_VARIABLES]


def test_only_the_node_rank_is_per_node(raw: dict[str, Any], tmp_path: Path) -> None:
    """The pdsh launch (no node rank) writes all but DSS_NODE_RANK, which the table says
    only per-node launches set."""
    t = training(raw, tmp_path, "deepspeed train.py")
    written = run_variables(t, "/data/code/run/abc", ["10.0.1.3"], None, "/opt/dss/ds.json")
    per_node = [v.name for v in scriptenv.RUN_VARIABLES if v.launchers == scriptenv.PER_NODE]
    assert per_node == ["DSS_NODE_RANK"]
    assert set(written) == {v.name for v in scriptenv.RUN_VARIABLES} - {"DSS_NODE_RANK"}


def test_with_table_rewrites_only_between_the_markers() -> None:
    page = f"intro\n{scriptenv.START}\nstale\n{scriptenv.END}\nafter\n"
    text = scriptenv.with_table(page)
    assert text.startswith(f"intro\n{scriptenv.START}\n| variable | set by |")
    assert text.endswith(f"{scriptenv.END}\nafter\n") and "stale" not in text


def test_a_row_has_four_cells() -> None:
    """Every generated row has its four cells (a `|` in a meaning would break one)."""
    for line in scriptenv.table().splitlines():
        assert line.count("|") == 5, line
