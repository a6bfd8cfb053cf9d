"""sshd in the image: key-only logins as the training user, hardened, healthchecked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import Docker, docker, running

pytestmark = [pytest.mark.image, pytest.mark.timeout(600)]


@dataclass
class Pair:
    d: Docker
    server: str
    client: str


@pytest.fixture(scope="module")
def pair(dk_module: Docker, ssh_keys: Path) -> Iterator[Pair]:
    """A node (entrypoint only: sshd) and a client container holding the same key."""
    d = dk_module
    net = d.network()
    server = d.run("n0", network=net, secrets=ssh_keys)
    client = d.run("cl", "sleep", "infinity", network=net, secrets=ssh_keys)
    for c in (server, client):  # wait until sshd answers
        for _ in range(60):
            if d.exec(c, "/opt/dss/healthcheck.sh").returncode == 0:
                break
            assert running(c), d.logs(c)
            time.sleep(1)
    yield Pair(d, server, client)


def ssh(p: Pair, *args: str) -> tuple[int, str]:
    r = p.d.exec(p.client, "ssh", "-o", "ConnectTimeout=10", *args)
    return r.returncode, r.stdout + r.stderr


def test_key_login_as_training_user(pair: Pair) -> None:
    """The installed key logs in as dss (uid 1000) with the image's environment."""
    rc, out = ssh(pair, "n0", "id -u; echo $DS_ACCELERATOR; command -v deepspeed")
    assert rc == 0, out
    assert out.split()[:3] == ["1000", "cpu", "/opt/venv/bin/deepspeed"]


def test_password_login_refused(pair: Pair) -> None:
    """With the key withheld, sshd offers no password or keyboard-interactive login."""
    rc, out = ssh(
        pair,
        "-o",
        "PubkeyAuthentication=no",
        "-o",
        "PreferredAuthentications=password,keyboard-interactive",
        "n0",
        "true",
    )
    assert rc == 255
    assert "Permission denied (publickey)" in out


def test_root_login_refused(pair: Pair) -> None:
    """Even with the valid key, logging in as root is refused."""
    rc, out = ssh(pair, "-l", "root", "n0", "true")
    assert rc == 255
    assert "Permission denied" in out


def test_sshd_effective_config_is_hardened(pair: Pair) -> None:
    """sshd's effective settings: no root login, no passwords, key auth only."""
    r = pair.d.exec(
        pair.server,
        "bash",
        "-c",
        "/usr/sbin/sshd -T -f /opt/dss/sshd_config -h ~/.sshd/ssh_host_ed25519_key",
    )
    conf = set(r.stdout.splitlines())
    assert {
        "permitrootlogin no",
        "passwordauthentication no",
        "pubkeyauthentication yes",
        "kbdinteractiveauthentication no",
        "permitemptypasswords no",
    } <= conf, r.stderr


def test_sshd_runs_as_non_root(pair: Pair) -> None:
    """sshd runs as the training user, not root."""
    r = pair.d.exec(pair.server, "ps", "-o", "user=", "-C", "sshd")
    assert set(r.stdout.split()) == {"dss"}


def test_host_keys_generated_per_container(pair: Pair) -> None:
    """No host key is baked into the image: each container generates its own."""
    fp = [
        pair.d.exec(c, "ssh-keygen", "-lf", "/home/dss/.sshd/ssh_host_ed25519_key.pub").stdout
        for c in (pair.server, pair.client)
    ]
    assert fp[0] and fp[1] and fp[0] != fp[1]
    r = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "bash",
        pair.d.image,
        "-c",
        "ls /etc/ssh/ssh_host_* /home/dss/.sshd 2>&1 | grep -c 'No such file'",
    )
    assert r.stdout.strip() == "2"


def test_healthcheck_passes_with_sshd(pair: Pair) -> None:
    """The healthcheck passes while sshd answers."""
    r = pair.d.exec(pair.server, "/opt/dss/healthcheck.sh")
    assert r.returncode == 0, r.stdout


def test_healthcheck_fails_without_gpus(pair: Pair) -> None:
    """On a GPU node (NVIDIA_VISIBLE_DEVICES set) without usable GPUs the healthcheck fails."""
    r = pair.d.exec(pair.server, "env", "NVIDIA_VISIBLE_DEVICES=all", "/opt/dss/healthcheck.sh")
    assert r.returncode == 1
    assert "nvidia-smi" in r.stdout


def test_healthcheck_fails_when_sshd_gone(dk: Docker, ssh_keys: Path) -> None:
    """The healthcheck fails once sshd is gone."""
    c = dk.run("hc", "sleep", "infinity", secrets=ssh_keys)
    for _ in range(30):
        if dk.exec(c, "/opt/dss/healthcheck.sh").returncode == 0:
            break
        time.sleep(1)
    dk.exec(c, "bash", "-c", "kill $(cat ~/.sshd/sshd.pid)")
    time.sleep(1)
    r = dk.exec(c, "/opt/dss/healthcheck.sh")
    assert r.returncode == 1, r.stdout


def test_missing_key_is_fatal_when_required(dk: Docker) -> None:
    """With DSS_REQUIRE_SSH_KEY=1 and no key secret the node exits 1 naming the file."""
    c = dk.run("nokey", env={"DSS_REQUIRE_SSH_KEY": "1"})
    assert dk.wait(c, timeout=60) == 1
    assert "no SSH public key at /run/secrets/ssh_public_key" in dk.logs(c)


def test_root_start_drops_to_training_user(dk: Docker, ssh_keys: Path) -> None:
    """Started as root, the entrypoint re-executes itself as uid 1000."""
    c = dk.run("asroot", "id", "-u", user="0", secrets=ssh_keys, detach=False)
    out = dk.logs(c)
    assert "dropping to dss" in out
    assert "1000" in out.splitlines()
