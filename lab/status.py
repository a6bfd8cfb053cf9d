"""`lab status`: what runs, read from the system and the daemons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infra import layout
from lab import config as c
from lab import engines as en
from lab import gpus as lg
from lab import sysops as s


def _state(root: Path) -> dict[str, Any]:
    try:
        data = json.loads(c.LabPaths(root).state.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def _host_live(lab: c.LabPaths, i: int) -> dict[str, Any]:
    hp = lab.host(i)
    live: dict[str, Any] = {
        "netns_exists": Path(f"/run/netns/{c.netns_name(i)}").exists(),
        "daemon": False,
        "ssh": s.tcp_open(c.host_addr(i), 22, timeout=0.5),
    }
    if not hp.socket.exists():
        return live
    try:
        st, info = s.docker_api(hp.socket, "GET", "/info")
    except OSError:
        return live
    if st != 200 or not isinstance(info, dict):
        return live
    sw = info.get("Swarm") or {}
    live["engine_components"] = _components(hp.socket)
    live.update(
        {
            "daemon": True,
            "hostname": info.get("Name"),
            "server_version": info.get("ServerVersion"),
            "swarm_state": sw.get("LocalNodeState"),
            "swarm_node_id": sw.get("NodeID") or None,
            "swarm_manager": bool(sw.get("ControlAvailable")),
            "declared_gpus": [
                r["NamedResourceSpec"]["Value"]
                for r in (info.get("GenericResources") or [])
                if "NamedResourceSpec" in r
                and r["NamedResourceSpec"]["Kind"] == layout.GPU_RESOURCE
            ],
        }
    )
    return live


def _components(sock: Path) -> dict[str, str]:
    """Versions the daemon reports of itself, containerd, runc and docker-init."""
    try:
        st, ver = s.docker_api(sock, "GET", "/version")
    except OSError:
        return {}
    if st != 200 or not isinstance(ver, dict):
        return {}
    out = {str(k["Name"]): str(k["Version"]) for k in ver.get("Components") or []}
    out["ApiVersion"] = str(ver.get("ApiVersion", ""))
    out["MinAPIVersion"] = str(ver.get("MinAPIVersion", ""))
    return out


def status(root: Path) -> dict[str, Any]:
    lab = c.LabPaths(root)
    st = _state(root)
    hosts = int(st.get("hosts", 0)) or len(s.netns_list(c.NETNS_PREFIX))
    mtu_file = Path(f"/sys/class/net/{c.BRIDGE}/mtu")
    mtu = int(mtu_file.read_text()) if mtu_file.exists() else int(st.get("mtu", c.DEFAULT_MTU))
    live = {i: _host_live(lab, i) for i in range(1, hosts + 1)}
    # Each host's count and model as `lab up` recorded them; the state file lost (or
    # not readable): one count read from the daemons, of the default model.
    gpus: int | lg.LabGpus | None = lg.from_state(st, hosts)
    if gpus is None:
        gpus = max((len(h.get("declared_gpus", [])) for h in live.values()), default=0)
    out = c.status_dict(
        root,
        hosts,
        gpus,
        mtu,
        live,
        registry_up=s.tcp_open(c.BRIDGE_ADDR, c.REGISTRY_PORT, timeout=0.5),
    )
    out["up"] = hosts > 0 and mtu_file.exists()
    # The engine chosen at `lab up`, and what the daemons say they run (server_version).
    out["engine"] = st.get("engine", en.DEFAULT_ENGINE if out["up"] else None)
    out["engine_version"] = st.get("engine_version")
    out["server_versions"] = sorted(
        {str(h["server_version"]) for h in live.values() if h.get("server_version")}
    )
    out["swarm_nodes"] = []
    for i in range(1, hosts + 1):
        if live[i].get("swarm_manager"):
            try:
                code, nodes = s.docker_api(lab.host(i).socket, "GET", "/nodes")
            except OSError:
                continue
            if code == 200 and isinstance(nodes, list):
                out["swarm_nodes"] = [
                    {
                        "hostname": n["Description"]["Hostname"],
                        "id": n["ID"],
                        "role": n["Spec"].get("Role"),
                        "state": n["Status"]["State"],
                        "addr": n["Status"].get("Addr"),
                        "availability": n["Spec"].get("Availability"),
                    }
                    for n in nodes
                ]
                break
    return out


def render_text(st: dict[str, Any]) -> str:
    if not st["up"]:
        return "lab: not running\n"
    # A model column where some host's is not the default (a lab up without
    # --gpu-models prints the table as before).
    models = any(
        h.get("gpu_model", lg.DEFAULT_GPU_MODEL) != lg.DEFAULT_GPU_MODEL for h in st["hosts"]
    )
    lines = [
        f"engine {st['engine']} (daemons: {', '.join(st['server_versions']) or '-'}); "
        f"bridge {st['bridge']} {st['bridge_addr']} mtu {st['bridge_mtu']}; "
        f"registry {st['registry']} {'up' if st['registry_up'] else 'DOWN'}; "
        f"shared {st['shared_dir']}; ssh key {st['ssh_key']}",
        "| host | address | daemon | ssh | swarm | gpus |" + (" model |" if models else ""),
        "| --- | --- | --- | --- | --- | --- |" + (" --- |" if models else ""),
    ]
    for h in st["hosts"]:
        swarm = h.get("swarm_state") or "-"
        if h.get("swarm_manager"):
            swarm += " (manager)"
        lines.append(
            f"| {h['name']} | {h['address']} | {'yes' if h.get('daemon') else 'NO'} | "
            f"{'yes' if h.get('ssh') else 'NO'} | {swarm} | {len(h.get('declared_gpus', []))} |"
            + (f" {h['gpu_model']} |" if models else "")
        )
    if st["swarm_nodes"]:
        ready = sum(1 for n in st["swarm_nodes"] if n["state"] == "ready")
        lines.append(f"swarm: {ready}/{len(st['swarm_nodes'])} nodes ready")
    return "\n".join(lines) + "\n"
