"""Stack configs for the lab: the committed stack files' config, without their
encrypted secrets (a throwaway stack has its own passphrase and sets its own), with
training overrides or grown to N lab hosts.

The dict builders return namespaced keys (`deepspeed-swarm:hosts`), as a stack file
holds them (`infra.config.stack_file_yaml` writes them); `dev_stack_config` is the
validated model the providers' lab tests call with.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml

from harness import ROOT
from harness.lab import socket
from lab import config as c
from lab.gpus import DEFAULT_GPU_MODEL, lab_gpus

if TYPE_CHECKING:
    from infra.config import StackConfig

NS = "deepspeed-swarm"
HOSTS, TRAINING, SECRETS = f"{NS}:hosts", f"{NS}:training", f"{NS}:secrets"
NETWORK = f"{NS}:network"


def committed(stack: str, **training: Any) -> dict[str, Any]:
    """`Pulumi.<stack>.yaml`'s config, secrets left out, with training overrides.

    `DSS_DATA_PLANE` (overlay | host), when set, is every such stack's
    `network.data_plane`: the engine and acceptance suites then run on that data plane
    (docs/dataplane.md, "Both data planes"). `DSS_LAB_TRANSPORT=unix` puts every lab
    host's engine on its unix socket instead of the committed `ssh://root@<address>`
    (the variant `bench/ssh_bench.py` compares against)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    doc.pop(SECRETS, None)
    doc[TRAINING] = {**doc[TRAINING], **training}
    plane = os.environ.get("DSS_DATA_PLANE")
    doc = on_data_plane(doc, plane) if plane else doc
    return on_transport(doc, transport())


TRANSPORTS = ("ssh", "unix")
"""How a lab stack's hosts reach their engines: ssh://root@<address> (as prod, the
committed lab stacks' form) or the host's unix socket."""


def transport() -> str:
    """`DSS_LAB_TRANSPORT` (ssh | unix; default ssh), refused by name when another."""
    value = os.environ.get("DSS_LAB_TRANSPORT") or "ssh"
    if value not in TRANSPORTS:
        raise ValueError(f"DSS_LAB_TRANSPORT={value!r}; allowed: {', '.join(TRANSPORTS)}")
    return value


def docker_host(i: int, how: str) -> str:
    """Lab host i's engine URL over `how` (one of TRANSPORTS)."""
    return f"unix://{socket(i)}" if how == "unix" else f"ssh://root@{c.host_addr(i)}"


def on_transport(config: dict[str, Any], how: str) -> dict[str, Any]:
    """`config` (namespaced) with every lab host's `docker_host` over `how`."""
    out = copy.deepcopy(config)
    for h in out[HOSTS]:
        index = int(h["name"].removeprefix("lab-h"))
        assert h["name"] == c.host_name(index), f"{h['name']}: not a lab host"
        h["docker_host"] = docker_host(index, how)
    return out


def on_data_plane(config: dict[str, Any], plane: str) -> dict[str, Any]:
    """`config` (namespaced) with `network.data_plane` set to `plane`."""
    out = copy.deepcopy(config)
    out[NETWORK] = {**out.get(NETWORK, {}), "data_plane": plane}
    return out


def dev_config(**training: Any) -> dict[str, Any]:
    """The dev stack's config (2 lab hosts x 2 fake GPUs) with training overrides."""
    return committed("dev", **training)


def lab8_config(**training: Any) -> dict[str, Any]:
    """The lab8 stack's config (8 lab hosts and a spare) with training overrides."""
    return committed("lab8", **training)


def lab_hosts(
    template: dict[str, Any],
    count: int,
    managers: int,
    per_host: Sequence[dict[str, Any]] | None = None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Hosts lab-h1..lab-h<count> made from one host entry: the lab's address and
    engine URL (`transport()`) for each, the first `managers` of them managers,
    `fields` on every one, then `per_host[i - 1]` on lab-h<i> (one entry a host, e.g.
    its own `gpus`)."""
    own = list(per_host) if per_host is not None else [{}] * count
    if len(own) != count:
        raise ValueError(f"per_host has {len(own)} entries; allowed: one per host ({count})")
    return [
        {
            **template,
            "name": c.host_name(i),
            "address": c.host_addr(i),
            "docker_host": docker_host(i, transport()),
            "role": "manager" if i <= managers else "worker",
            **fields,
            **own[i - 1],
        }
        for i in range(1, count + 1)
    ]


def dev_on_hosts(
    hosts: int,
    gpus: int | Sequence[int],
    *,
    gpu_models: str | Sequence[str] = DEFAULT_GPU_MODEL,
    **training: Any,
) -> dict[str, Any]:
    """The dev stack's config for lab hosts 1..hosts with `gpus` fake GPUs of
    `gpu_models` (each one value for every host, or one per host, as `lab up --gpus
    --gpu-models` takes them): the first three are managers, or the first alone under
    3 hosts (Raft wants an odd count)."""
    cfg = dev_config(**training)
    managers = 3 if hosts >= 3 else 1
    own = lab_gpus(hosts, gpus, gpu_models)
    per_host = [
        {"gpus": {"count": own.count(i), "model": own.model(i)}} for i in range(1, hosts + 1)
    ]
    cfg[HOSTS] = lab_hosts(cfg[HOSTS][0], hosts, managers, per_host)
    return cfg


def unprefixed(config: dict[str, Any]) -> dict[str, Any]:
    """The project's keys of a namespaced config, prefix stripped (what
    `parse_stack_config` takes; `infra.config.stack_file_values` does the same for text)."""
    prefix = f"{NS}:"
    return {
        k.removeprefix(prefix): copy.deepcopy(v) for k, v in config.items() if k.startswith(prefix)
    }


def dev_stack_config(**training: Any) -> StackConfig:
    """The dev stack's validated config (it points at the lab's fixed addresses)."""
    from infra.config import parse_stack_config

    return parse_stack_config(unprefixed(dev_config(**training)))
