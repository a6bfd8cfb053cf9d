"""The host facts judged: what a host was seen to have, in the shape of what the config
expects (`compare`), and the preflight's sentences for each fact that differs
(`mismatches`) or an engine that cannot run the stack (`engine_problem`). Pure; read by
HostFacts' provider (infra/providers/hostfacts.py). The provider class stays in that
module, where live states name it; it imports these by name, so a state pickled before
they moved here runs them unchanged.
"""

from __future__ import annotations

from typing import Any

from infra.layout import (
    COUNTED_RESOURCES_FIXED_IN,
    MIN_DOCKER_ENGINE,
    OVERLAY_ATTACH_FIXED_IN,
    SWARM_RESOURCE_ENV,
)
from infra.providers.dcgm import DCGM_KEYS
from infra.providers.fabric import FABRIC_KEYS, fabric_problem, seen_fabric
from infra.providers.gpuruntime import runtime_isolates, runtime_problem
from infra.providers.health import HEALTH_KEYS
from infra.providers.nic import NIC_KEYS
from infra.providers.peers import PEER_KEYS
from infra.versions import older_than

# What the NVIDIA container runtime must read a task's GPUs from: Swarm puts the
# assigned generic resources in this variable; without it every task sees every GPU.
SWARM_RESOURCE = SWARM_RESOURCE_ENV


def version_tuple(v: str) -> tuple[int, ...]:
    """`550.54.15` -> (550, 54, 15); non-numeric parts count as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))


def compare(
    expected: dict[str, Any],
    observed: dict[str, Any],
    min_driver: str,
    gid_index: int | None = None,
) -> dict[str, Any]:
    """Observed facts in the shape of `expected`, so the two can be diffed key by key."""
    seen: dict[str, Any] = {
        "hostname": observed["hostname"],
        "gpu_count": len(observed["gpu_uuids"]),
        "nic_mtu": observed["nic_mtu"],
    }
    if "gpu_uuids" in expected:
        seen["gpu_uuids"] = observed["gpu_uuids"]
    if "driver_meets_minimum" in expected:
        drv = observed["driver_version"]
        seen["driver_meets_minimum"] = bool(drv) and version_tuple(drv) >= version_tuple(min_driver)
    if "gpu_isolation" in expected:
        seen["gpu_isolation"] = (
            observed.get("default_runtime") == "nvidia"
            and observed.get("swarm_resource") == SWARM_RESOURCE
        )
    if "gpu_runtime_isolates" in expected:
        seen["gpu_runtime_isolates"] = runtime_isolates(observed)
    # Only for a host with an RDMA device (the expected facts have these keys then).
    fabric = seen_fabric(observed, gid_index)
    seen.update({k: v for k, v in fabric.items() if k in expected})
    return seen


def mismatches(
    host: str,
    expected: dict[str, Any],
    seen: dict[str, Any],
    observed: dict[str, Any],
    min_driver: str,
    needed_mtu: int,
    rdma: str = "",
    gid_index: int | None = None,
) -> list[str]:
    """Human sentences for every fact that differs, naming host, fact and both values
    (each once: a missing RDMA device fails every fabric fact for one reason)."""
    out: list[str] = []
    for key, want in expected.items():
        got = seen.get(key)
        if got == want or key in (*HEALTH_KEYS, *NIC_KEYS, *DCGM_KEYS, *PEER_KEYS):  # own
            # sentences
            continue
        if key in FABRIC_KEYS:
            sentence = fabric_problem(host, key, observed, rdma, gid_index)
            if sentence not in out:
                out.append(sentence)
        elif key == "driver_meets_minimum":
            out.append(
                f"host {host}: NVIDIA driver {observed['driver_version'] or 'missing'} is older "
                f"than preflight.min_driver_version {min_driver}"
            )
        elif key == "gpu_isolation":
            out.append(
                f"host {host}: tasks would see every GPU: the Docker default runtime is "
                f"{observed.get('default_runtime') or 'unknown'!r} (needs 'nvidia') and "
                f"/etc/nvidia-container-runtime/config.toml sets swarm-resource to "
                f"{observed.get('swarm_resource') or 'nothing'!r} (needs {SWARM_RESOURCE!r})"
            )
        elif key == "gpu_runtime_isolates":
            out.append(runtime_problem(host, observed))
        elif key == "nic_mtu":
            small = " (too small for the overlay)" if int(got or 0) < needed_mtu else ""
            out.append(
                f"host {host}: NIC MTU is {got}, config network.underlay_mtu says {want}"
                f"{small}; the overlay needs at least {needed_mtu}"
            )
        else:
            out.append(f"host {host}: {key} is {got!r}, config says {want!r}")
    return out


def engine_problem(host: str, observed: dict[str, Any], gpus: int = 0) -> list[str]:
    """The preflight's sentence for a Docker engine older than MIN_DOCKER_ENGINE, or, on
    a host with GPUs, one whose Swarm rejects tasks reserving counted resources (none
    where `docker version` printed nothing: the engine is not judged unseen). Checked
    in create/update only, not an `expected` fact: a stack deployed before the minimum
    existed keeps the same inputs, and its refresh proposes nothing."""
    version = observed.get("docker_version") or ""
    if not version:
        return []
    if older_than(version, MIN_DOCKER_ENGINE):
        return [
            f"host {host}: Docker engine {version} is older than the minimum "
            f"{MIN_DOCKER_ENGINE} (infra/layout.py MIN_DOCKER_ENGINE); upgrade the engine"
        ]
    if (
        gpus
        and not older_than(version, OVERLAY_ATTACH_FIXED_IN)
        and older_than(version, COUNTED_RESOURCES_FIXED_IN)
    ):
        return [
            f"host {host}: Docker engine {version} rejects every task that reserves GPUs "
            f"as generic resources ('assigned node no longer meets constraints', "
            f"moby/swarmkit#3162, from {OVERLAY_ATTACH_FIXED_IN} until "
            f"{COUNTED_RESOURCES_FIXED_IN}); upgrade the engine to "
            f"{COUNTED_RESOURCES_FIXED_IN} or newer"
        ]
    return []
