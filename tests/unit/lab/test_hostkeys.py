"""The lab's known_hosts bootstrap (lab/hostkeys.py): a scanned key is trusted only when
its fingerprint is the host's own, as docs/operations.md has an operator check prod's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab import hostkeys
from lab.sysops import LabError

pytestmark = pytest.mark.unit


def _key(tmp_path: Path, name: str) -> str:
    """A fresh ed25519 public key's text (`<kind> <blob> <comment>`)."""
    path = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return Path(f"{path}.pub").read_text()


def _scan_of(address: str, pub: str) -> str:
    """What `ssh-keyscan` prints for a host offering `pub` (its comment line, then the key)."""
    kind, blob = pub.split()[:2]
    return f"# {address}:22 SSH-2.0-OpenSSH_9.2p1\n{address} {kind} {blob}\n"


def test_keyscan_asks_for_the_ed25519_key_on_port_22() -> None:
    argv = hostkeys.keyscan_argv("10.213.0.12")
    assert argv[0] == "ssh-keyscan"
    assert argv[argv.index("-t") + 1] == "ed25519"
    assert argv[argv.index("-p") + 1] == "22"
    assert argv[-1] == "10.213.0.12"


def test_a_key_whose_fingerprint_is_the_hosts_own_is_written(tmp_path: Path) -> None:
    pub = _key(tmp_path, "lab-h2")
    line = hostkeys.checked_line(2, _scan_of("10.213.0.12", pub), pub)
    assert line == f"10.213.0.12,lab-h2 {' '.join(pub.split()[:2])}\n"


def test_a_key_that_is_not_the_hosts_own_is_refused_by_name(tmp_path: Path) -> None:
    own, other = _key(tmp_path, "lab-h2"), _key(tmp_path, "intruder")
    with pytest.raises(LabError, match=r"lab-h2 \(10\.213\.0\.12\): the key scanned \(SHA256:"):
        hostkeys.checked_line(2, _scan_of("10.213.0.12", other), own)


def test_a_scan_without_an_ed25519_key_is_refused_by_name() -> None:
    with pytest.raises(LabError, match=r"lab-h3 \(10\.213\.0\.13\): .* no ssh-ed25519 key"):
        hostkeys.scanned_key(3, "# 10.213.0.13:22 SSH-2.0-OpenSSH_9.2p1\n")
