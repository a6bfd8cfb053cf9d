"""infra.providers.transport against a fake `ssh` on PATH (argv recorded, exit codes
scripted; tests/unit/infra/providers/fakessh.py): one master per host, the Docker socket
forwarded over it, clients cached, bounded concurrency, TransportError naming the host."""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import docker
import pytest
import requests

from infra.providers import hostops, transport
from infra.providers.errors import HostError, TransportError
from infra.sshspec import SshSpec
from tests.unit.infra.providers.fakessh import FakeSsh

pytestmark = pytest.mark.unit

URL = "ssh://root@gpu-01"
SPEC = SshSpec("gpu-01", known_hosts_file="~/.ssh/kh", strict=True, mux=True)


class FakeApi:
    """docker-py's APIClient as far as the transport touches it: `send`."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, request: Any, **_: Any) -> Any:
        self.sent.append(request)
        return "answer"


class FakeDockerClient:
    """Records every client built and its base_url (no engine is asked anything)."""

    built: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, **kwargs: Any) -> None:
        FakeDockerClient.built.append(kwargs)
        self.api = FakeApi()


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """docker.DockerClient replaced by a recorder; the arguments of each client built."""
    FakeDockerClient.built = []
    monkeypatch.setattr(docker, "DockerClient", FakeDockerClient)
    return FakeDockerClient.built


def test_first_client_starts_one_master_and_one_forward(
    fake_ssh: FakeSsh, clients: list[dict[str, Any]]
) -> None:
    """A cold host: one master start, one forward of the Docker socket."""
    hostops.docker_client({"url": URL})
    assert (len(fake_ssh.starts()), len(fake_ssh.forwards())) == (1, 1)
    assert fake_ssh.forwards()[0][-4].endswith(":/var/run/docker.sock")


def test_client_is_cached_per_endpoint(fake_ssh: FakeSsh, clients: list[dict[str, Any]]) -> None:
    """A second call in the process reuses the client: no ssh at all, no new client."""
    first = hostops.docker_client({"url": URL})
    calls = len(fake_ssh.calls())
    assert hostops.docker_client({"url": URL}) is first
    assert (len(fake_ssh.calls()), len(clients)) == (calls, 1)


def test_a_running_master_is_joined_not_started(
    fake_ssh: FakeSsh, clients: list[dict[str, Any]]
) -> None:
    """A master another process started answers `-O check`: none is started."""
    hostops.docker_client({"url": URL})
    transport.forget()  # as another process would be
    hostops.docker_client({"url": URL})
    assert len(fake_ssh.starts()) == 1


def test_threads_at_once_start_one_master(fake_ssh: FakeSsh, clients: list[dict[str, Any]]) -> None:
    """Eight threads asking for the same host at once: one master, one client."""
    barrier = threading.Barrier(8, timeout=10)

    def ask(_: int) -> Any:
        barrier.wait()
        return hostops.docker_client({"url": URL})

    got = hostops.each(list(range(8)), ask)
    assert len({id(c) for c in got}) == 1
    assert (len(fake_ssh.starts()), len(clients)) == (1, 1)


def test_docker_py_never_gets_an_ssh_url(fake_ssh: FakeSsh, clients: list[dict[str, Any]]) -> None:
    """Every client docker-py builds for an ssh:// endpoint is unix:// (no paramiko)."""
    hostops.docker_client({"url": URL})
    hostops.docker_client({"url": "ssh://dss@gpu-02:2222"})
    assert clients and all(c["base_url"].startswith("unix://") for c in clients)
    assert not any("use_ssh_client" in c for c in clients)


def test_unix_endpoint_is_as_before(fake_ssh: FakeSsh, clients: list[dict[str, Any]]) -> None:
    """A unix:// endpoint: docker-py gets the URL itself, no ssh runs."""
    hostops.docker_client({"url": "unix:///var/run/docker.sock"})
    assert clients == [{"base_url": "unix:///var/run/docker.sock", "timeout": 120}]
    assert fake_ssh.calls() == []


def test_forwarded_socket_is_private_and_short(
    fake_ssh: FakeSsh, clients: list[dict[str, Any]]
) -> None:
    """The local socket is mode 0600 and its path under 104 bytes."""
    hostops.docker_client({"url": URL})
    path = clients[0]["base_url"].removeprefix("unix://")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(path.encode()) < transport.SOCKET_PATH_MAX


def test_master_gone_is_made_again(fake_ssh: FakeSsh, clients: list[dict[str, Any]]) -> None:
    """The master exited (persist time, a restart): the next call starts it and forwards
    again, with the same client."""
    first = hostops.docker_client({"url": URL})
    fake_ssh.lose_master()
    assert hostops.docker_client({"url": URL}) is first
    assert (len(fake_ssh.starts()), len(fake_ssh.forwards())) == (2, 2)


def test_stale_control_socket_is_removed_before_a_master_starts(fake_ssh: FakeSsh) -> None:
    """A control socket left by a dead master (nothing answers `-O check`) is removed
    first: a master finding it would run without multiplexing."""
    ctl = transport.control_path(SPEC, URL)
    os.makedirs(os.path.dirname(ctl), exist_ok=True)
    Path(ctl).write_text("")
    transport.ensure_master(SPEC, URL)
    assert not os.path.exists(ctl) and len(fake_ssh.starts()) == 1


def test_master_refused_names_host_url_and_ssh_line(
    fake_ssh: FakeSsh, clients: list[dict[str, Any]]
) -> None:
    """ssh exits 255 starting the master: TransportError with the host, URL, last line."""
    fake_ssh.script("master_rc", "255")
    fake_ssh.script("master_err", "debug\nHost key verification failed.\n")
    with pytest.raises(TransportError) as e:
        hostops.docker_client({"url": URL})
    assert str(e.value) == (
        "host gpu-01 (ssh://root@gpu-01) cannot be reached over ssh: Host key verification failed."
    )


