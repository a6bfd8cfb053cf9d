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

from tests.unit.infra.samples import write_ssh_home
from tests.unit.infra.test_program_resources import VARIANTS, _registrations, _render

pytestmark = pytest.mark.unit

MACHINES = (
    {"HOME": "home/alice", "TMPDIR": "/tmp/alice-t", "SSH_AUTH_SOCK": "/tmp/ssh-AAAA/agent.101"},
    {"HOME": "ci/runner-7", "TMPDIR": "/scratch/t", "SSH_AUTH_SOCK": "/run/user/7/a"},
)
"""HOME is a folder under the test's own (with the known_hosts the program pins the
ssh:// hosts' keys from); the other values need not exist."""


def _machine(env: dict[str, str], run_dir: Path) -> dict[str, str]:
    """`env` with HOME made under `run_dir`, holding the sample known_hosts."""
    return {**env, "HOME": str(write_ssh_home(run_dir / env["HOME"]))}


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
    """Every registration is the same under two machines' HOME, TMPDIR and SSH agent."""
    texts, envs = [], []
    for i, env in enumerate(MACHINES):
        # A folder per run: a variant writes its key and TLS files there.
        run_dir = tmp_path / f"machine-{i}"
        run_dir.mkdir()
        envs.append(_machine(env, run_dir))
        texts.append(_inputs(variant, run_dir, monkeypatch, envs[-1]))
    assert texts[0] == texts[1], f"resources-{variant}: an input follows the machine"
    for env in envs:
        for value in env.values():
            assert value not in texts[0], f"resources-{variant}: {value} in the inputs"


@pytest.mark.parametrize("variant", ["prod", "prod-tls"])
def test_agent_path_stays_out_of_the_inputs(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No SSH_AUTH_SOCK in any input of the stacks without a key file: pulumi-command
    reads its own (infra/components/remote.py)."""
    first = _inputs(variant, tmp_path, monkeypatch, _machine(MACHINES[0], tmp_path))
    assert MACHINES[0]["SSH_AUTH_SOCK"] not in first, f"resources-{variant}: agent path"
