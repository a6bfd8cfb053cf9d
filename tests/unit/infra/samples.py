"""Sample stack configs and the Pulumi mocks the infra unit tests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi

from infra.config import stack_file_values

ROOT = Path(__file__).resolve().parents[3]


def stack_config(stack: str) -> dict[str, Any]:
    """The raw `deepspeed-swarm:*` values of a committed stack file (prefix stripped)."""
    return stack_file_values((ROOT / f"Pulumi.{stack}.yaml").read_text())


def host(i: int, role: str = "worker", gpus: int = 8) -> dict[str, Any]:
    """A minimal valid host entry."""
    return {
        "name": f"gpu-{i:02d}",
        "address": f"10.0.0.{i}",
        "docker_host": f"ssh://root@gpu-{i:02d}",
        "role": role,
        "gpus": {"count": gpus},
    }


def small_config() -> dict[str, Any]:
    """A valid three-host config (1 manager, 8 GPUs each)."""
    return {
        "hosts": [host(1, "manager"), host(2), host(3)],
        "network": {"mtu": 9000, "underlay_mtu": 9100},
        "training": {"gpus_per_node": 8},
        # ssh:// hosts have their keys checked (infra/config/rules/ssh.py).
        "ssh": {"known_hosts_file": "~/.ssh/known_hosts"},
    }


def golden_host_key(address: str) -> str:
    """The stand-in host key of `address` in the unit tests' known_hosts."""
    return f"ssh-ed25519 golden-host-key-{address}"


def known_hosts_text() -> str:
    """A known_hosts with a key for every address the committed stacks and the sample
    configs use, so that a program with ssh:// hosts pins their keys
    (infra/components/remote.py) without reading the machine's own file."""
    addresses = {h["address"] for s in ("dev", "lab8", "prod") for h in stack_config(s)["hosts"]}
    addresses |= {f"10.0.0.{i}" for i in range(1, 17)}
    return "".join(f"{a} {golden_host_key(a)}\n" for a in sorted(addresses))


def write_ssh_home(home: Path) -> Path:
    """`home` with `.ssh/known_hosts` (known_hosts_text), for a test's HOME."""
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "known_hosts").write_text(known_hosts_text())
    return home


class Mocks(pulumi.runtime.Mocks):
    """Records every resource; fills in the outputs real providers would return."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []
        self.engine: str | None = None
        """The Docker version every host's facts report (None: facts not read, as
        in a first preview)."""
        self.nodes: list[str] | None = None
        """The swarm nodes the roster's tasks run on, in node-rank order (None:
        `node-0`, `node-1`, ...)."""
        self.cluster_outputs: dict[str, Any] | None = None
        """What a job's stack reference reads of its cluster stack (None: nothing)."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        outs = dict(args.inputs)
        if args.typ == "docker:index/image:Image":
            outs["repoDigest"] = f"{args.inputs['imageName'].rsplit(':', 1)[0]}@sha256:{'ab' * 32}"
        if args.typ == "pulumi-python:dynamic:Resource" and "expected_tasks" in args.inputs:
            outs["entries"] = [
                {
                    "service": args.inputs["services"][min(n, 1)],
                    "slot": max(n, 1),
                    "task_id": f"task{n}",
                    "node": f"node-{n}" if self.nodes is None else self.nodes[n],
                    "address": f"10.0.1.{n + 2}",
                    "container_id": f"c{n}",
                    "gpu_uuids": [f"GPU-{n}-{g}" for g in range(2)],
                }
                for n in range(int(args.inputs["expected_tasks"]))
            ]
        if args.typ == "pulumi:pulumi:StackReference" and self.cluster_outputs is not None:
            outs["outputs"] = self.cluster_outputs
        facts = args.typ == "pulumi-python:dynamic:Resource" and "needed_mtu" in args.inputs
        if facts and self.engine is not None:
            outs["observed"] = {"docker_version": self.engine}
        if args.typ == "pulumi-python:dynamic:Resource" and "comment" in args.inputs:
            outs["private_key"] = "-----BEGIN OPENSSH PRIVATE KEY-----mock"
            outs["public_key"] = "ssh-ed25519 AAAAmock"
        if args.typ == "pulumi-python:dynamic:Resource" and args.name.endswith("-host-net"):
            outs["network_id"] = "swarm-host-network-id"
        if args.typ == "pulumi-python:dynamic:Resource" and args.name.endswith("-token"):
            outs["value"] = "mock-generated-token"
        return f"{args.name}-id", outs

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def by_type(self, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def named(self, suffix: str) -> pulumi.runtime.MockResourceArgs:
        found = [r for r in self.resources if r.name.endswith(suffix)]
        assert len(found) == 1, (
            f"expected one resource named *{suffix}, got {[r.name for r in found]}"
        )
        return found[0]


def set_stack_config(raw: dict[str, Any], secret_keys: tuple[str, ...] = ()) -> None:
    """Give the mocked engine a stack config, as `pulumi up` would."""
    pulumi.runtime.set_all_config(
        {f"deepspeed-swarm:{k}": json.dumps(v) for k, v in raw.items()},
        [f"deepspeed-swarm:{k}" for k in secret_keys],
    )
