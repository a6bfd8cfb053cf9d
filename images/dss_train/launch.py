"""Distributed launch environment: read, validate, wait for the master (no torch)."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from . import DssError


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise DssError(f"environment variable {key}={env[key]!r} is not an integer") from None


def read_dist_env(env: Mapping[str, str]) -> DistEnv:
    """Read RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (set by deepspeed's
    launcher and by torchrun). None of them set means a single process."""
    keys = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    present = [k for k in keys if k in env]
    if not present:
        return DistEnv(0, 1, 0, "127.0.0.1", 29500)
    missing = [k for k in keys if k not in env]
    if missing:
        raise DssError(f"incomplete launch environment: {', '.join(missing)} not set "
                       f"(launch with deepspeed or torchrun)")
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
    port = _int(env, "MASTER_PORT")
    if world < 1 or not 0 <= rank < world:
        raise DssError(f"RANK={rank} is outside WORLD_SIZE={world}")
    if not 0 < port < 65536:
        raise DssError(f"MASTER_PORT={port} is not a TCP port")
    return DistEnv(rank, world, local, env["MASTER_ADDR"], port)


def wait_for_master(addr: str, port: int, timeout: float, interval: float = 1.0) -> None:
    """Block until addr:port accepts TCP connections; DssError naming it if not in time."""
    deadline = time.monotonic() + timeout
    try:
        socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise DssError(f"master address {addr!r} does not resolve: {e.strerror}") from None
    last = ""
    while True:
        try:
            with socket.create_connection((addr, port), timeout=min(5.0, max(timeout, 0.1))):
                return
        except OSError as e:
            last = e.strerror or str(e)
        if time.monotonic() >= deadline:
            raise DssError(f"master {addr}:{port} unreachable after {timeout:.0f}s ({last})")
        time.sleep(interval)


def needs_master_wait(env: Mapping[str, str], dist: DistEnv) -> bool:
    """Whether this process should wait for the master's TCP store before joining.
    Under torchrun the agent hosts the store (already up for every rank); under
    deepspeed's launcher rank 0 hosts it, so only the other ranks wait."""
    if dist.world_size == 1:
        return False
    if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        return True
    return dist.rank != 0
