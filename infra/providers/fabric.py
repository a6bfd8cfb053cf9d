"""The RDMA fabric of a host, as its own tools report it: what the host facts read
for a host with `rdma_interface` (infra/providers/hostfacts.py appends FABRIC_SCRIPT).

What each fact comes from, and why it is checked:

- `ibv_devinfo -v -d <dev>` (rdma-core's libibverbs/examples/devinfo.c, v29.0 and
  later): the first port's `state:` (`PORT_ACTIVE (4)`), `link_layer:`
  (`Ethernet` for RoCE, `InfiniBand`), `active_mtu:` (`4096 (5)`; on RoCE it follows
  the netdev's MTU, 1024 under a 1500-byte MTU), and with `-v` the GID table, whose
  lines on an Ethernet port end in `, RoCE v1` or `, RoCE v2`. NCCL needs a RoCE v2
  GID (`NCCL_IB_GID_INDEX`; since NCCL 2.21.5 it picks one itself when unset).
- `lsmod`: `nvidia_peermem` loaded, without which NCCL copies through host memory
  instead of GPUDirect RDMA (slower, still RDMA): a warning, never a refusal.
- `/etc/docker/daemon.json` `default-ulimits.memlock`: what every container gets,
  Swarm tasks included (the docker provider's service has no ulimits). RDMA pins the
  buffers it registers; NCCL's IB transport fails to register them under a small
  limit. Unlimited (-1) is what is asked for.
- The NVIDIA container toolkit (read by infra/providers/gpuruntime.py): the runtime
  adds /dev/infiniband/uverbs* and rdma_cm with their cgroup rules for a task whose
  env has `NVIDIA_MOFED=enabled` (internal/modifier, toolkit 1.11.0 and later), not
  in mode `cdi`. Swarm cannot give a service devices itself (moby/swarmkit#1244).

Text in, facts out: the lab fakes the tools per host (lab/hostfiles.py), so each
refusal is tested against the same parser a GPU server's output meets.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from infra.providers.gpuruntime import effective_mode
from infra.versions import release_key

# Appended to the facts script and str.format()ed with {rdma}: every line the tools
# print is prefixed, so nothing they say can pass for another fact.
FABRIC_SCRIPT = r"""if command -v ibv_devinfo >/dev/null 2>&1; then
  ibv_devinfo -v -d {rdma} 2>&1 | sed 's/^/ibv|/'
else
  echo "ibv_tool=missing"
fi
lsmod 2>/dev/null | awk '$1 == "nvidia_peermem" {{print "peermem=loaded"}}'
echo "daemon_json=$(base64 -w0 /etc/docker/daemon.json 2>/dev/null)"
"""

# RoCE's largest MTU, and InfiniBand's: what a jumbo-frame fabric reports.
RDMA_MTU = 4096
# The first toolkit whose runtime injects the RDMA devices for NVIDIA_MOFED=enabled.
MOFED_SINCE = "1.11.0"
MEMLOCK_FIX = (
    'set "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}} '
    "in /etc/docker/daemon.json and restart dockerd"
)

_GID = re.compile(r"^GID\[\s*(\d+)\]:\s*(\S+?)(?:,\s*(RoCE v[12]))?$")


def parse_fabric(text: str) -> dict[str, Any]:
    """FABRIC_SCRIPT's output as facts (only its own lines are read)."""
    out: dict[str, Any] = {
        "rdma_tool": True,
        "rdma_found": False,
        "rdma_error": "",
        "rdma_state": "",
        "rdma_link_layer": "",
        "rdma_active_mtu": 0,
        "rdma_gids": {},
        "nvidia_peermem": False,
        "memlock": "",
    }
    in_port = seen_port = False
    for line in text.splitlines():
        if line == "ibv_tool=missing":
            out["rdma_tool"] = False
        elif line == "peermem=loaded":
            out["nvidia_peermem"] = True
        elif line.startswith("daemon_json="):
            out["memlock"] = daemon_memlock(line.partition("=")[2])
        elif line.startswith("ibv|"):
            body = line[4:].strip()
            key, _, value = (p.strip() for p in body.partition(":"))
            if body.startswith("hca_id:"):
                out["rdma_found"] = True
            elif key == "port":
                # The first port only: NCCL_IB_HCA names the device, port 1 on one-port NICs.
                in_port, seen_port = not seen_port, True
            elif in_port and key == "state":
                out["rdma_state"] = value.split()[0] if value else ""
            elif in_port and key == "link_layer":
                out["rdma_link_layer"] = value
            elif in_port and key == "active_mtu":
                first = value.split()[0] if value else ""
                out["rdma_active_mtu"] = int(first) if first.isdigit() else 0
            elif in_port and (m := _GID.match(body)):
                out["rdma_gids"][m.group(1)] = m.group(3) or ""
            elif not out["rdma_found"] and body:
                out["rdma_error"] = body
    return out


def daemon_memlock(encoded: str) -> str:
    """`unlimited`, a number of bytes, or "" (no config, or no memlock default in it)."""
    try:
        cfg = json.loads(base64.b64decode(encoded)) if encoded else {}
    except (ValueError, binascii.Error):
        return ""
    limit = (
        ((cfg.get("default-ulimits") or {}).get("memlock") or {}) if isinstance(cfg, dict) else {}
    )
    soft, hard = limit.get("Soft"), limit.get("Hard")
    if soft is None or hard is None:
        return ""
    if soft == -1 and hard == -1:
        return "unlimited"
    return str(min(v for v in (soft, hard) if v != -1))


