"""The cluster's leader as the job command reaches it: its SSH settings and its Docker
API (the submit lock, the GPUs held, the queue's entries are all read there).

The way in is the first of the cluster's managers that answers (`reached`): the job's
own `manager` first, else the cluster's first manager, then the others in the file's
order. Raft keeps the queue's entries, the lock and the tasks on every manager, so a
pass or a submit goes on through another manager while one is lost (docs/jobs.md,
"When a manager is lost")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infra.components.swarm import endpoint
from infra.config import ConfigError, Host, StackConfig
from infra.providers.hostops import HostError, docker_client
from infra.providers.reach import last_line


def leader_ssh(cfg: StackConfig) -> dict[str, Any] | None:
    """The cluster leader's SSH settings from the stack files (the key, known_hosts and
    jump host of its `ssh:` block), for its Docker client; None: not ssh://."""
    return host_ssh(cfg, cfg.leader)


def host_ssh(cfg: StackConfig, host: Host) -> dict[str, Any] | None:
    """`host`'s SSH settings from the stack files, for its Docker client; None: not
    ssh://."""
    if not host.docker_host.startswith("ssh://"):
        return None
    return cfg.ssh_for(host).props()


def leader_api(cfg: StackConfig) -> Any:
    """The cluster leader's Docker API (ConfigError: it does not answer)."""
    try:
        return docker_client(endpoint(cfg.leader), leader_ssh(cfg)).api
    except HostError as e:
        raise ConfigError([f"the cluster's queue could not be read: {e}"]) from None


def quiet(_line: str) -> None:
    """A printer that prints nothing."""
    return None


def answers(cfg: StackConfig, host: Host) -> str | None:
    """None when `host`'s engine answers as a manager of a swarm with a leader (its nodes
    list: a worker, or a manager without quorum, refuses it); else the last word of why
    not."""
    try:
        docker_client(endpoint(host), host_ssh(cfg, host)).api.nodes()
    except Exception as e:  # any failure: this manager is no way in, the next is asked
        return last_line(e)
    return None


def reached(
    cfg: StackConfig,
    out: Callable[[str], Any] = quiet,
    probe: Callable[[StackConfig, Host], str | None] = answers,
    prefer: str | None = None,
) -> StackConfig:
    """`cfg` going through the first of its cluster's managers that answers (module
    doc): as it is when its leader answers; else a copy whose `manager` is the one that
    does, each one passed over said through `out`. `prefer`: a manager asked before
    all others (the one a watch's last pass went through: a lost first manager then
    costs no probe, which waits out ssh's ConnectTimeout on a host that is down); said
    only when another is passed over. ConfigError: no manager answers, naming each and
    why."""
    first = [h for h in cfg.managers if h.name == prefer]
    order = [*first, cfg.leader, *cfg.managers]
    why: list[str] = []
    for host in {h.name: h for h in order}.values():
        said = probe(cfg, host)
        if said is None:
            if host.name == cfg.leader.name:
                return cfg
            if why:
                out(f"cluster {cfg.cluster}: through manager {host.name} ({'; '.join(why)})")
            return cfg.model_copy(update={"manager": host.name})
        why.append(f"{host.name} ({host.docker_host}) does not answer: {said}")
    raise ConfigError(
        [f"cluster {cfg.cluster}: no manager answers: {'; '.join(why)}; allowed: a cluster "
         "with a manager that answers (the swarm keeps a leader while most managers do)"]
    )  # fmt: skip
