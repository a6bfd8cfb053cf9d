"""Real-engine fixtures: the lab, the pinned Pulumi CLI, and a throwaway stack.

Everything here is real: `pulumi` built by toolchain/build, the docker and command
plugins, dockerd per lab host, Swarm scheduling. Each fixture removes what it
made (stack, backend dir, lab), also when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import stack_file_yaml

ROOT = Path(__file__).resolve().parents[2]
LAB_ROOT = Path(os.environ.get("DSS_LAB_ROOT", "/var/lib/dss-lab"))


def project_env() -> dict[str, str]:
    """The environment scripts/env.sh sets up (toolchain on PATH, PULUMI_HOME, ...)."""
    out = subprocess.run(
        ["bash", "-c", f". {ROOT}/scripts/env.sh && env -0"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    return dict(line.split("=", 1) for line in out.split("\0") if "=" in line)


# On PATH: the CLI, the language host and the plugin that runs dynamic providers.
# The docker and command providers are registered in PULUMI_HOME instead.
ENGINE_BINARIES = ("pulumi", "pulumi-language-python", "pulumi-resource-pulumi-python")
ENGINE_PLUGINS = ("docker", "command")


@pytest.fixture(scope="session", autouse=True)
def engine() -> None:
    """The real engine needs the whole pinned toolchain; say exactly what is missing."""
    env = project_env()
    missing = [b for b in ENGINE_BINARIES if shutil.which(b, path=env["PATH"]) is None]
    if "pulumi" not in missing:
        listed = subprocess.run(
            ["pulumi", "plugin", "ls", "--json"], env=env, capture_output=True, text=True
        )
        names = {p["name"] for p in json.loads(listed.stdout or "[]") or []}
        missing += [f"plugin {p}" for p in ENGINE_PLUGINS if p not in names]
    if missing:
        msg = (
            f"the real Pulumi engine cannot run: {', '.join(missing)} missing "
            "(toolchain/build says why; toolchain/README.md)"
        )
        if os.environ.get("DSS_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


class Stack:
    """A Pulumi stack driven through the real CLI, with its own backend and passphrase."""

    def __init__(self, name: str, workdir: Path, config: dict[str, Any]) -> None:
        self.name = name
        self.workdir = workdir
        # Stack files live beside Pulumi.yaml (where `stack init` writes the
        # passphrase salt); `Pulumi.test-*.yaml` is git-ignored and removed after.
        self.config_file = ROOT / f"Pulumi.{name}.yaml"
        self.env = project_env()
        self.env.update(
            PULUMI_BACKEND_URL=f"file://{workdir / 'state'}",
            PULUMI_CONFIG_PASSPHRASE=secrets.token_hex(16),
        )
        self.transcript: list[str] = []
        """Everything the engine printed for this stack (for secret-leak greps)."""
        (workdir / "state").mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(stack_file_yaml(config))

    def pulumi(
        self,
        *args: str,
        check: bool = True,
        timeout: int = 1500,
        record: bool = True,
        cwd: Path = ROOT,
    ) -> subprocess.CompletedProcess[str]:
        """Run `pulumi <args>` for this stack on the program in `cwd` (this checkout
        unless told); output is kept for assertions (and, unless `record` is false, in
        the transcript the secret-leak greps read)."""
        argv = ["pulumi", *args, "--stack", self.name, "--non-interactive", "--cwd", str(cwd)]
        proc = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if record:
            self.transcript += [proc.stdout, proc.stderr]
            sys.stdout.write(f"$ {' '.join(argv)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}\n")
        if check and proc.returncode != 0:
            raise AssertionError(
                f"pulumi {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
                f"{proc.stderr[-3000:]}"
            )
        return proc

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`pulumi <args>` for this stack in the background (output piped)."""
        argv = ["pulumi", *args, "--stack", self.name, "--non-interactive", "--cwd", str(ROOT)]
        # Its own process group: a fault test can kill the CLI with its plugins.
        return subprocess.Popen(
            argv,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def init(self, secret_values: dict[str, str]) -> None:
        self.pulumi("stack", "init", "--secrets-provider", "passphrase")
        for key, value in secret_values.items():
            self.pulumi("config", "set", "--secret", "--path", f"secrets.{key}", value)

    def outputs(self) -> dict[str, Any]:
        # --show-secrets is the test asking for the values on purpose: not engine output
        # that the secret-leak greps should judge.
        proc = self.pulumi("stack", "output", "--json", "--show-secrets", record=False)
        return dict(json.loads(proc.stdout))

    def state_text(self) -> str:
        """Every file of the backend, concatenated (for secret-leak greps)."""
        return "\n".join(
            p.read_text(errors="replace")
            for p in (self.workdir / "state").rglob("*")
            if p.is_file()
        )

    def remove(self) -> None:
        # --refresh: a test that removed objects by hand must not block the cleanup.
        self.pulumi("destroy", "--refresh", "--yes", "--skip-preview", check=False)
        self.pulumi("stack", "rm", "--yes", "--force", check=False)
        self.config_file.unlink(missing_ok=True)


def lab_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=check,
        timeout=600,
    )


@pytest.fixture(scope="module")
def lab() -> Iterator[dict[str, Any]]:
    """A 2-host lab with 2 fake GPUs each (no swarm: the program forms it)."""
    lab_cli("down", check=False)
    try:
        lab_cli("up", "--hosts", "2", "--gpus", "2")
        yield json.loads(lab_cli("status", "--json").stdout)
    finally:
        lab_cli("down", check=False)


def dev_config(**training: Any) -> dict[str, Any]:
    """The dev stack's config (namespaced keys) with training overrides."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    doc["deepspeed-swarm:training"] = {**doc["deepspeed-swarm:training"], **training}
    return dict(doc)


@pytest.fixture(scope="module")
def make_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Factory for throwaway stacks; every stack made is destroyed and removed."""
    made: list[Stack] = []

    def make(name: str, config: dict[str, Any], secret_values: dict[str, str]) -> Stack:
        assert name.startswith("test-"), "test stacks are named test-* (git-ignored files)"
        stack = Stack(name, tmp_path_factory.mktemp(name), config)
        made.append(stack)
        stack.init(secret_values)
        return stack

    yield make
    for stack in reversed(made):
        stack.remove()
        shutil.rmtree(stack.workdir, ignore_errors=True)


def docker_host(lab: dict[str, Any], index: int) -> Any:
    """A Docker API client for lab host `index` (1-based)."""
    import docker

    return docker.DockerClient(base_url=f"unix://{LAB_ROOT}/h{index}/docker.sock", timeout=60)


def remove_when_detached(client: Any, network: str, timeout: float = 90.0) -> None:
    """Remove an overlay by hand once the tasks of removed services have left it
    (Docker refuses to remove a network that still has endpoints)."""
    import time

    import docker.errors

    deadline = time.monotonic() + timeout
    while True:
        try:
            client.networks.get(network).remove()
            return
        except docker.errors.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def logged_steps(run: str) -> list[int]:
    """The steps rank 0 of run `run` has logged so far (metrics on the lab's shared /data)."""
    log = LAB_ROOT / "shared" / "logs" / run / "metrics.jsonl"
    text = log.read_text() if log.exists() else ""
    return [json.loads(x)["step"] for x in text.splitlines() if x.strip()]
