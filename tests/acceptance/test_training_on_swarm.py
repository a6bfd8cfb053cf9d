"""The dev stack's runtime path on a lab swarm, for real, without the Pulumi engine.

The swarm is formed by the program's SwarmInit/SwarmNode providers, the SSH key
pair comes from its SshKeyPair provider, the services carry what
TrainingServices gives them (GPU reservations, dnsrr, secrets, /data, /dev/shm,
the environment from infra.render), the roster and the pdsh launch and stop
scripts are the program's. Then DeepSpeed really trains across two lab hosts
and a SIGTERM leaves a complete checkpoint.

What this does not cover is the engine itself (plan, state, refresh): see
tests/engine, which needs the Pulumi toolchain and covers the same path through it
(test_stack, test_run). So this lives in scripts/acceptance, not in CI's test command
(it took 2 min there, and CI is kept under an hour).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.types import (
    EndpointSpec,
    Healthcheck,
    Mount,
    Resources,
    SecretReference,
    ServiceMode,
)

from harness.configs import dev_stack_config
from harness.lab import ident
from infra.components.swarm import endpoint
from infra.config import StackConfig
from infra.layout import (
    GPU_RESOURCE,
    MASTER_SERVICE,
    SSH_PRIVATE_KEY_FILE,
    SSH_PUBLIC_KEY_FILE,
    TRAIN_UID,
    WARMUP_SERVICE,
    WORKER_SERVICE,
)
from infra.providers.hostops import ssh_run
from infra.providers.roster import TaskRosterProvider
from infra.providers.secrets import SshKeyPairProvider
from infra.providers.swarm import SwarmInitProvider, SwarmNodeProvider
from infra.render.labels import node_labels, placement_constraints, training_env
from infra.render.launch import (
    RosterEntry,
    launch_argv,
    launch_script,
    render_hostfile,
    stop_script,
)
from lab import config as c
from tests.lab.conftest import Lab, bare_lab, outs

__all__ = ["bare_lab"]
"""The lab suite's fixture, found by pytest by name."""

pytestmark = [pytest.mark.acceptance, pytest.mark.lab, pytest.mark.image]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"{c.REGISTRY_ADDR}/deepspeed-swarm/train:lab-e2e"
RUN = "swarm-e2e"


def training_config() -> StackConfig:
    """The dev stack's config with a short run (it trains on 2 CPU cores)."""
    cfg = dev_stack_config()
    training = cfg.training.model_copy(update={"run_name": RUN, "steps": 60, "checkpoint_every": 5})
    return cfg.model_copy(update={"training": training})


@pytest.fixture(scope="module")
def image(bare_lab: Lab) -> str:
    """The training image, built by images/build and pushed to the lab registry."""
    env = dict(os.environ, DSS_IMAGE=IMAGE)
    subprocess.run([str(ROOT / "images" / "build")], env=env, check=True, capture_output=True)
    push = subprocess.run(["docker", "push", IMAGE], capture_output=True, text=True)
    assert push.returncode == 0, f"docker push {IMAGE}: {push.stderr}"
    return IMAGE


