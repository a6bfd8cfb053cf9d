"""The program's inputs are the same on every machine: no HOME, TMPDIR or SSH agent path
of the machine that runs Pulumi reaches the state.

Why: a resource input that holds such a path changes with the CI runner or the operator,
so a preview that should be a no-op shows an update (pulumi-command re-runs `create` on
a changed `connection`), and a node's endpoint that changed would replace it. The SSH
settings keep the config's text (`~`, `%C`) for this reason (infra/render/ssh.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.infra.test_program_resources import VARIANTS, _registrations, _render

pytestmark = pytest.mark.unit

MACHINES = (
    {"HOME": "/home/alice", "TMPDIR": "/tmp/alice-t", "SSH_AUTH_SOCK": "/tmp/ssh-AAAA/agent.101"},
    {"HOME": "/var/lib/ci/runner-7", "TMPDIR": "/scratch/t", "SSH_AUTH_SOCK": "/run/user/7/a"},
)
# The launch's connection of a stack without a key file holds the operator's
# SSH_AUTH_SOCK (infra/components/launchplan.py `connection`); C3 of issue 45
# (docs/design/ssh-transport.md) drops it. Strict: the test fails once it passes.
AGENT_PATH_IN_STATE = {"prod", "prod-tls"}


def _inputs(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen = _registrations(VARIANTS[variant], tmp_path, monkeypatch, env["SSH_AUTH_SOCK"])
    return _render(seen, tmp_path)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inputs_do_not_depend_on_the_machine(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every registration is the same under two machines' HOME, TMPDIR and SSH agent
    (the launch's agent path, a known leak until C3, aside)."""
    texts = []
    for i, env in enumerate(MACHINES):
        # A folder per run: a variant writes its key and TLS files there.
        run_dir = tmp_path / f"machine-{i}"
        run_dir.mkdir()
        text = _inputs(variant, run_dir, monkeypatch, env)
        if variant in AGENT_PATH_IN_STATE:
            text = text.replace(env["SSH_AUTH_SOCK"], "<agent>")
        texts.append(text)
    assert texts[0] == texts[1], f"resources-{variant}: an input follows the machine"
    for env in MACHINES:
        for value in env.values():
            assert value not in texts[0], f"resources-{variant}: {value} in the inputs"


@pytest.mark.xfail(strict=True, reason="the launch connection holds SSH_AUTH_SOCK (issue 45, C3)")
@pytest.mark.parametrize("variant", sorted(AGENT_PATH_IN_STATE))
def test_agent_path_stays_out_of_the_inputs(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No SSH_AUTH_SOCK in any input: fails today (prod's launch), passes once C3 lands."""
    first = _inputs(variant, tmp_path, monkeypatch, MACHINES[0])
    assert MACHINES[0]["SSH_AUTH_SOCK"] not in first, f"resources-{variant}: agent path"
