"""Image fixtures: the CPU training image (built once per session with images/build),
throwaway SSH keys, and per-test docker networks/volumes/containers that are always
removed, also when a test fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
HAVE_BUILDX = (
    shutil.which("docker") is not None
    and subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0
)


def docker(
    *args: str, check: bool = True, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = None
    if args and args[0] == "build" and "DOCKER_BUILDKIT" not in os.environ:
        env = os.environ | {"DOCKER_BUILDKIT": "1" if HAVE_BUILDX else "0"}
    r = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, input=input, env=env
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"docker {' '.join(args)} failed ({r.returncode}):\n"
            f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        )
    return r


@pytest.fixture(scope="session")
def image() -> str:
    """The CPU image, as the stacks build it. Built before the first test by
    scripts/prebuild (tests/conftest.py), never inside a test's timeout."""
    if shutil.which("docker") is None or docker("info", check=False, timeout=30).returncode:
        pytest.skip("no docker engine")
    tag = os.environ.get("DSS_TEST_IMAGE")
    assert tag, "no image was prebuilt: run through scripts/test (tests/conftest.py builds it)"
    return tag


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway ed25519 key pair, laid out like the Swarm secrets folder."""
    d = tmp_path_factory.mktemp("secrets")
    subprocess.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "dss-test",
            "-f",
            str(d / "ssh_private_key"),
        ],
        check=True,
    )
    (d / "ssh_private_key.pub").rename(d / "ssh_public_key")
    # Swarm secrets are root-owned 0444 by default; the container user (1000) reads them.
    for f in d.iterdir():
        f.chmod(0o444)
    d.chmod(0o755)
    return d


@dataclass
class Docker:
    """Creates docker resources with a unique prefix and removes them all afterwards."""

    image: str
    prefix: str = field(default_factory=lambda: f"dss-t-{uuid.uuid4().hex[:8]}")
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def network(self) -> str:
        name = f"{self.prefix}-net{len(self.networks)}"
        docker("network", "create", name)
        self.networks.append(name)
        return name

    def volume(self) -> str:
        name = f"{self.prefix}-vol{len(self.volumes)}"
        docker("volume", "create", name)
        self.volumes.append(name)
        return name

    def run(
        self,
        name: str,
        *cmd: str,
        network: str | None = None,
        volume: str | None = None,
        env: dict[str, str] | None = None,
        secrets: Path | None = None,
        detach: bool = True,
        user: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> str:
        """docker run (detached by default); returns the container name."""
        cname = f"{self.prefix}-{name}"
        self.containers.append(cname)
        args = ["run", "--name", cname, "--hostname", name]
        if detach:
            args.append("-d")
        if network:
            args += ["--network", network, "--network-alias", name]
        else:
            args += ["--network", "none"]
        if volume:
            args += ["-v", f"{volume}:/data"]
        if secrets:
            args += ["-v", f"{secrets}:/run/secrets:ro"]
        if user:
            args += ["--user", user]
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        args += [*extra, self.image, *cmd]
        docker(*args, timeout=600)
        return cname

    def wait(self, cname: str, timeout: float = 600) -> int:
        return int(docker("wait", cname, timeout=timeout).stdout.strip())

    def logs(self, cname: str) -> str:
        r = docker("logs", cname, check=False)
        return r.stdout + r.stderr

    def exec(
        self, cname: str, *cmd: str, check: bool = False, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return docker("exec", cname, *cmd, check=check, timeout=timeout)

    def throwaway(
        self, volume: str, entrypoint: str, *args: str
    ) -> subprocess.CompletedProcess[str]:
        """Run `entrypoint args` in a throwaway container of the image, with no network
        and `volume` at /data."""
        net = ("--network", "none")
        mount = ("-v", f"{volume}:/data", "--entrypoint", entrypoint)
        return docker("run", "--rm", *net, *mount, self.image, *args)

    def read(self, volume: str, path: str) -> str:
        """Read a file from a volume with a throwaway container."""
        return self.throwaway(volume, "cat", f"/data/{path}").stdout

    def sh(self, volume: str, script: str) -> subprocess.CompletedProcess[str]:
        """Run a shell snippet against a volume with a throwaway container."""
        return self.throwaway(volume, "bash", "-c", script)

    def cleanup(self) -> None:
        for c in self.containers:
            docker("rm", "-f", "-v", c, check=False)
        for n in self.networks:
            docker("network", "rm", n, check=False)
        for v in self.volumes:
            docker("volume", "rm", "-f", v, check=False)


@pytest.fixture
def dk(image: str) -> Iterator[Docker]:
    """Per-test docker resources, removed afterwards whatever happened."""
    d = Docker(image)
    try:
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def dk_module(image: str) -> Iterator[Docker]:
    """Module-wide docker resources (for runs shared by several tests)."""
    d = Docker(image)
    try:
        yield d
    finally:
        d.cleanup()


def running(cname: str) -> bool:
    r = docker("inspect", "-f", "{{.State.Running}}", cname, check=False)
    return r.stdout.strip() == "true"


def metrics(d: Docker, volume: str, run: str) -> list[dict[str, Any]]:
    text = d.read(volume, f"logs/{run}/metrics.jsonl")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def wait_for_step(
    d: Docker,
    volume: str,
    run: str,
    step: int,
    timeout: float = 600,
    alive: Callable[[], bool] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = d.sh(volume, f"tail -n1 /data/logs/{run}/metrics.jsonl 2>/dev/null || true")
        line = r.stdout.strip()
        if line and json.loads(line)["step"] >= step:
            return
        if alive is not None and not alive():
            raise AssertionError(f"training exited before reaching step {step}")
        time.sleep(2)
    raise AssertionError(f"run {run} did not reach step {step} in {timeout}s")
