"""The cluster's leader as the job command reaches it: its SSH settings and its Docker
API (the submit lock, the GPUs held, the queue's entries are all read there)."""

from __future__ import annotations

from typing import Any

from infra.components.swarm import endpoint
from infra.config import ConfigError, StackConfig
from infra.providers.hostops import HostError, docker_client


def leader_ssh(cfg: StackConfig) -> dict[str, Any] | None:
    """The cluster leader's SSH settings from the stack files (the key, known_hosts and
    jump host of its `ssh:` block), for its Docker client; None: not ssh://."""
    if not cfg.leader.docker_host.startswith("ssh://"):
        return None
    return cfg.ssh_for(cfg.leader).props()


def leader_api(cfg: StackConfig) -> Any:
    """The cluster leader's Docker API (ConfigError: it does not answer)."""
    try:
        return docker_client(endpoint(cfg.leader), leader_ssh(cfg)).api
    except HostError as e:
        raise ConfigError([f"the cluster's queue could not be read: {e}"]) from None