@pytest.fixture(scope="module")
def cluster(bare_lab: Lab, image: str) -> Iterator[dict[str, Any]]:
    """Swarm, key pair, secrets, overlay, warm-up, ds-master and ds-worker on the lab."""
    cfg = training_config()
    leader = cfg.leader
    init = SwarmInitProvider().create(
        {
            "host": leader.name,
            "endpoint": endpoint(leader),
            "advertise_addr": leader.address,
            "addr_pool": None,
            "swarm_id": None,
        }
    )
    for h in cfg.hosts:
        SwarmNodeProvider().create(
            {
                "host": h.name,
                "is_leader": h is leader,
                "endpoint": endpoint(h),
                "leader_endpoint": endpoint(leader),
                "leader_addr": leader.address,
                "advertise_addr": h.address,
                "swarm_id": init.id,
                "role": h.role,
                "availability": "active",
                "labels": node_labels(cfg, h),
                "node_id": None,
            }
        )
    keys = outs(SshKeyPairProvider().create({"comment": "e2e", "rotation": "1"}))
    client = docker.DockerClient(base_url=endpoint(leader)["url"], timeout=300)
    secrets = [
        client.secrets.create(name=f"e2e-{f.replace('_', '-')}", data=keys[k].encode())
        for f, k in (
            (SSH_PRIVATE_KEY_FILE, "private_key"),
            (SSH_PUBLIC_KEY_FILE, "public_key"),
        )
    ]
    net = client.networks.create(
        cfg.network.name,
        driver="overlay",
        attachable=True,
        options={"com.docker.network.driver.mtu": str(cfg.network.mtu)},
    )
    net_id = ident(net)
    t = cfg.training
    made = [
        client.services.create(  # type: ignore[no-untyped-call]  # unannotated in types-docker
            image,
            ["sleep", "infinity"],
            name=WARMUP_SERVICE,
            mode=ServiceMode("global"),
            networks=[net_id],
            endpoint_spec=EndpointSpec(mode="dnsrr"),
            healthcheck=Healthcheck(test=["NONE"]),
        )
    ]
    try:
        _wait_tasks(client, WARMUP_SERVICE, len(cfg.hosts))
        for name, role, replicas in (
            (MASTER_SERVICE, "master", 1),
            (WORKER_SERVICE, "worker", 1),
        ):
            made.append(
                client.services.create(  # type: ignore[no-untyped-call]  # unannotated in types-docker
                    image,
                    name=name,
                    mode=ServiceMode("replicated", replicas=replicas),
                    env=[f"{k}={v}" for k, v in training_env(cfg).items()],
                    networks=[net_id],
                    endpoint_spec=EndpointSpec(mode="dnsrr"),
                    resources=Resources(generic_resources={GPU_RESOURCE: t.gpus_per_node}),
                    constraints=placement_constraints(role),
                    maxreplicas=1,
                    mounts=[
                        Mount("/data", t.data_dir, type="bind"),
                        Mount("/dev/shm", None, type="tmpfs", tmpfs_size=256 << 20),
                    ],
                    secrets=[
                        SecretReference(
                            ident(s),
                            s.name,
                            filename=f,
                            uid=TRAIN_UID,
                            gid=TRAIN_UID,
                            mode=0o400,
                        )
                        for s, f in zip(
                            secrets,
                            (SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE),
                            strict=True,
                        )
                    ],
                    stop_grace_period=60 * 10**9,
                )
            )
        yield {"cfg": cfg, "client": client, "network_id": net_id, "init": init}
    finally:
        for s in reversed(made):
            s.remove()
        time.sleep(5)
        for s in secrets:
            _retry(s.remove)
        _retry(lambda: client.api.remove_network(net_id))
        SwarmInitProvider().delete(init.id, outs(init))
        for h in cfg.hosts:
            state = docker.DockerClient(base_url=endpoint(h)["url"]).info()["Swarm"]
            if state.get("LocalNodeState") == "active":
                docker.DockerClient(base_url=endpoint(h)["url"]).swarm.leave(force=True)


def _retry(fn: Any) -> None:
    for _ in range(30):
        try:
            fn()
            return
        except docker.errors.APIError:
            time.sleep(1)


