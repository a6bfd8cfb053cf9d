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
expired lock is removed and taken. The hold is a lease: while the block runs, a thread
of the holder renews the expiry every `RENEW_S` (a label update carrying the version
read), so a holder that dies (its machine lost, the process killed) blocks the others
for at most `LEASE_S`, never for the length of a job's `up`. A `pulumi up` run by hand
on a job stack does not take it (the fit check still runs there).
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from infra.config import ConfigError
from infra.providers.hostops import HostError, docker_client, update_config

LOCK_NAME = "dss-submit-lock"
HOLDER_LABEL = "dss.lock.holder"
EXPIRES_LABEL = "dss.lock.expires"
LEASE_S = 120.0
"""How long a hold lasts past its last renewal: a dead holder's lock is taken after it."""
RENEW_S = 20.0
"""How often the holder renews the lease: several renewals fit in one lease, so a
leader slow to answer once does not lose it."""
WAIT_S = 1800.0
"""How long a submit waits for another holder: longer than a job's `up` (the docker
provider's convergence timeout is 10 min)."""
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


def try_lock(api: Any, holder: str, now: float, hold_s: float = LEASE_S) -> str | LockHeld:
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


def renew(api: Any, config_id: str, holder: str, until: float) -> str:
    """Move lock `config_id`'s expiry to `until` while `holder` holds it: '' when done,
    else why not (the lock gone or another's: this holder's lease lapsed and another
    took it; or the leader's error). The update carries the version read, so a lock
    removed and taken between the read and the update is never relabelled."""
    try:
        cfg = api.inspect_config(config_id)
    except Exception as e:  # the Docker SDK's APIError: 404 when it is gone
        return "it is gone" if _status(e) == 404 else f"the leader said: {e}"
    spec = dict(cfg.get("Spec") or {})
    labels = dict(spec.get("Labels") or {})
    if labels.get(HOLDER_LABEL) != holder:
        return f"it is held by {labels.get(HOLDER_LABEL, '?')}"
    spec["Labels"] = {**labels, EXPIRES_LABEL: f"{until:.0f}"}
    version = int((cfg.get("Version") or {}).get("Index") or 0)
    try:
        update_config(api, config_id, version, spec)
    except Exception as e:
        return f"the leader said: {e}"
    return ""


@contextmanager
def _renewed(
    api: Any,
    config_id: str,
    holder: str,
    out: Callable[[str], Any],
    hold_s: float,
    renew_s: float,
    clock: Callable[[], float],
) -> Iterator[None]:
    """The holder's renewals, in a thread of their own for the block's length: every
    `renew_s` the expiry moves to `hold_s` ahead. What stops them is said once (the
    block goes on: its `up` is not interrupted, and the GPU check of the job's `up`
    still refuses GPUs another took). They end before the block's end returns, so the
    API is then the caller's alone again."""
    stop = threading.Event()

    def run() -> None:
        told = ""
        while not stop.wait(renew_s):
            why = renew(api, config_id, holder, clock() + hold_s)
            if why and why != told:
                out(f"the cluster's submit lock could not be renewed: {why}")
                told = why
            if why.startswith(("it is gone", "it is held by")):
                return

    thread = threading.Thread(target=run, name="dss-lock-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


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
    hold_s: float = LEASE_S,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Any] = time.sleep,
    ssh: dict[str, Any] | None = None,
    renew_s: float = RENEW_S,
) -> Iterator[None]:
    """Hold the cluster's submit lock for the block, waiting up to `wait_s` for another
    holder (saying who, once per holder), its lease renewed every `renew_s` for `hold_s`
    more; let it go afterwards, also on an error. ConfigError when the leader does not
    answer or the wait runs out. `ssh`: the leader's SSH settings (jobs/command.py
    `leader_ssh`), None for the URL's own."""
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
        with _renewed(api, ours, holder, out, hold_s, renew_s, clock):
            yield
    finally:
        _remove(api, ours)
