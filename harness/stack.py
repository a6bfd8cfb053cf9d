"""Throwaway stacks of this project for the tests and benchmarks: `Stack` is a stack with
its own file backend and passphrase (tests/engine, tests/acceptance, bench), on the
product's Pulumi CLI driver (`ops.project.Pulumi`, which ops/recover.py drives on an
operator's stack; re-exported here with `PulumiFailed` and `check_exit`).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import ROOT
from ops.project import Pulumi, PulumiFailed, check_exit

__all__ = ["Pulumi", "PulumiFailed", "Stack", "check_exit", "project_env", "restarting"]


def project_env() -> dict[str, str]:
    """The environment scripts/env.sh sets up: the pinned toolchain on PATH, PULUMI_HOME,
    no update checks or plugin downloads, the project on PYTHONPATH."""
    out = subprocess.run(
        ["bash", "-c", '. "$1/scripts/env.sh" && env -0', "bash", str(ROOT)],
        check=True,
        capture_output=True,
    ).stdout
    pairs = (item.split(b"=", 1) for item in out.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}


class Stack(Pulumi):
    """A throwaway stack of this project: its stack file beside Pulumi.yaml, its state
    under `workdir/state`, a passphrase of its own, and a transcript of everything the
    engine printed for it (what the secret-leak greps read)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        config: dict[str, Any],
        timeout: float | None = 1500,
        echo: bool = True,
    ) -> None:
        from infra.config import stack_file_yaml

        env = project_env()
        env.update(
            PULUMI_BACKEND_URL=f"file://{workdir / 'state'}",
            PULUMI_CONFIG_PASSPHRASE=secrets.token_hex(16),
        )
        super().__init__(name, ROOT, env, timeout)
        self.name = name
        self.workdir = workdir
        self.env: dict[str, str] = env
        self.echo = echo
        """Write each command and the tail of its output to stdout (pytest shows it
        for a failed test; benchmarks keep their stdout for the table)."""
        # Stack files live beside Pulumi.yaml (where `stack init` writes the
        # passphrase salt); `Pulumi.test-*.yaml` is git-ignored and removed after.
        self.config_file = ROOT / f"Pulumi.{name}.yaml"
        self.transcript: list[str] = []
        """Everything the engine printed for this stack (for secret-leak greps)."""
        self.hidden: set[str] = set()
        """Secret values set on the command line, shown as `[secret]` where a command is
        echoed (the echo is a log like any other)."""
        (workdir / "state").mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(stack_file_yaml(config))

    def pulumi(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = None,
        record: bool = True,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `pulumi <args>` for this stack on the program in `cwd` (this checkout unless
        told); output is kept for assertions (and, unless `record` is false, in the
        transcript the secret-leak greps read)."""
        proc = self.run(*args, check=False, timeout=timeout, cwd=cwd)
        if record:
            self.record(proc.stdout, proc.stderr)
            if self.echo:
                shown = [
                    a if a not in self.hidden else "[secret]" for a in self.argv(*args, cwd=cwd)
                ]
                sys.stdout.write(
                    f"$ {' '.join(shown)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}\n"
                )
        if check:
            check_exit(args, proc)
        return proc

    def record(self, *outputs: str) -> None:
        """Add what a command printed for this stack to the transcript."""
        self.transcript += outputs

    def init(self, secret_values: dict[str, str]) -> None:
        """`stack init` with the passphrase provider, then the secrets under `secrets.`."""
        self.pulumi("stack", "init", "--secrets-provider", "passphrase")
        for key, value in secret_values.items():
            self.hidden.add(value)
            self.pulumi("config", "set", "--secret", "--path", f"secrets.{key}", value)

    def outputs(self) -> dict[str, Any]:
        # --show-secrets is the test asking for the values on purpose: not engine output
        # that the secret-leak greps should judge.
        proc = self.pulumi("stack", "output", "--json", "--show-secrets", record=False)
        return dict(json.loads(proc.stdout))

    def plan(self) -> dict[str, tuple[str, str]]:
        """`pulumi preview --json` as the PR comment classifies it (delivery/preview.py):
        resource name -> (operation, training impact label), for every change."""
        from delivery.preview import changes

        proc = self.pulumi("preview", "--json")
        return {c.name: (c.op, c.impact.label) for c in changes(json.loads(proc.stdout))}

    def state_text(self) -> str:
        """Every file of the backend, concatenated (for secret-leak greps)."""
        return "\n".join(
            p.read_text(errors="replace")
            for p in (self.workdir / "state").rglob("*")
            if p.is_file()
        )

    def remove(self) -> None:
        """Destroy and remove the stack, and its stack file."""
        # --refresh: a test that removed objects by hand must not block the cleanup.
        self.pulumi("destroy", "--refresh", "--yes", "--skip-preview", check=False)
        self.forget()

    def forget(self) -> None:
        """Remove the stack's state and its stack file, leaving what it made on the hosts:
        for a stack whose lab goes down next, which removes all of that (`lab down`
        needs no state: tests/lab/test_lab_mtu_and_down.py), a destroy first is time spent
        for nothing."""
        self.pulumi("stack", "rm", "--yes", "--force", check=False)
        self.config_file.unlink(missing_ok=True)


def restarting(plan: dict[str, tuple[str, str]]) -> list[str]:
    """The changes of a `Stack.plan()` that the preview says restart the running job."""
    from delivery.impact import Impact

    return sorted(name for name, (_op, impact) in plan.items() if impact == Impact.RESTARTS.label)
