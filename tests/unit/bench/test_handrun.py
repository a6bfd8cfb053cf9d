"""bench.handrun: the hand-run baseline says what the program's services say."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import handrun, train_time_bench

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]

IMAGE = "registry:5000/deepspeed-swarm/handrun:latest"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], str]:
    """An 8-host stack rendered to deploy.sh and stack.yml."""
    tmp = tmp_path_factory.mktemp("handrun")
    stack_file = tmp / "Pulumi.handrun.yaml"
    stack_file.write_text(yaml.safe_dump({"config": train_time_bench.stack_config(8, "r")}))
    cfg = handrun.load(stack_file)
    script = handrun.write(cfg, stack_file, IMAGE, tmp / "out", {"wandb_api_key": "x"})
    return cfg, yaml.safe_load((tmp / "out" / "stack.yml").read_text()), script.read_text()


def test_overlay_mtu_in_driver_opts(rendered: tuple[Any, dict[str, Any], str]) -> None:
    """The compose overlay carries the stack's MTU as a driver option."""
    cfg, doc, _ = rendered
    net = doc["networks"][handrun.NETWORK]
    assert net["driver_opts"]["com.docker.network.driver.mtu"] == str(cfg.network.mtu), net


def test_gpu_reservations_and_replicas(rendered: tuple[Any, dict[str, Any], str]) -> None:
    """Master and workers reserve the stack's GPUs per node, one task per node."""
    cfg, doc, _ = rendered
    for name, replicas in (("ds-master", 1), ("ds-worker", len(cfg.workers))):
        deploy = doc["services"][name]["deploy"]
        (spec,) = deploy["resources"]["reservations"]["generic_resources"]
        assert spec["discrete_resource_spec"] == {"kind": "NVIDIA-GPU", "value": 2}, name
        assert deploy["replicas"] == replicas and deploy["placement"]["max_replicas_per_node"] == 1


def test_sshd_healthcheck_and_warmup(rendered: tuple[Any, dict[str, Any], str]) -> None:
    """Training tasks are health-checked by the image's sshd probe; a global warm-up
    task takes the overlay to every node first."""
    _, doc, _ = rendered
    assert doc["services"]["ds-master"]["healthcheck"]["test"][-1].endswith("/healthcheck.sh")
    assert doc["services"]["ds-net-warmup"]["deploy"] == {"mode": "global"}


def test_script_forms_the_swarm_over_every_host(rendered: tuple[Any, dict[str, Any], str]) -> None:
    """deploy.sh inits on the first manager, joins the 7 others (2 as managers), labels
    all 8, and is valid bash."""
    _, _, script = rendered
    assert script.count("swarm init") == 1
    assert script.count("swarm join --token $mtoken") == 2
    assert script.count("swarm join --token $wtoken") == 5
    assert script.count("node update --label-add dss.role=") == 8
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_launch_is_the_programs(rendered: tuple[Any, dict[str, Any], str]) -> None:
    """Step 8 starts the same launcher as the program, in the stack's master service."""
    cfg, _, _ = rendered
    text = handrun.launch(cfg, "10.0.1.2", 8, "10.0.1.2 slots=1\n10.0.1.3 slots=1")
    assert "svc=dss_ds-master" in text, text
    assert "deepspeed --hostfile=" in text and "--num_nodes=8" in text, text
