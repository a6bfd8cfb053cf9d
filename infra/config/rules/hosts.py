"""Rules about the hosts: names, addresses, engines, GPUs, managers, spares, drivers."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from infra.config.rules.common import DNS_LABEL, ip, pattern_problems

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

_DNS_NAME = re.compile(rf"^{DNS_LABEL}(?:\.{DNS_LABEL})*$")
_VERSION = re.compile(r"^\d+(?:\.\d+)*$")


def unique_hosts(cfg: StackConfig) -> list[str]:
    out = []
    for field in ("name", "address"):
        counts = Counter(getattr(h, field) for h in cfg.hosts)
        for value, n in counts.items():
            if n > 1:
                out.append(
                    f"hosts[].{field}: {value!r} appears {n} times; allowed: each host {field} once"
                )
    return out


def manager_quorum(cfg: StackConfig) -> list[str]:
    managers = [h.name for h in cfg.hosts if h.role == "manager"]
    if not managers:
        return [
            "hosts[].role: no host has role 'manager'; allowed: 1, 3, 5 or 7 managers "
            "(an odd number keeps Raft quorum)"
        ]
    if len(managers) > 1 and len(managers) % 2 == 0:
        return [
            f"hosts[].role: {len(managers)} managers {managers}; allowed: an odd number "
            "(1, 3, 5, 7): an even count adds a failure without adding fault tolerance"
        ]
    return []


def spares(cfg: StackConfig) -> list[str]:
    out = []
    if cfg.hosts[0].spare:
        out.append(
            f"hosts[0].spare: true on {cfg.hosts[0].name!r}, the master (rank 0); "
            "allowed: spare on any host but the first"
        )
    if cfg.hosts[0].availability != "active":
        out.append(
            f"hosts[0].availability: {cfg.hosts[0].availability!r} on "
            f"{cfg.hosts[0].name!r}, the master (rank 0); allowed: 'active' (to move "
            "the master, list another host first)"
        )
    t = cfg.training
    if cfg.spares and (t.launcher != "deepspeed" or t.launch_mode != "pdsh"):
        names = [h.name for h in cfg.spares]
        out.append(
            f"hosts[].spare: spare hosts {names} with launcher {t.launcher!r} and "
            f"launch_mode {t.launch_mode!r}; allowed: spares only with launcher "
            "'deepspeed' and launch_mode 'pdsh' (one launcher that follows the real "
            "placement; per-node launches are tied to hosts)"
        )
    return out


def host_addresses(cfg: StackConfig) -> list[str]:
    return [
        f"hosts[{i}].address: {h.address!r} is neither an IP address nor a DNS host name; "
        "allowed: an IP address, or dot-separated labels of letters, digits and inner '-'"
        for i, h in enumerate(cfg.hosts)
        if ip(h.address) is None and not _DNS_NAME.match(h.address)
    ]


def unique_engines(cfg: StackConfig) -> list[str]:
    counts = Counter(h.docker_host for h in cfg.hosts)
    return [
        f"hosts[].docker_host: {value!r} is the endpoint of {n} hosts; allowed: each "
        "host its own Docker engine (one engine is one swarm node)"
        for value, n in counts.items()
        if n > 1
    ]


def unique_gpus(cfg: StackConfig) -> list[str]:
    owners: dict[str, list[str]] = {}
    for h in cfg.hosts:
        for uuid in h.gpus.uuids or []:
            owners.setdefault(uuid, []).append(h.name)
    return [
        f"hosts[].gpus.uuids: {uuid!r} is listed on hosts {names}; allowed: each GPU "
        "UUID on one host"
        for uuid, names in owners.items()
        if len(names) > 1
    ]


def driver_version(cfg: StackConfig) -> list[str]:
    # HostFacts compares versions part by part as integers.
    return pattern_problems(
        "preflight.min_driver_version",
        cfg.preflight.min_driver_version,
        _VERSION,
        "a driver version",
        "dotted numbers, e.g. '535.0' or '550.54.15'",
    )
