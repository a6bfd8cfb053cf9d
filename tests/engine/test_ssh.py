"""The dev stack over SSH as prod is reached (issue 45): a non-root user, a host whose
key changed, a host whose sshd stopped, a host behind a bastion.

The stack reaches both lab hosts as `ssh://dss@<address>`: the lab's non-root user,
in the `docker` group only (lab/users.py), with strict host keys and sshd at OpenSSH's
default limits. The rest of the engine suite deploys as root over ssh:// (the committed
Pulumi.dev.yaml); this module proves what a team that gives its CI no root would run.
Each test that breaks the transport first ends the program's shared connection to the
host (`harness.sshd.end_master`), which would otherwise hide the break.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from harness.configs import HOSTS, dev_config
from harness.lab import logged_steps, training_processes
from harness.sshd import (
    end_master,
    end_masters,
    login_counts,
    logins,
    new_host_key,
    port_22_closed,
    stopped,
)
from harness.stack import Stack
from harness.waits import wait_for
from lab import config as c
from lab.users import USER
from tests.engine.conftest import MakeStack

pytestmark = pytest.mark.engine

RUN = "sshtest"
HOSTS_UP = 2
WORKER = 2
"""The host the tests break: the worker (its engine, facts and run reach it over SSH)."""
SECRET = "wandb-ssh-7c41-not-for-logs"


def _as_user(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with every host's engine reached as the lab's non-root user."""
    out = copy.deepcopy(config)
    for h in out[HOSTS]:
        h["docker_host"] = f"ssh://{USER}@{h['address']}"
    return out


def _fails_naming_the_worker(stack: Stack, *args: str) -> str:
    """`pulumi <args>` must fail (non-zero), naming the worker; what it printed."""
    proc = stack.pulumi(*args, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"pulumi {' '.join(args)} passed:\n{text[-3000:]}"
    assert c.host_name(WORKER) in text or c.host_addr(WORKER) in text, text[-3000:]
    return text


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return _as_user(dev_config(run_name=RUN, steps=100000, checkpoint_every=10))


@pytest.fixture(scope="module")
def stack(lab: dict[str, Any], make_stack: MakeStack, config: dict[str, Any]) -> Iterator[Stack]:
    """The dev stack deployed from nothing as the non-root user, training."""
    s = make_stack("test-ssh", config, {"wandb_api_key": SECRET})
    s.pulumi("up", "--yes", "--skip-preview")
    wait_for("three logged steps", lambda: len(logged_steps(RUN)) >= 3, 600, 5)
    yield s


def test_a_non_root_user_deploys_and_trains(stack: Stack) -> None:
    """Up from nothing as `dss` (Docker through its group, no root login on any host):
    training runs, preview and refresh are no-ops, and every login the hosts' sshd
    accepted for the stack was the non-root user's."""
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
    for i in range(1, HOSTS_UP + 1):
        users = {line.split(" for ", 1)[1].split()[0] for line in logins(i)}
        assert users == {USER}, f"{c.host_name(i)} accepted logins of {users}"


def test_a_changed_host_key_is_refused_by_name(stack: Stack, config: dict[str, Any]) -> None:
    """The worker serves another host key: preview and refresh fail, naming the host and
    ssh's verdict; with its own key back, both are no-ops again."""
    with new_host_key(WORKER):
        end_master(config, WORKER)
        text = _fails_naming_the_worker(stack, "preview")
        assert "Host key verification failed" in text, text[-3000:]
        _fails_naming_the_worker(stack, "refresh", "--preview-only", "--expect-no-changes")
    end_master(config, WORKER)
    stack.pulumi("preview", "--expect-no-changes")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_a_stopped_sshd_fails_the_refresh_naming_the_host(
    stack: Stack, config: dict[str, Any]
) -> None:
    """The worker's sshd stopped: refresh (and preview) fail naming the host and the
    refused connection, never "no changes"; with sshd back, both are no-ops."""
    with stopped(WORKER):
        end_master(config, WORKER)
        text = _fails_naming_the_worker(stack, "refresh", "--preview-only", "--expect-no-changes")
        assert "Connection refused" in text, text[-3000:]
        _fails_naming_the_worker(stack, "preview")
    stack.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_a_cold_preview_makes_one_handshake_per_host(stack: Stack, config: dict[str, Any]) -> None:
    """The guard against handshakes growing back (docker-py's one per request, issue
    45): with no shared connection alive, a no-op preview logs in to each host once
    (every path joins the host's one master), and a second preview not at all."""
    end_masters(config, range(1, HOSTS_UP + 1))
    before = login_counts(HOSTS_UP)
    stack.pulumi("preview", "--expect-no-changes")
    cold = login_counts(HOSTS_UP)
    stack.pulumi("preview", "--expect-no-changes")
    warm = login_counts(HOSTS_UP)
    assert [a - b for a, b in zip(cold, before, strict=True)] == [1] * HOSTS_UP, (before, cold)
    assert warm == cold, f"a preview with the masters alive logged in again: {cold} -> {warm}"


def test_a_host_behind_a_bastion(stack: Stack, config: dict[str, Any]) -> None:
    """Port 22 of the worker closed to this machine, `ssh.jump` set to lab-h1 for it:
    `up` applies the new SSH settings without restarting training, then preview and
    refresh are no-ops; the worker's sshd saw the logins come from the bastion."""
    before = training_processes(HOSTS_UP)
    with port_22_closed(WORKER):
        end_master(config, WORKER)
        # As an operator would: the worker (hosts[1]) through lab-h1.
        jump = f"hosts[{WORKER - 1}].ssh.jump.host"
        stack.pulumi("config", "set", "--path", jump, c.host_addr(1))
        seen = len(logins(WORKER))
        stack.pulumi("up", "--yes", "--skip-preview")
        stack.pulumi("preview", "--expect-no-changes")
        stack.pulumi("refresh", "--preview-only", "--expect-no-changes")
        new = logins(WORKER)[seen:]
        assert new, f"{c.host_name(WORKER)}: no login through the bastion"
        assert all(f"from {c.host_addr(1)} " in line for line in new), new
    assert training_processes(HOSTS_UP) == before, "training restarted"