def _wait_tasks(client: Any, service: str, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tasks = client.api.tasks(filters={"service": service, "desired-state": "running"})
        if sum(t["Status"]["State"] == "running" for t in tasks) == count:
            return
        time.sleep(2)
    raise AssertionError(f"{service}: {count} running tasks not reached in {timeout:.0f} s")


@pytest.fixture(scope="module")
def roster(bare_lab: Lab, cluster: dict[str, Any]) -> list[RosterEntry]:
    cfg = cluster["cfg"]
    roster = TaskRosterProvider().create(
        {
            "leader_endpoint": endpoint(cfg.leader),
            "host_endpoints": {h.name: endpoint(h) for h in cfg.hosts},
            "services": [MASTER_SERVICE, WORKER_SERVICE],
            "network_id": cluster["network_id"],
            "expected_tasks": len(cfg.hosts),
            "image_ref": IMAGE,
            "timeout_s": 600,
            "entries": None,
        }
    )
    entries: list[RosterEntry] = outs(roster)["entries"]
    return entries


def master_ssh(lab: Lab, cfg: StackConfig) -> dict[str, Any]:
    return {
        "user": "root",
        "address": cfg.master.address,
        "port": 22,
        "key_file": str(lab.paths.ssh_key),
        "known_hosts": str(lab.paths.known_hosts),
    }


def test_each_task_holds_its_nodes_gpus(roster: list[RosterEntry]) -> None:
    """ds-master on lab-h1 and ds-worker on lab-h2, each with both of its node's GPUs."""
    assert [(e["service"], e["node"]) for e in roster] == [
        ("ds-master", "lab-h1"),
        ("ds-worker", "lab-h2"),
    ]
    for e in roster:
        assert e["gpu_uuids"] == sorted(c.gpu_uuids(int(e["node"][-1]), 2)), e


def test_pdsh_launch_trains_and_sigterm_checkpoints(
    bare_lab: Lab, cluster: dict[str, Any], roster: list[RosterEntry]
) -> None:
    """The launch script starts deepspeed (pdsh over the tasks' sshd) across both
    hosts; rank 0 logs falling loss; the stop script's SIGTERM leaves a checkpoint."""
    cfg = cluster["cfg"]
    slots = cfg.training.ranks_per_node
    argv = launch_argv(cfg, roster[0]["address"], len(roster))
    script = launch_script(
        service=MASTER_SERVICE,
        argv=argv,
        run_name=RUN,
        hostfile=render_hostfile(roster, slots),
        ds_config=None,
    )
    shared = bare_lab.root / "shared"
    metrics = shared / "logs" / RUN / "metrics.jsonl"
    ssh = master_ssh(bare_lab, cfg)
    assert "launch: started" in ssh_run(ssh, script, timeout=400)
    steps: list[dict[str, Any]] = []
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and len(steps) < 12:
        time.sleep(5)
        if metrics.exists():
            seen = len(steps)
            steps = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
            # Progress, for `scripts/dev --no-engine` (pytest -s).
            for rec in steps[seen:]:
                loss, rate = rec["loss"], rec["samples_per_s"]
                print(f"step {rec['step']}: loss {loss:.4f}, {rate:.1f} samples/s")
    launcher_log = shared / "logs" / RUN / "launcher.log"
    tail = launcher_log.read_text()[-3000:] if launcher_log.exists() else "(no launcher log)"
    assert len(steps) >= 12, f"{len(steps)} steps logged in 900 s; launcher log:\n{tail}"
    first, last = steps[0]["loss"], steps[-1]["loss"]
    assert last < first, f"loss did not fall: {first} -> {last}"
    stop = stop_script(service=MASTER_SERVICE, grace_seconds=120, pattern=cfg.training.script)
    running = f"docker ps -q --filter label=com.docker.swarm.service.name={MASTER_SERVICE}"
    before = ssh_run(ssh, running).split()
    out = ssh_run(ssh, stop)
    assert "stop: training exited" in out, out
    time.sleep(3)
    # Only training stops: the task (entrypoint, sshd) lives on, so Swarm does not
    # restart it elsewhere with a new address.
    assert ssh_run(ssh, running).split() == before, "the stop ended the master task itself"
    ckpts = shared / "checkpoints" / RUN
    complete = [d for d in ckpts.iterdir() if (d / "MANIFEST.json").exists()]
    assert complete, f"no complete checkpoint in {ckpts}: {list(ckpts.iterdir())}"
    ranks = sorted(p.name for p in (shared / "logs" / RUN).glob("rank*.log"))
    assert ranks == ["rank0.log", "rank1.log"], ranks