def roce_v2_gids(observed: dict[str, Any]) -> list[int]:
    """The GID indexes of the first port that are RoCE v2, in order."""
    return sorted(int(i) for i, t in (observed.get("rdma_gids") or {}).items() if t == "RoCE v2")


def gid_ok(observed: dict[str, Any], gid_index: int | None) -> bool:
    """An InfiniBand port needs no RoCE GID; an Ethernet one a RoCE v2 GID at the
    configured index, or any when NCCL picks."""
    if observed.get("rdma_link_layer") != "Ethernet":
        return observed.get("rdma_link_layer") == "InfiniBand"
    v2 = roce_v2_gids(observed)
    return gid_index in v2 if gid_index is not None else bool(v2)


def injects_rdma(observed: dict[str, Any]) -> bool:
    """Whether the host's NVIDIA runtime adds the RDMA devices to a task with
    NVIDIA_MOFED=enabled: the default runtime is nvidia, the toolkit 1.11.0 or later,
    not in mode `cdi`."""
    version = observed.get("toolkit_version") or ""
    if observed.get("default_runtime") != "nvidia" or not version:
        return False
    if release_key(version) < release_key(MOFED_SINCE):
        return False
    return effective_mode(version, observed.get("toolkit_mode") or "") != "cdi"


# The fabric facts (seen_fabric's keys), in `expected` only for a host with
# `rdma_interface` (infra/components/hostfacts.py expected_facts).
FABRIC_KEYS = (
    "rdma_port_active",
    "rdma_gid_ok",
    "rdma_active_mtu",
    "memlock_unlimited",
    "rdma_devices_injected",
)


def seen_fabric(observed: dict[str, Any], gid_index: int | None) -> dict[str, Any]:
    """The fabric facts in the shape the config expects (hostfacts.expected_facts)."""
    return {
        "rdma_port_active": observed.get("rdma_state") == "PORT_ACTIVE",
        "rdma_gid_ok": gid_ok(observed, gid_index),
        "rdma_active_mtu": observed.get("rdma_active_mtu", 0),
        "memlock_unlimited": observed.get("memlock") == "unlimited",
        "rdma_devices_injected": injects_rdma(observed),
    }


def fabric_problem(
    host: str, key: str, observed: dict[str, Any], dev: str, gid_index: int | None
) -> str:
    """The preflight's sentence for one fabric fact that is not as the config needs."""
    where = f"host {host}: RDMA device {dev}"
    if key in ("memlock_unlimited", "rdma_devices_injected"):
        return _host_problem(host, key, observed)
    if not observed.get("rdma_tool", True):
        return (
            f"{where}: ibv_devinfo is not installed (rdma-core's ibverbs-utils), so the "
            "fabric cannot be checked; install it"
        )
    if not observed.get("rdma_found"):
        said = observed.get("rdma_error") or "nothing"
        return f"{where} not found (ibv_devinfo said: {said}); check hosts[].rdma_interface"
    if key == "rdma_port_active":
        return (
            f"{where} port 1 is {observed.get('rdma_state') or 'in no state'}, not "
            "PORT_ACTIVE (link down: cable, switch port, or the netdev is down)"
        )
    if key == "rdma_gid_ok":
        layer = observed.get("rdma_link_layer") or "unknown"
        if layer != "Ethernet":
            return f"{where} has link layer {layer!r}; allowed: Ethernet (RoCE) or InfiniBand"
        v2 = roce_v2_gids(observed)
        if gid_index is None:
            return f"{where} has no RoCE v2 GID (NCCL needs one: give its netdev an IPv4 address)"
        kind = observed.get("rdma_gids", {}).get(str(gid_index))
        has = f"is {kind}" if kind else "is empty"
        return (
            f"{where}: GID {gid_index} (network.rdma_gid_index) {has}, not RoCE v2; "
            f"RoCE v2 GIDs here: {v2 or 'none'}"
        )
    return (
        f"{where} port 1 has active_mtu {observed.get('rdma_active_mtu')}, not "
        f"{RDMA_MTU} (on RoCE it follows the NIC's MTU: give the netdev at least "
        "4200, e.g. 9000)"
    )


def _host_problem(host: str, key: str, observed: dict[str, Any]) -> str:
    """The fabric facts of the host's Docker and NVIDIA runtime, not of the device."""
    if key == "memlock_unlimited":
        got = observed.get("memlock") or "no default (the daemon's own limit)"
        return (
            f"host {host}: the Docker daemon gives containers locked memory {got}, not "
            f"unlimited, and RDMA pins what NCCL registers; {MEMLOCK_FIX}"
        )
    version = observed.get("toolkit_version") or "none"
    return (
        f"host {host}: the NVIDIA runtime cannot add the RDMA devices to the tasks "
        f"(NVIDIA_MOFED=enabled needs the default runtime 'nvidia', here "
        f"{observed.get('default_runtime') or 'unknown'!r}, and toolkit >= {MOFED_SINCE} "
        f"not in mode 'cdi', here {version}); Swarm cannot pass devices itself"
    )
