"""Fixtures for every unit test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from infra.components import remote
from infra.sshspec import SshSpec
from lab.config import DEFAULT_ROOT
from tests.unit.infra.samples import write_ssh_home


@pytest.fixture(autouse=True)
def ssh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME with a known_hosts holding a key for every sample host: the program pins
    the ssh:// hosts' keys from `~/.ssh/known_hosts` (never the machine's own file)."""
    return sample_ssh_home(monkeypatch, tmp_path_factory.mktemp("home"))


def sample_ssh_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """`ssh_home`'s work, for a fixture of a wider scope than a test's (it runs before
    the autouse one): HOME is `home` with the sample known_hosts, and the lab stacks'
    known_hosts is read from there."""
    write_ssh_home(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(remote, "_known_hosts_text", _lab_known_hosts_at_home)
    return home


_read_known_hosts = remote._known_hosts_text


def _lab_known_hosts_at_home(spec: SshSpec) -> str:
    """The lab stacks' known_hosts (under the lab root, written by `lab up`) read from
    HOME's instead: a unit test never reads a file of the machine's own lab."""
    if spec.known_hosts_file and spec.known_hosts_file.startswith(f"{DEFAULT_ROOT}/"):
        spec = dataclasses.replace(spec, known_hosts_file="~/.ssh/known_hosts")
    return _read_known_hosts(spec)
