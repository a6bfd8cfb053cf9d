"""A lab whose hosts differ in GPU count and model (`lab up --gpus 2,1,3 --gpu-models
fake-a,fake-b,fake-a`, brought up by harness.labup as a test module would): each daemon
declares its own count, each host's nvidia-smi names its model, `lab status` says both,
and the host facts of a stack config naming them (harness.configs) pass."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from harness.configs import dev_on_hosts, unprefixed
from harness.lab import lab_cli
from harness.labup import running_lab
from infra.config import parse_stack_config
from infra.providers.hostfacts import HostFactsProvider
from lab import config as c
from tests.lab.conftest import _require_root, outs
from tests.lab.test_infra_hostfacts import props

pytestmark = pytest.mark.lab

COUNTS = [2, 1, 3]
MODELS = ["fake-a", "fake-b", "fake-a"]


@pytest.fixture(scope="module")
def mixed_lab() -> Iterator[dict[str, Any]]:
    """lab-h1..h3 with 2, 1 and 3 fake GPUs of fake-a, fake-b, fake-a (no swarm); its
    `lab status --json`."""
    _require_root()
    with running_lab(3, COUNTS, MODELS) as status:
        yield status


def test_status_and_daemons_give_each_hosts_gpus(mixed_lab: dict[str, Any]) -> None:
    """`lab status --json` names each host's count and model; each daemon declares the
    host's own GPUs (daemon.json's node-generic-resources)."""
    hosts = mixed_lab["hosts"]
    assert [(h["gpus"], h["gpu_model"]) for h in hosts] == list(zip(COUNTS, MODELS, strict=True))
    for i, h in enumerate(hosts, 1):
        assert h["gpu_uuids"] == c.gpu_uuids(i, COUNTS[i - 1]), h
        assert h["declared_gpus"] == h["gpu_uuids"], f"{h['name']}: {h['declared_gpus']}"
    text = lab_cli("status").stdout
    row = next(line for line in text.splitlines() if line.startswith("| lab-h2 |"))
    assert "| gpus | model |" in text and row.endswith("| 1 | fake-b |"), text


def test_nvidia_smi_names_each_hosts_model(mixed_lab: dict[str, Any]) -> None:
    """Over SSH, each host's `nvidia-smi -L` lists its own GPUs by its own model."""
    lab = c.LabPaths(c.lab_root())
    for i, (count, model) in enumerate(zip(COUNTS, MODELS, strict=True), 1):
        p = subprocess.run(
            ["ssh", *c.ssh_opts(lab), f"root@{c.host_addr(i)}", "nvidia-smi", "-L"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        uuids = c.gpu_uuids(i, count)
        want = "".join(f"GPU {g}: {model} (UUID: {u})\n" for g, u in enumerate(uuids))
        assert (p.returncode, p.stdout) == (0, want), f"{c.host_name(i)}: {p.stderr}"


def test_host_facts_of_a_per_host_config_pass(mixed_lab: dict[str, Any]) -> None:
    """A stack config whose hosts carry the lab's per-host `gpus: {count, model}` passes
    each host's preflight: the GPUs it finds are the ones the config counts."""
    # gpus_per_node within the smallest host's count: the config refuses more.
    raw = dev_on_hosts(3, COUNTS, gpu_models=MODELS, gpus_per_node=min(COUNTS))
    cfg = parse_stack_config(unprefixed(raw))
    for i, host in enumerate(cfg.hosts, 1):
        assert (host.gpus.count, host.gpus.model) == (COUNTS[i - 1], MODELS[i - 1])
        seen = outs(HostFactsProvider().create(props(cfg, host.name)))["observed"]
        assert seen["gpu_uuids"] == sorted(c.gpu_uuids(i, COUNTS[i - 1])), seen
