"""The cluster's submit lock: one `scripts/job submit` at a time on a swarm.

Why: a submit checks that the job's GPUs are free (infra/providers/fit.py), then the
engine creates the job's services. Two submits at the same moment, from two people's
machines, can both pass the check before either has a service; one job's tasks then
stay pending (the race fit.py's docstring names). The job command therefore holds this
lock from its check to the end of its `up`.

The lock is a Swarm config object named `LOCK_NAME`, created on the cluster's leader:
Swarm's Raft store refuses a second object of the same name, so whoever creates it
holds the lock, whichever machine it runs on, with nothing else to deploy. Its labels
name the holder and when the hold expires, for a submit killed before it let go; an
expired lock is removed and taken. A `pulumi up` run by hand on a job stack does not
take it (the fit check still runs there).
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from infra.config import ConfigError
from infra.providers.hostops import HostError, docker_client

LOCK_NAME = "dss-submit-lock"
HOLDER_LABEL = "dss.lock.holder"
EXPIRES_LABEL = "dss.lock.expires"
HOLD_S = 1800.0
"""How long a hold lasts without being let go: longer than a job's `up` (the docker
provider's convergence timeout is 10 min)."""
WAIT_S = 1800.0
POLL_S = 2.0


@dataclass(frozen=True)
class LockHeld:
    """The lock as the leader has it: its config id, who holds it, until when (epoch s)."""

    id: str
    holder: str
    expires: float


def holder_name(job: str) -> str:
    """Who a submit is, as another waiting submit is told: the job, the user, the
    machine and the process."""
    return f"submit of {job} by {getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"


def _status(e: Exception) -> int | None:
    """The HTTP status of a Docker SDK error (None for any other error)."""
    code = getattr(e, "status_code", None)
    return code if isinstance(code, int) else None


def try_lock(api: Any, holder: str, now: float, hold_s: float = HOLD_S) -> str | LockHeld:
    """Create the lock: its config id when this call holds it now, else who holds it
    (an empty id when it went between the refusal and the look: try again)."""
    try:
        made = api.create_config(
            LOCK_NAME,
            holder.encode(),
            labels={HOLDER_LABEL: holder, EXPIRES_LABEL: f"{now + hold_s:.0f}"},
        )
        return str(made["ID"])
    except Exception as e:  # the Docker SDK's APIError: 409 is "name in use"
        if _status(e) != 409:
            raise
    for cfg in api.configs(filters={"name": LOCK_NAME}):
        spec = cfg.get("Spec") or {}
        if spec.get("Name") == LOCK_NAME:  # the name filter matches prefixes too
            labels = spec.get("Labels") or {}
            return LockHeld(
                str(cfg["ID"]), labels.get(HOLDER_LABEL, "?"), float(labels.get(EXPIRES_LABEL, 0))
            )
    return LockHeld("", "", now)


def _remove(api: Any, config_id: str) -> None:
    """Remove the lock `config_id`; one already gone is not an error."""
    try:
        api.remove_config(config_id)
    except Exception as e:
        if _status(e) != 404:
            raise


@contextmanager
def submit_lock(
    leader_endpoint: dict[str, Any],
    holder: str,
    out: Callable[[str], Any],
    wait_s: float = WAIT_S,
    hold_s: float = HOLD_S,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    ssh: dict[str, Any] | None = None,
) -> Iterator[None]:
    """Hold the cluster's submit lock for the block, waiting up to `wait_s` for another
    holder (saying who, once per holder); let it go afterwards, also on an error.
    ConfigError when the leader does not answer or the wait runs out. `ssh`: the
    leader's SSH settings (jobs/command.py `leader_ssh`), None for the URL's own."""
    try:
        api = docker_client(leader_endpoint, ssh).api
        deadline = clock() + wait_s
        told = ""
        while True:
            got = try_lock(api, holder, clock(), hold_s)
            if isinstance(got, str):
                ours = got
                break
            if got.id and got.expires <= clock():
                out(f"the cluster's submit lock of {got.holder} has expired: taking it")
                _remove(api, got.id)
                continue
            if clock() > deadline:
                raise ConfigError(
                    [
                        f"the cluster's submit lock: held by {got.holder} after waiting "
                        f"{wait_s:.0f} s; allowed: one submit at a time on a cluster; "
                        f"try again when it is done, or remove the Swarm config "
                        f"{LOCK_NAME} if that submit is dead. Nothing was changed"
                    ]
                )
            if got.holder and got.holder != told:
                out(f"waiting for the cluster's submit lock, held by {got.holder}")
                told = got.holder
            sleep(POLL_S)
    except HostError as e:
        raise ConfigError([f"the cluster's submit lock could not be taken: {e}"]) from None
    except (ConfigError, KeyboardInterrupt):
        raise
    except Exception as e:  # the Docker SDK's errors: name the leader, not a traceback
        where = f"docker {leader_endpoint.get('url')}"
        raise ConfigError([f"the cluster's submit lock could not be taken: {where}: {e}"]) from None
    try:
        yield
    finally:
        _remove(api, ours)
