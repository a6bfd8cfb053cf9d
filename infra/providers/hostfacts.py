"""HostFacts' dynamic provider: what each host really has, read from the host over
SSH, checked against what the config expects (infra/components/hostfacts.py).

A `command.remote.Command` has no Read, so `pulumi refresh` would never look at
the host again. Instead each host gets a dynamic resource whose `read` re-reads
the facts over SSH and reports them *as its inputs*: after a refresh, the engine
diffs the config's expected facts against what the host has, so
`pulumi preview --refresh --expect-no-changes` fails naming the resource
(`<stack>-facts-<host>`) and the fact (`expected.gpu_count: 7 => 8`).

Create and update are the preflight: they refuse, with the host and fact named,
before any service is created on a host that lacks GPUs, whose NIC cannot carry
the overlay, whose NVIDIA driver is older than the configured minimum, whose NVIDIA
container toolkit ignores Swarm's GPU assignment (infra/providers/gpuruntime.py), or
whose Docker engine is older than MIN_DOCKER_ENGINE (infra/layout.py), or, with
GPUs, one whose Swarm rejects tasks reserving counted resources (23.0.2 to 25.0.2);
and, on a host with an RDMA device, whose fabric is not ready (infra/providers/fabric.py:
port down, no RoCE v2 GID, small MTU, locked memory limited, no device injection);
and, on the host data plane, one that cannot name its peers in time
(infra/providers/peers.py).
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource

from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.dcgm import DCGM_SCRIPT, dcgm_problem, parse_dcgm, seen_dcgm
from infra.providers.fabric import (
    FABRIC_SCRIPT,
    parse_fabric,
)
from infra.providers.factcheck import (  # the checks, read by the provider below
    compare,
    engine_problem,
    mismatches,
    version_tuple,
)
from infra.providers.gpuruntime import (
    TOOLKIT_SCRIPT,
)
from infra.providers.health import (
    HEALTH_KEYS,
    HEALTH_SCRIPT,
    baseline_of,
    health_problem,
    parse_health,
    seen_health,
)
from infra.providers.hostops import HostError, ssh_run
from infra.providers.nic import (
    NIC_KEYS,
    NIC_SCRIPT,
    nic_baseline_of,
    nic_problem,
    parse_nic,
    seen_nic,
)
from infra.providers.peers import parse_peers, peers_problem, peers_script, seen_peers

# One round trip per host. Prints key=value lines; unknown tools print nothing.
FACTS_SCRIPT = (
    r"""set -u
echo "hostname=$(hostname)"
echo "nic_mtu=$(cat /sys/class/net/{nic}/mtu 2>/dev/null || echo 0)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=uuid,driver_version --format=csv,noheader,nounits |
    while IFS=', ' read -r uuid drv; do echo "gpu=$uuid"; echo "driver=$drv"; done
fi
echo "docker=$(docker version --format '{{{{.Server.Version}}}}' 2>/dev/null || true)"
echo "default_runtime=$(docker info --format '{{{{.DefaultRuntime}}}}' 2>/dev/null || true)"
echo "swarm_resource=$(sed -n 's/^swarm-resource *= *"\(.*\)"/\1/p' \
  /etc/nvidia-container-runtime/config.toml 2>/dev/null | head -n1)"
