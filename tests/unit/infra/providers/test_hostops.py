"""infra.providers.hostops.each: every host asked at once, answers in order."""

from __future__ import annotations

import threading
import time

import pytest

from infra.providers.hostops import each, ssh_argv

pytestmark = pytest.mark.unit


def test_each_keeps_the_items_order() -> None:
    """The results come in the items' order, whichever answers first."""

    def late(delay: float) -> float:
        time.sleep(delay)
        return delay

    assert each([0.05, 0.0, 0.02], late) == [0.05, 0.0, 0.02]


def test_each_asks_all_at_once() -> None:
    """Nine items meet at one barrier: asked in turn, the first would wait alone."""
    together = threading.Barrier(9, timeout=10)
    assert each(list(range(9)), lambda i: (together.wait(), i)[1]) == list(range(9))


def test_each_raises_the_first_error_in_order() -> None:
    """An item's error is raised: the first in the items' order."""

    def fail(i: int) -> int:
        if i:
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 1"):
        each([0, 1, 2], fail)


def test_ssh_argv_of_an_older_target_is_unchanged() -> None:
    """A target with no newer SSH key renders exactly as before the SSH model."""
    target = {"user": "root", "address": "10.0.0.1", "port": 22, "key_file": "/k",
              "known_hosts": "/kh"}  # fmt: skip
    assert ssh_argv(target) == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
        "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=/kh",
        "-o", "LogLevel=ERROR", "-p", "22", "-i", "/k", "-o", "IdentitiesOnly=yes",
        "root@10.0.0.1", "sh", "-s",
    ]  # fmt: skip


def test_ssh_argv_of_a_model_target_joins_the_master() -> None:
    """A target the SSH model wrote (`mux`) is rendered by it: -F none, the master."""
    argv = ssh_argv({"user": "root", "address": "h", "port": 22, "known_hosts": "/kh",
                     "mux": True})  # fmt: skip
    assert argv[:3] == ["ssh", "-F", "none"] and "ControlPath=~/.ssh/dss-%C" in argv


def test_ssh_of_finds_the_hosts_settings_by_url() -> None:
    from infra.providers.hostops import ssh_of

    props = {"ssh_hosts": {"ssh://root@h1": {"address": "h1", "mux": True}}}
    assert ssh_of(props, {"url": "ssh://root@h1"}) == {"address": "h1", "mux": True}


def test_ssh_of_is_none_without_settings() -> None:
    """A state written before the settings were inputs: the URL's own (url_spec)."""
    from infra.providers.hostops import ssh_of

    assert ssh_of({"endpoint": {"url": "ssh://root@h1"}}, {"url": "ssh://root@h1"}) is None


def test_docker_client_opens_the_transport_with_the_given_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from infra.providers import hostops, transport
    from infra.sshspec import SshSpec

    seen: list[SshSpec] = []
    monkeypatch.setattr(transport, "docker_client", lambda _url, spec: seen.append(spec))
    ssh = SshSpec("h1", known_hosts_file="~/kh", jump=None, mux=True).props()
    hostops.docker_client({"url": "ssh://root@h1"}, ssh)
    assert seen == [SshSpec.from_props(ssh)] and seen[0].known_hosts_file == "~/kh"
