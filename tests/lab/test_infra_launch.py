"""infra.providers.roster against a lab swarm: the task roster and the launch/stop scripts.

GPU-reserving services are made here with the Docker API (a stand-in workload:
busybox), then the roster provider reads them and the rendered launch and stop
scripts run over SSH on the master's host, as the engine runs them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from docker.types import EndpointSpec, Mount, Resources, ServiceMode

from harness.lab import client as lab_client
from harness.lab import exec_text, ident
from infra.layout import GPU_RESOURCE
from infra.providers.hostops import ssh_run
from infra.providers.roster import TaskRosterProvider
from infra.render.launch import (
    RosterEntry,
    duplicate_gpus,
    launch_script,
    render_hostfile,
    stop_script,
)
from lab import config as c
from tests.lab.conftest import Lab, outs

pytestmark = pytest.mark.lab

SERVICES = ("t-master", "t-worker")


@pytest.fixture(scope="module")
def services(lab: Lab) -> Iterator[dict[str, Any]]:
    """A master (1 task) and workers (2 tasks), 1 fake GPU each, dnsrr on an overlay."""
    client = lab_client(1)
    net = client.networks.create(
        "t-net",
        driver="overlay",
        attachable=True,
        options={"com.docker.network.driver.mtu": "9000"},
    )
    net_id = ident(net)
    made = []
    try:
        # What TrainingServices does first (infra/components/services.py, warmup_spec): one
        # plain task per node on the new overlay, without which the GPU tasks
        # are rejected for good on Docker 20.10.
        made.append(
            client.services.create(  # type: ignore[no-untyped-call]  # unannotated in types-docker
                lab.image,
                ["tail", "-f", "/dev/null"],
                name="t-warmup",
                mode=ServiceMode("global"),
                networks=[net.id],
                endpoint_spec=EndpointSpec(mode="dnsrr"),
            )
        )
        _wait_running(client, "t-warmup", lab.hosts)
        for name, replicas in zip(SERVICES, (1, 2), strict=True):
            made.append(
                client.services.create(  # type: ignore[no-untyped-call]  # unannotated in types-docker
                    lab.image,
                    ["tail", "-f", "/dev/null"],
                    name=name,
                    mode=ServiceMode("replicated", replicas=replicas),
                    networks=[net.id],
                    endpoint_spec=EndpointSpec(mode="dnsrr"),
                    resources=Resources(generic_resources={GPU_RESOURCE: 1}),
                    maxreplicas=1,
                    mounts=[Mount("/data", str(lab.root / "shared"), type="bind")],
                )
            )
        yield {"network_id": net_id, "client": client}
    finally:
        for s in made:
            s.remove()
        client.api.remove_network(net_id) if _wait_detached(client, net_id) else None


def _wait_running(client: Any, service: str, count: int) -> None:
    import time

    for _ in range(120):
        tasks = client.api.tasks(filters={"service": service, "desired-state": "running"})
        if sum(t["Status"]["State"] == "running" for t in tasks) == count:
            return
        time.sleep(1)
    raise AssertionError(f"{service}: {count} tasks not running after 120 s")


def _wait_detached(client: Any, net_id: str) -> bool:
    import time

    for _ in range(60):
        if not client.api.inspect_network(net_id).get("Containers"):
            return True
        time.sleep(1)
    return True


def roster_props(lab: Lab, network_id: str) -> dict[str, Any]:
    endpoints = {
        c.host_name(i): {"url": f"unix://{lab.paths.host(i).socket}"}
        for i in range(1, lab.hosts + 1)
    }
    return {
        "leader_endpoint": endpoints["lab-h1"],
        "host_endpoints": endpoints,
        "services": list(SERVICES),
        "network_id": network_id,
        "expected_tasks": 3,
        "image_ref": lab.image,
        "timeout_s": 120,
        "entries": None,
    }


@pytest.fixture(scope="module")
def roster(lab: Lab, services: dict[str, Any]) -> list[RosterEntry]:
    entries: list[RosterEntry] = outs(
        TaskRosterProvider().create(roster_props(lab, services["network_id"]))
    )["entries"]
    return entries


def test_roster_lists_every_task_master_first(roster: list[RosterEntry]) -> None:
    """The roster has the 3 running tasks, master first, one per node, with overlay IPs."""
    assert [e["service"] for e in roster] == ["t-master", "t-worker", "t-worker"]
    assert len({e["node"] for e in roster}) == 3, roster
    assert all(e["address"] and e["container_id"] for e in roster), roster


def test_roster_reads_assigned_gpus(lab: Lab, roster: list[RosterEntry]) -> None:
    """Each task's GPU is one of its own node's fake GPUs, and no GPU is shared."""
    for e in roster:
        index = int(e["node"].removeprefix("lab-h"))
        assert len(e["gpu_uuids"]) == 1, e
        assert e["gpu_uuids"][0] in c.gpu_uuids(index, lab.gpus), e
    assert duplicate_gpus(roster) == {}


def test_roster_refresh_sees_the_same_tasks(
    lab: Lab, services: dict[str, Any], roster: list[RosterEntry]
) -> None:
    """Reading again (refresh) gives the same roster and no diff."""
    p = TaskRosterProvider()
    props = roster_props(lab, services["network_id"])
    read = p.read("roster", {**props, "entries": roster})
    assert outs(read)["entries"] == roster
    assert p.diff("roster", outs(read), props).changes is False


def master_ssh(lab: Lab, index: int) -> dict[str, Any]:
    """How the launch reaches lab host `index` over SSH (as HostFacts' ssh_target)."""
    return {
        "user": "root",
        "address": c.host_addr(index),
        "port": 22,
        "key_file": str(lab.paths.ssh_key),
        "known_hosts": str(lab.paths.known_hosts),
    }


def test_launch_and_stop_scripts(lab: Lab, roster: list[RosterEntry]) -> None:
    """The launch script hands the hostfile to the master task and starts the
    launcher as uid 1000, once; the stop script SIGTERMs it and waits for it (this
    stand-in image has no python to tell ranks from launchers: the stop's fallback,
    SIGTERM to every process naming the script)."""
    master = roster[0]
    index = int(master["node"].removeprefix("lab-h"))
    ssh = master_ssh(lab, index)
    hostfile = render_hostfile(roster, 1)
    script = launch_script(
        service="t-master",
        argv=["sleep", "600"],
        run_name="lt",
        hostfile=hostfile,
        ds_config='{"train_micro_batch_size_per_gpu": 1}',
        wait_seconds=30,
        workdir="/data",  # the stand-in image has no /opt/dss
    )
    assert "launch: started" in ssh_run(ssh, script)
    assert "already running; kept" in ssh_run(ssh, script)
    ctr = lab_client(index).containers.get(master["container_id"])
    assert exec_text(ctr, ["cat", "/data/.dss/lt/hostfile"]) == hostfile
    ps = exec_text(ctr, ["ps", "-o", "user,args"])
    assert any(line.split()[:2] == ["1000", "sleep"] for line in ps.splitlines()), ps
    out = ssh_run(ssh, stop_script(service="t-master", grace_seconds=30, pattern="sleep 600"))
    assert "stop: training exited" in out, out
    assert ctr.exec_run(["pgrep", "-f", "sleep 600"]).exit_code != 0


NCCL_SOCKET_LINE = "lab-h1:812:901 [0] NCCL INFO NET/Socket : Using [0]eth0:10.213.0.11<0>"
NCCL_IB_LINE = "lab-h1:812:901 [0] NCCL INFO Using network IB"


@pytest.mark.parametrize(
    ("line", "ok"), [(NCCL_SOCKET_LINE, False), (NCCL_IB_LINE, True)], ids=["socket", "ib"]
)
def test_launch_fails_loud_on_a_socket_fallback(
    lab: Lab, roster: list[RosterEntry], line: str, ok: bool
) -> None:
    """With RDMA declared, a launcher whose NCCL logs the socket transport (a faked NCCL
    line) fails the launch with that line, naming host and rank, and is stopped; one
    that logs IB passes and says so. Earlier lines of the log do not count."""
    master = roster[0]
    index = int(master["node"].removeprefix("lab-h"))
    ssh = master_ssh(lab, index)
    ctr = lab_client(index).containers.get(master["container_id"])
    # An earlier run's socket line in the same log must not fail this launch.
    # As the training user, who appends to it.
    earlier = f"mkdir -p /data/logs/tc && echo '{NCCL_SOCKET_LINE}' > /data/logs/tc/launcher.log"
    ctr.exec_run(["sh", "-c", earlier], user="1000")
    pattern = "sleep 602"
    script = launch_script(
        service="t-master",
        argv=["sh", "-c", f"sleep 2; echo '{line}'; exec {pattern}"],
        run_name="tc",
        hostfile=render_hostfile(roster, 1),
        ds_config=None,
        wait_seconds=30,
        workdir="/data",
        check_transport=pattern,
        transport_wait_s=60,
    )
    try:
        if ok:
            assert f"launch: NCCL uses IB: {NCCL_IB_LINE}" in ssh_run(ssh, script)
            assert ctr.exec_run(["pgrep", "-f", pattern]).exit_code == 0
        else:
            said = r"NCCL said: lab-h1:812:901 \[0\] NCCL INFO NET/Socket : Using"
            with pytest.raises(Exception, match=r"NCCL did not use it; training stopped\. " + said):
                ssh_run(ssh, script)
            time.sleep(1)
            assert ctr.exec_run(["pgrep", "-f", pattern]).exit_code != 0, "training still runs"
    finally:
        ctr.exec_run(["pkill", "-KILL", "-f", pattern])
        ctr.exec_run(["rm", "-rf", "/data/logs/tc"])