"""
    + TOOLKIT_SCRIPT
)


def parse_facts(text: str) -> dict[str, Any]:
    """Parse FACTS_SCRIPT output into observed facts."""
    gpus: list[str] = []
    drivers: set[str] = set()
    toolkit: dict[str, str] = {}
    out: dict[str, Any] = {
        "hostname": "", "nic_mtu": 0, "docker_version": "", "default_runtime": "",
        "swarm_resource": "",
    }  # fmt: skip
    for line in text.splitlines():
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "hostname":
            out["hostname"] = value
        elif key == "nic_mtu":
            out["nic_mtu"] = int(value) if value.isdigit() else 0
        elif key == "gpu" and value:
            gpus.append(value)
        elif key == "driver" and value:
            drivers.add(value)
        elif key == "docker":
            out["docker_version"] = value
        elif key in ("default_runtime", "swarm_resource"):
            out[key] = value
        elif key in ("toolkit_version", "toolkit_mode"):
            toolkit[key] = value
    out["gpu_uuids"] = sorted(gpus)
    out["driver_version"] = min(drivers, key=version_tuple) if drivers else ""
    # Only where nvidia-ctk reported a version: a host without the toolkit (every lab
    # host unless a test fakes one) keeps the observed keys it always had, so a refresh
    # of a stack deployed before these facts existed compares equal.
    if toolkit.get("toolkit_version"):
        out["toolkit_version"] = toolkit["toolkit_version"]
        out["toolkit_mode"] = toolkit.get("toolkit_mode", "")
    return out


# Outputs of a check, not inputs: what was seen, and the baselines the next check
# counts from.
_OUTPUT_ONLY = ("observed", "health_baseline", "nic_baseline")


def _health_on(props: dict[str, Any]) -> bool:
    # Read wherever health is expected too (the program sets both together).
    return bool(props.get("gpu_health")) or any(k in props["expected"] for k in HEALTH_KEYS)


def _rerun_dcgm(props: dict[str, Any], reading: bool) -> bool:
    # Above level 1 the diagnostic loads the GPUs: never beside a live job (a read).
    level = props.get("dcgm_level")
    return level is not None and not (reading and level > 1)


def host_script(props: dict[str, Any], reading: bool = False) -> str:
    """The one script a check sends to a host (its props as the provider holds them):
    the facts, then each reading the stack asked for. tests/gpu runs exactly this on a
    real GPU host (scripts/gpu-check)."""
    script = FACTS_SCRIPT.format(nic=props["nic"])
    if props.get("rdma"):
        script += FABRIC_SCRIPT.format(rdma=props["rdma"])
    if _health_on(props):
        script += HEALTH_SCRIPT
    if props.get("nic_health"):
        script += NIC_SCRIPT.format(nic=props["nic"])
    if _rerun_dcgm(props, reading):
        script += DCGM_SCRIPT.format(level=props["dcgm_level"])
    if props.get("peers"):
        script += peers_script(props["peers"])
    return script


class HostFactsProvider(BoundaryProvider):
    """Reads host facts over SSH; refuses to create/update while they differ."""

    def _observe(
        self, props: dict[str, Any], prior: dict[str, Any], reading: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """What the host has, and the facts in the shape of `expected` (GPU and NIC
        health: relative to the baselines in `prior`, the last check's outputs; DCGM's
        diagnostic above level 1: the last check's when `reading`)."""
        rdma = props.get("rdma") or ""
        health_on = _health_on(props)
        limits: dict[str, Any] = props.get("nic_health") or {}
        level = props.get("dcgm_level")
        rerun_dcgm = _rerun_dcgm(props, reading)
        text = ssh_run(props["ssh"], host_script(props, reading))
        observed = parse_facts(text)
        if rdma:
            observed.update(parse_fabric(text))
        seen = compare(
            props["expected"], observed, props["min_driver"], props.get("rdma_gid_index")
        )
        if health_on:
            observed["health"] = parse_health(text)
            health = seen_health(observed["health"], prior.get("health_baseline"))
            seen.update({k: v for k, v in health.items() if k in props["expected"]})
        peers: dict[str, str] = props.get("peers") or {}
        if peers:
            observed["peer_lookups"] = parse_peers(text)
            named = seen_peers(observed, peers)
            seen.update({k: v for k, v in named.items() if k in props["expected"]})
        if level is not None:
            last = (prior.get("observed") or {}).get("dcgm")
            observed["dcgm"] = parse_dcgm(text) if rerun_dcgm or last is None else last
            dcgm = seen_dcgm(observed["dcgm"])
            seen.update({k: v for k, v in dcgm.items() if k in props["expected"]})
        if limits:
            observed["nic_link"] = parse_nic(text)
            nic = seen_nic(observed["nic_link"], limits, prior.get("nic_baseline"))
            seen.update({k: v for k, v in nic.items() if k in props["expected"]})
        return observed, seen

    def _apply(self, props: dict[str, Any], prior: dict[str, Any]) -> dict[str, Any]:
        try:
            observed, seen = self._observe(props, prior)
        except HostError as e:
            raise Exception(f"preflight: host {props['host']} unreachable: {e}") from None
        problems = mismatches(
            props["host"],
            props["expected"],
            seen,
            observed,
            props["min_driver"],
            props["needed_mtu"],
            props.get("rdma") or "",
            props.get("rdma_gid_index"),
        ) + engine_problem(props["host"], observed, props["expected"].get("gpu_count", 0))
        remedy = props.get("remedy", "")
        problems += [
            health_problem(
                props["host"], k, observed["health"], prior.get("health_baseline"), remedy
            )
            for k in HEALTH_KEYS
            if k in props["expected"] and seen.get(k)
        ]
        problems += [
            nic_problem(
                props["host"],
                props["nic"],
                k,
                observed["nic_link"],
                props["nic_health"],
                prior.get("nic_baseline"),
                remedy,
            )
            for k in NIC_KEYS
            if k in props["expected"] and seen.get(k) != props["expected"][k]
        ]
        if "dcgm_diag_failures" in props["expected"] and seen.get("dcgm_diag_failures"):
            problems.append(
                dcgm_problem(props["host"], props["dcgm_level"], observed["dcgm"], remedy)
            )
        peers = props.get("peers") or {}
        if "slow_peer_lookups" in props["expected"] and seen.get("slow_peer_lookups"):
            problems.append(peers_problem(props["host"], observed, peers))
        if problems:
            raise Exception("preflight failed:\n  " + "\n  ".join(problems))
        out = {**props, "observed": observed}
        # Checked: the next check counts only what comes after this one.
        if "health" in observed:
            out["health_baseline"] = baseline_of(observed["health"], prior.get("health_baseline"))
        if "nic_link" in observed:
            out["nic_baseline"] = nic_baseline_of(observed["nic_link"])
        return out

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=f"facts-{props['host']}", outs=self._apply(props, {}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> Any:
        from pulumi.dynamic import UpdateResult

        return UpdateResult(outs=self._apply(news, olds))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = (
            "expected",
            "nic",
            "min_driver",
            "ssh",
            "needed_mtu",
            "rdma",
            "rdma_gid_index",
            "nic_health",
            "dcgm_level",
            "peers",
        )
        return diff_keys(olds, news, keys)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # The baseline stays: a fault since the last `up` is drift until an `up` (or a
        # drain) deals with it.
        observed, seen = self._observe(props, props, reading=True)
        # Report what the host has as the expected facts: the next diff against the
        # program's expectations then names each drifted fact.
        return ReadResult(
            id_=id_,
            outs={**props, "expected": seen, "observed": observed},
            inputs={k: v for k, v in props.items() if k not in _OUTPUT_ONLY} | {"expected": seen},
        )

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Facts are only read; nothing on the host to remove."""


class HostFactsResource(Resource):
    """The facts of one host (dynamic resource)."""

    observed: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(HostFactsProvider(), name, {**props, "observed": None}, opts)