def test_forward_refused_is_a_transport_error(
    fake_ssh: FakeSsh, clients: list[dict[str, Any]]
) -> None:
    """The master refuses the forward: TransportError naming the socket and ssh's line."""
    fake_ssh.script("forward_rc", "255")
    with pytest.raises(TransportError, match=r"forward of /var/run/docker.sock refused: mux_"):
        hostops.docker_client({"url": URL})


def test_url_socket_path_is_forwarded(fake_ssh: FakeSsh, clients: list[dict[str, Any]]) -> None:
    """A path in the ssh:// URL is the remote socket forwarded."""
    hostops.docker_client({"url": "ssh://root@gpu-01/run/docker.sock"})
    assert fake_ssh.forwards()[0][-4].endswith(":/run/docker.sock")


def test_spec_from_props_reaches_the_master(
    fake_ssh: FakeSsh, clients: list[dict[str, Any]]
) -> None:
    """The host's SSH settings (a HostFacts-style target) shape the master's argv."""
    hostops.docker_client({"url": URL}, SPEC.props())
    assert "UserKnownHostsFile=~/.ssh/kh" in fake_ssh.starts()[0]


def test_connection_error_on_a_request_names_what_the_master_says(fake_ssh: FakeSsh) -> None:
    """A broken connection under a request: TransportError naming the host, its URL and
    ssh's line about the master (here: gone)."""

    class Broken(FakeApi):
        def send(self, request: Any, **_: Any) -> Any:
            raise requests.exceptions.ConnectionError("Connection refused")

    client = FakeDockerClient()
    client.api = Broken()
    ctl = transport.control_path(SPEC, URL)
    transport._bound(client, transport.Master(SPEC, URL, ctl))
    with pytest.raises(TransportError) as e:
        client.api.send("GET /version")
    assert str(e.value).startswith("host gpu-01 (ssh://root@gpu-01) cannot be reached")
    assert e.value.detail.endswith(f"ssh: Control socket connect({ctl}): No such file or directory")


def test_an_http_answer_is_not_a_transport_error() -> None:
    """What the engine answers (any status) goes back to docker-py untouched."""
    client = FakeDockerClient()
    transport._bound(client, transport.Master(SPEC, URL, "/nonexistent/ctl"))
    assert client.api.send("GET /nodes/x") == "answer"


def test_run_script_joins_the_master(fake_ssh: FakeSsh) -> None:
    """A mux host's script runs over ControlMaster=no after the master is up; stdin is
    the script."""
    assert transport.run_script(SPEC, "echo hi\n", 10) == "ran\n"
    last = fake_ssh.calls()[-1]
    assert "ControlMaster=no" in last and last[-3:] == ["root@gpu-01", "sh", "-s"]
    assert fake_ssh.stdins()[-1] == "echo hi\n"
    assert len(fake_ssh.starts()) == 1


def test_run_script_ssh_failure_is_a_transport_error(fake_ssh: FakeSsh) -> None:
    """ssh's own failure (255) names the host and ssh's last line."""
    fake_ssh.script("script_rc", "255")
    fake_ssh.script("script_err", "Connection closed by 10.0.0.1 port 22\n")
    with pytest.raises(TransportError, match=r"Connection closed by 10\.0\.0\.1 port 22"):
        transport.run_script(SPEC, "true\n", 10)


def test_run_script_failure_of_the_script_is_a_host_error(fake_ssh: FakeSsh) -> None:
    """The script's own exit status is the host's answer: HostError, not TransportError."""
    fake_ssh.script("script_rc", "3")
    with pytest.raises(HostError) as e:
        transport.run_script(SPEC, "exit 3\n", 10)
    assert not isinstance(e.value, TransportError)


def test_run_script_holds_a_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six scripts at once on a host with max_per_host 2: never more than 2 running."""
    transport.forget()
    running, peak, lock = [0], [0], threading.Lock()

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def slow(*_: Any, **__: Any) -> Done:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return Done()

    monkeypatch.setattr(transport, "_run", slow)
    spec = SshSpec("gpu-09", max_per_host=2)
    hostops.each(list(range(6)), lambda _: transport.run_script(spec, "true\n", 10))
    transport.forget()
    assert peak[0] == 2


def test_long_control_path_is_refused_by_name(
    fake_ssh: FakeSsh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A HOME so long the control path passes 104 bytes: TransportError saying so."""
    monkeypatch.setenv("HOME", "/" + "h" * 100)
    with pytest.raises(TransportError, match=r"control path /h+/\.ssh/dss-\w+ is \d+ bytes"):
        transport.control_path(SPEC, URL)


def test_ssh_run_of_a_model_target_uses_the_transport(fake_ssh: FakeSsh) -> None:
    """hostops.ssh_run sends a target the SSH model wrote through the host's master."""
    assert hostops.ssh_run(SPEC.props(), "true\n") == "ran\n"
    assert len(fake_ssh.starts()) == 1


def test_no_product_code_asks_docker_py_for_ssh() -> None:
    """No product module builds a docker-py ssh:// client (`use_ssh_client`, paramiko):
    every ssh:// engine goes through the transport's forwarded socket."""
    root = Path(__file__).resolve().parents[4]
    found = [
        str(p.relative_to(root))
        for part in ("infra", "jobs", "ops", "delivery", "policy")
        for p in (root / part).rglob("*.py")
        if re.search(r"use_ssh_client\s*=|import paramiko|from paramiko", p.read_text())
    ]
    assert found == [], f"docker-py over ssh:// in {found}"
