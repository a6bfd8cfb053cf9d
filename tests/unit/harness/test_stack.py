"""harness.stack: the Pulumi CLI driver, against a stand-in `pulumi` that echoes its
arguments (the real engine runs in tests/engine)."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import ROOT
from harness.stack import Pulumi, PulumiFailed, Stack

pytestmark = pytest.mark.unit

# Prints its arguments; exits with FAKE_RC; says a secret on stderr for `secret`; runs
# on for `wait`.
FAKE_PULUMI = """#!/bin/sh
echo "args: $*"
case "$1" in
  secret) echo "s3cr3t" >&2 ;;
  wait) sleep 60 ;;
esac
exit "${FAKE_RC:-0}"
"""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A throwaway stack whose `pulumi` is the stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    made = Stack("test-harness-unit", tmp_path / "work", {"deepspeed-swarm:x": 1})
    made.env["PATH"] = f"{bin_dir}{os.pathsep}{made.env['PATH']}"
    try:
        yield made
    finally:
        made.config_file.unlink(missing_ok=True)


def test_argv_names_the_stack_and_the_project() -> None:
    """Every command is non-interactive for one stack, from the project unless told."""
    plain = ["pulumi", "up", "--stack", "dev", "--non-interactive"]
    assert Pulumi("dev").argv("up") == [*plain, "--cwd", str(ROOT)]
    assert Pulumi("dev", cwd=None).argv("up") == plain


def test_stack_has_its_own_backend_passphrase_and_stack_file(stack: Stack) -> None:
    """State under the workdir, a passphrase of its own, the config beside Pulumi.yaml."""
    assert stack.env["PULUMI_BACKEND_URL"] == f"file://{stack.workdir / 'state'}"
    assert len(stack.env["PULUMI_CONFIG_PASSPHRASE"]) == 32
    assert stack.config_file == ROOT / "Pulumi.test-harness-unit.yaml"
    assert "deepspeed-swarm:x: 1" in stack.config_file.read_text()


def test_transcript_keeps_what_the_engine_printed(stack: Stack) -> None:
    """stdout and stderr of recorded commands are in the transcript; `record=False` not."""
    stack.pulumi("secret")
    stack.pulumi("stack", "output", record=False)
    printed = "\n".join(stack.transcript)
    assert "s3cr3t" in printed and "args: secret --stack test-harness-unit" in printed
    assert "args: stack output" not in printed


def test_a_failed_command_fails_with_its_output(stack: Stack) -> None:
    """A non-zero exit raises PulumiFailed naming the command and what it printed;
    with check=False the result is returned."""
    stack.env["FAKE_RC"] = "3"
    with pytest.raises(PulumiFailed, match=r"pulumi up --yes exited 3\nargs: up --yes"):
        stack.pulumi("up", "--yes")
    assert stack.pulumi("preview", check=False).returncode == 3


def test_start_runs_in_a_session_of_its_own(stack: Stack) -> None:
    """A background command leads its own session (a fault test kills it with its plugins)."""
    proc = stack.start("wait")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("args: wait --stack test-harness-unit")
        assert os.getsid(proc.pid) == proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def test_remove_destroys_with_refresh_and_drops_the_stack_file(stack: Stack) -> None:
    """Cleanup refreshes first (objects removed by hand), then removes stack and file."""
    stack.remove()
    printed = "\n".join(stack.transcript)
    assert "args: destroy --refresh --yes --skip-preview" in printed
    assert "args: stack rm --yes --force" in printed
    assert not stack.config_file.exists()


def test_echo_hides_the_secret_values_set(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """`init` sets the secrets on the command line; the echoed command shows `[secret]`."""
    stack.init({"wandb_api_key": "wandb-unit-9f3c"})
    echoed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert any("secrets.wandb_api_key [secret] " in line for line in echoed), echoed
    assert not [line for line in echoed if "wandb-unit-9f3c" in line], echoed
