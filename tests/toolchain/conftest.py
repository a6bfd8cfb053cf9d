"""Fixtures for the toolchain tests: the env that scripts/env.sh sets, the built
binaries, a way to ask a provider for its version over gRPC, and a throwaway
Pulumi project run without network.

The tests skip when the toolchain has not been built (toolchain/build), unless
DSS_REQUIRE_TOOLCHAIN=1, where a missing binary fails them instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.stack import project_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tc_env() -> dict[str, str]:
    """The environment every project command runs with (scripts/env.sh)."""
    return project_env()


@pytest.fixture(scope="session")
def pins() -> dict[str, str]:
    """The pinned versions from toolchain/versions.env."""
    script = '. "$1/toolchain/versions.env" && printf "%s\\n" "$PULUMI_VERSION" '
    script += '"$PULUMI_DOCKER_VERSION" "$PULUMI_COMMAND_VERSION"'
    out = subprocess.run(
        ["bash", "-c", script, "bash", str(ROOT)], check=True, capture_output=True, text=True
    ).stdout.split()
    return dict(zip(("pulumi", "docker", "command"), out, strict=True))


@pytest.fixture(scope="session")
def tool(tc_env: dict[str, str]) -> Callable[[str], Path]:
    """Path of a built toolchain binary; skips (or fails) when it is missing."""

    def find(name: str) -> Path:
        # Providers are kept off PATH (toolchain/build): the engine takes them from
        # PULUMI_HOME, where toolchain/build registers them.
        folder = (
            "providers" if name in ("pulumi-resource-docker", "pulumi-resource-command") else "bin"
        )
        path = Path(tc_env["DSS_TOOLCHAIN"]) / folder / name
        if not os.access(path, os.X_OK):
            msg = f"{name} not built in $DSS_TOOLCHAIN/{folder} (run toolchain/build)"
            if os.environ.get("DSS_REQUIRE_TOOLCHAIN") == "1":
                pytest.fail(msg)
            pytest.skip(msg)
        return path

    return find


def _run(
    args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def run() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a command with a given env; output captured as text, never raises."""
    return _run


def _plugin_info_version(binary: Path, timeout: float = 60) -> str:
    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import provider_pb2_grpc

    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.Popen(
            [str(binary)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            port = proc.stdout.readline().strip()
            assert port.isdigit(), f"{binary.name} printed {port!r}, not a port"
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                grpc.channel_ready_future(channel).result(timeout=timeout)
                stub = provider_pb2_grpc.ResourceProviderStub(channel)
                info = stub.GetPluginInfo(empty_pb2.Empty(), timeout=timeout)
            return str(info.version)
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def plugin_info_version() -> Callable[[Path], str]:
    """Start a resource provider the way the engine does (no arguments, it prints
    its port) and return what GetPluginInfo says its version is."""
    return _plugin_info_version


@pytest.fixture()
def pulumi_home(tc_env: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    """A throwaway PULUMI_HOME that sees the registered plugins (read through a
    link) so that a run writes its workspace files into the temp dir only."""
    home = tmp_path / "pulumi-home"
    home.mkdir()
    plugins = Path(tc_env["PULUMI_HOME"]) / "plugins"
    if plugins.is_dir():
        (home / "plugins").symlink_to(plugins, target_is_directory=True)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def offline_project(
    tc_env: dict[str, str], tmp_path: Path, pulumi_home: Path
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A tiny Python program with a docker and a command provider, a local file
    backend and a passphrase secrets provider, all in a temp dir."""
    proj = tmp_path / "proj"
    state = tmp_path / "state"
    proj.mkdir()
    state.mkdir()
    venv = ROOT / ".venv"
    (proj / "Pulumi.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: dss-toolchain-offline
            runtime:
              name: python
              options:
                toolchain: pip
                virtualenv: {venv}
            """
        )
    )
    (proj / "__main__.py").write_text(
        textwrap.dedent(
            """\
            import pulumi
            import pulumi_command as command
            import pulumi_docker as docker
            from pulumi.dynamic import CheckResult, Resource, ResourceProvider


            class Echo(ResourceProvider):
                def check(self, olds, news):
                    return CheckResult(news, [])


            class EchoResource(Resource):
                pass


            docker_provider = docker.Provider("lab", host="unix:///nonexistent/docker.sock")
            hello = command.local.Command("hello", create="echo hello")
            # A dynamic resource: its provider runs in pulumi-resource-pulumi-python.
            echo = EchoResource(Echo(), "echo", {"port": 22})
            pulumi.export("docker_provider", docker_provider.urn)
            pulumi.export("hello", hello.urn)
            """
        )
    )
    env = dict(tc_env)
    env.update(
        PULUMI_HOME=str(pulumi_home),
        PULUMI_BACKEND_URL=f"file://{state}",
        PULUMI_CONFIG_PASSPHRASE="dss-toolchain-test",
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
    )
    yield proj, env
    shutil.rmtree(proj, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def offline() -> Callable[[list[str]], list[str]]:
    """Wrap a command so it runs in a new, empty network namespace (loopback
    only). The namespace goes away with the command."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n not permitted: {probe.stderr.decode().strip()}")

    def wrap(args: list[str]) -> list[str]:
        return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *args]

    return wrap


@pytest.fixture(scope="session")
def plugin_list() -> Callable[..., list[dict[str, object]]]:
    """`pulumi plugin ls --json`, parsed (optionally wrapped, e.g. offline)."""

    def ls(
        pulumi: Path, env: dict[str, str], wrap: Callable[[list[str]], list[str]] | None = None
    ) -> list[dict[str, object]]:
        args = [str(pulumi), "plugin", "ls", "--json"]
        res = _run(wrap(args) if wrap else args, env)
        assert res.returncode == 0, res.stderr
        return list(json.loads(res.stdout) or [])

    return ls
