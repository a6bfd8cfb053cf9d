"""Changes previewed by the real engine on the dev stack, and the verdicts the PR
comment must give each (delivery/impact.py).

tests/engine/test_stack.py (`test_preview_verdicts`) makes each change on its deployed
dev stack, runs `pulumi preview --json`, checks the verdicts and, with
`DSS_UPDATE_FIXTURES=1`, writes the digest to fixtures/real/<case>.json;
tests/unit/delivery/test_real_previews.py classifies those files without an engine. One
table, so the two cannot disagree.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from delivery.impact import MONITORING, Impact
from delivery.preview import Change, stack_of

REAL = Path(__file__).parent / "fixtures" / "real"
UPDATE_ENV = "DSS_UPDATE_FIXTURES"
HOW_TO_CAPTURE = (
    f"{UPDATE_ENV}=1 .venv/bin/python -m pytest tests/engine/test_stack.py -k preview "
    "(needs the lab and the pinned toolchain), then commit tests/unit/delivery/fixtures/real/"
)
WANDB_SECRET = "wandb-4e8a1f6c-not-for-logs"
"""The deployed stack's user secret."""
NEW_SECRET = "hf-5e1d7c0a-not-for-logs"
"""The value of the secret the `new-secret` case adds."""
SECRET_VALUES = (
    WANDB_SECRET,
    NEW_SECRET,
    *(base64.b64encode(s.encode()).decode() for s in (WANDB_SECRET, NEW_SECRET)),
    "PRIVATE KEY",
)
"""What no digest may hold: the secrets, as given and as Docker is handed them, and
the generated SSH private key."""

NONE, MOVES, RESTARTS = Impact.NONE, Impact.MOVES, Impact.RESTARTS


@dataclass(frozen=True)
class Case:
    """A change made with `pulumi <argv>` on the deployed dev stack, and its verdicts:
    `expect` maps a resource (its name after `<stack>-`) to (op, impact). Every other
    change must be under the component `others` and leave training alone; with
    `others` None there must be no other change."""

    name: str
    argv: tuple[str, ...]
    expect: dict[str, tuple[str, Impact]]
    others: str | None = None
    words: dict[str, str] = field(default_factory=dict)
    """Resource -> words its reason must contain."""


# A new secret, and monitoring on, change what the training tasks mount or see (their
# spec): Swarm restarts them and the launch runs again; the run's record (whose inputs
# hold the launch's id) re-reads the run and starts nothing itself; the collective
# gate's inputs hold the roster's tasks, unknown in a preview, so it shows an update
# (in `up` it measures only if the tasks really changed, before the launch).
RESTARTED = {
    "train-master": ("update", RESTARTS),
    "train-worker": ("update", RESTARTS),
    "launch-roster": ("update", NONE),
    "launch-run": ("replace", RESTARTS),
    "launch-run-state": ("update", NONE),
    "launch-gate-allreduce": ("update", NONE),
}

CASES: tuple[Case, ...] = (
    Case(
        "ds-config",
        (
            "config",
            "set",
            "--path",
            "training.ds_config.gradient_clipping",
            "0.5",
            "--type",
            "float",
        ),
        {
            "launch-run": ("replace", RESTARTS),
            "launch-roster": ("update", NONE),
            "launch-run-state": ("update", NONE),
            "launch-gate-allreduce": ("update", NONE),
        },
        words={
            "launch-run": "restarted",
            "launch-run-state": "re-reads",
            "launch-gate-allreduce": "before the launch",
        },
    ),
    Case(
        "node-label",
        ("config", "set", "--path", "hosts[1].labels.rack", "r2"),
        {"swarm-node-lab-h2": ("update", MOVES)},
        words={"swarm-node-lab-h2": "labels"},
    ),
    Case(
        "new-secret",
        ("config", "set", "--secret", "--path", "secrets.hf_token", NEW_SECRET),
        {"secrets-hf-token": ("create", NONE), **RESTARTED},
        words={"secrets-hf-token": "not used"},
    ),
    Case(
        "monitoring-on",
        ("config", "set", "--path", "monitoring.enabled", "true", "--type", "bool"),
        RESTARTED,
        others=MONITORING,
    ),
    Case(
        "jupyter-on",
        ("config", "set", "--path", "jupyter.enabled", "true", "--type", "bool"),
        {
            "jupyter-token": ("create", NONE),
            "jupyter-token-secret": ("create", NONE),
            "jupyter-service": ("create", NONE),
        },
        words={"jupyter-service": "JupyterLab"},
    ),
)


def problems(case: Case, cs: Sequence[Change]) -> list[str]:
    """Where the classified changes differ from the case's verdicts (empty: none)."""
    if not cs:
        return [f"{case.name}: the preview proposes no change"]
    prefix = f"{stack_of(cs[0].urn)}-"
    got = {c.name.removeprefix(prefix): c for c in cs}
    out = []
    for name, (op, impact) in case.expect.items():
        c = got.get(name)
        if c is None:
            out.append(f"{case.name}: no change to {name}")
        elif (c.op, c.impact) != (op, impact):
            out.append(
                f"{case.name}: {name} is {c.op}/{c.impact.label} ({c.why}); "
                f"expected {op}/{impact.label}"
            )
        elif case.words.get(name, "") not in c.why:
            out.append(f"{case.name}: {name}: reason {c.why!r} lacks {case.words[name]!r}")
    for name, c in got.items():
        if name in case.expect:
            continue
        if case.others is None or c.component != case.others:
            out.append(f"{case.name}: unexpected change {c.op} {name} ({c.component})")
        elif c.impact is not NONE:
            out.append(f"{case.name}: {name} is {c.impact.label} ({c.why}); expected none")
    return out
