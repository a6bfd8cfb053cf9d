"""`lab up --swarm`: swarm init on lab-h1, the other hosts joined, every node ready."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lab import config as c
from lab import sysops as s
from lab.sysops import LabError


def form_swarm(lab: c.LabPaths, hosts: int, managers: int = 1, timeout: float = 60) -> None:
    """swarm init on h1, managers h2..hK join one by one, the rest join as workers in parallel."""
    if not 1 <= managers <= hosts:
        raise LabError(f"--managers {managers} must be within 1..{hosts}")
    lead = lab.host(1).socket
    a1 = c.host_addr(1)
    st, body = s.docker_api(
        lead, "POST", "/swarm/init", {"ListenAddr": f"{a1}:2377", "AdvertiseAddr": a1}, timeout=60
    )
    if st != 200:
        raise LabError(f"{c.host_name(1)}: swarm init failed ({st}): {body}")
    st, sw = s.docker_api(lead, "GET", "/swarm")
    if st != 200:
        raise LabError(f"{c.host_name(1)}: cannot read swarm join tokens ({st}): {sw}")
    tokens = sw["JoinTokens"]

    def join(i: int, token: str) -> None:
        addr = c.host_addr(i)
        req = {
            "ListenAddr": f"{addr}:2377",
            "AdvertiseAddr": addr,
            "RemoteAddrs": [f"{a1}:2377"],
            "JoinToken": token,
        }
        st, body = s.docker_api(lab.host(i).socket, "POST", "/swarm/join", req, timeout=90)
        if st != 200:
            raise LabError(f"{c.host_name(i)}: swarm join failed ({st}): {body}")

    for i in range(2, managers + 1):
        join(i, tokens["Manager"])
    with ThreadPoolExecutor(max_workers=8) as ex:
        for f in [ex.submit(join, i, tokens["Worker"]) for i in range(managers + 1, hosts + 1)]:
            f.result()
    wait_nodes_ready(lab, hosts, timeout)


def swarm_nodes(sock: Path) -> list[dict[str, Any]]:
    st, nodes = s.docker_api(sock, "GET", "/nodes")
    if st != 200 or not isinstance(nodes, list):
        raise LabError(f"cannot list swarm nodes ({st}): {nodes}")
    return nodes


def wait_nodes_ready(lab: c.LabPaths, hosts: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        nodes = swarm_nodes(lab.host(1).socket)
        # A node that has only just joined has no description yet.
        ready = {
            (n.get("Description") or {}).get("Hostname")
            for n in nodes
            if n["Status"]["State"] == "ready"
        }
        if len(ready) >= hosts:
            return
        if time.monotonic() > deadline:
            missing = {c.host_name(i) for i in range(1, hosts + 1)} - ready
            raise LabError(f"swarm nodes not ready within {timeout:.0f} s: {sorted(missing)}")
        time.sleep(0.3)
