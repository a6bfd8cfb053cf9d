"""The PR comment's classifier (delivery/impact.py) on the real engine's `pulumi preview
--json`: the dev stack is brought up once, then each change of
tests/unit/delivery/real_cases.py is made in its stack file, previewed and undone (the
state never changes). With `DSS_UPDATE_FIXTURES=1` each digest is also written to
tests/unit/delivery/fixtures/real/<case>.json, which the unit suite classifies.

Costs one lab (2 hosts), one `up` of the dev stack and a preview per case.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from delivery.preview import changes
from harness import ROOT
from harness.configs import dev_config
from harness.stack import Stack
from tests.unit.delivery.real_cases import (
    CASES,
    REAL,
    SECRET_VALUES,
    UPDATE_ENV,
    WANDB_SECRET,
    Case,
    problems,
)

pytestmark = pytest.mark.engine

RUN = "previewtest"
# Fields of the digest that hold the capturing machine's paths (the program's source).
MACHINE_FIELDS = ("sourcePosition", "stackTrace")


@pytest.fixture(scope="module")
def deployed(lab: dict[str, Any], make_stack: Any) -> Stack:
    """The dev stack, up once, with the image's DeepSpeed config inline (so that a
    ds_config change is a stack change, as on lab8)."""
    ds_config = json.loads((ROOT / "images" / "ds_config.json").read_text())
    config = dev_config(run_name=RUN, steps=2000, checkpoint_every=50, ds_config=ds_config)
    stack: Stack = make_stack("test-preview", config, {"wandb_api_key": WANDB_SECRET})
    stack.pulumi("up", "--yes", "--skip-preview")
    stack.pulumi("preview", "--expect-no-changes")
    return stack


def preview_of(stack: Stack, case: Case) -> str:
    """`pulumi preview --json` with the case's change made; the stack file (its salt
    and secure values included) is restored after, whatever happens."""
    before = stack.config_file.read_text()
    try:
        # record=False: the argv may hold the new secret's value.
        stack.pulumi(*case.argv, record=False)
        return stack.pulumi("preview", "--json").stdout
    finally:
        stack.config_file.write_text(before)


def scrubbed(text: str, stack: Stack) -> str:
    """The digest as committed: machine fields dropped, this machine's paths replaced."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if k not in MACHINE_FIELDS}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = json.dumps(walk(json.loads(text)), indent=4) + "\n"
    for path, marker in (
        (stack.workdir, "<workdir>"),
        (ROOT, "<project>"),
        (Path.home(), "<home>"),
    ):
        if str(path) not in ("", "/"):
            out = out.replace(f"{path}/", f"{marker}/").replace(f'"{path}"', f'"{marker}"')
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_preview_verdicts(deployed: Stack, case: Case) -> None:
    """Each change, previewed by the real engine, gets the case's training impacts; the
    digest holds no secret value (the engine masks them)."""
    text = preview_of(deployed, case)
    leaked = [s for s in SECRET_VALUES if s in text]
    assert not leaked, f"{case.name}: the preview JSON holds secret values {leaked}"
    if os.environ.get(UPDATE_ENV) == "1":
        REAL.mkdir(parents=True, exist_ok=True)
        (REAL / f"{case.name}.json").write_text(scrubbed(text, deployed))
    found = problems(case, changes(json.loads(text)))
    assert not found, "\n".join(found)


def test_previews_left_the_stack_unchanged(deployed: Stack) -> None:
    """After the previews and the restored stack file, the stack is a no-op again."""
    deployed.pulumi("preview", "--expect-no-changes")
