"""The project's checkout as the operator's commands see it: its root (`ROOT`) and the
real Pulumi CLI driven for one of its stacks (`Pulumi`: `pulumi <args> --stack S
--non-interactive`). Product code (ops/recover.py, the job command) takes both from
here; the test rig builds on them (harness.stack's throwaway `Stack`), never the
other way round.

Why the CLI and not `pulumi.automation`: the tests assert on what the CLI prints and
exits with (`--expect-no-changes`, `refresh --preview-only`, the lock message, `cancel`),
the fault tests SIGKILL a running CLI together with its plugins (its own session), and
the secret-leak greps read exactly what the engine printed. The automation API wraps
the same CLI in a thread, without a process to signal.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The project root (Pulumi.yaml, `__main__.py`, the committed stack files)."""


class PulumiFailed(AssertionError):
    """`pulumi` exited non-zero (an AssertionError: tests report it as a failure)."""


def check_exit(args: tuple[str, ...], proc: subprocess.CompletedProcess[str]) -> None:
    """Fail when `pulumi <args>` exited non-zero, with the tail of what it printed."""
    if proc.returncode != 0:
        raise PulumiFailed(
            f"pulumi {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )


class Pulumi:
    """`pulumi <args> --stack <stack> --non-interactive [--cwd <cwd>]`, with `env` (None:
    this process's environment)."""

    def __init__(
        self,
        stack: str,
        cwd: Path | str | None = ROOT,
        env: dict[str, str] | None = None,
        timeout: float | None = 1500,
    ) -> None:
        self.stack = stack
        self.cwd = cwd
        self.env = env
        self.timeout = timeout

    def argv(self, *args: str, cwd: Path | str | None = None) -> list[str]:
        argv = ["pulumi", *args, "--stack", self.stack, "--non-interactive"]
        cwd = cwd or self.cwd
        return [*argv, "--cwd", str(cwd)] if cwd else argv

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = None,
        cwd: Path | str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `pulumi <args>` to the end (timeout: this driver's unless given) on the
        program in `cwd` (this driver's unless given); with `check`, a non-zero exit
        fails with the tail of what it printed."""
        env = self.env
        if cwd is not None and env is not None:
            # Another checkout's program (the upgrade test's previous commit) imports
            # its own packages, not this checkout's that scripts/env.sh puts on PYTHONPATH.
            env = {**env, "PYTHONPATH": str(cwd)}
        proc = subprocess.run(
            self.argv(*args, cwd=cwd),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout or self.timeout,
            check=False,
        )
        if check:
            check_exit(args, proc)
        return proc

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`pulumi <args>` in the background, stdout and stderr in one pipe."""
        # Its own session and process group: a fault test can kill the CLI with its plugins.
        return subprocess.Popen(
            self.argv(*args),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
