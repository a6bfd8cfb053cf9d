"""The running lab behaves like a real multi-host Docker Swarm with GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from typing import Any

import pytest

from harness.lab import lab_cli
from harness.waits import wait_for
from infra import layout
from lab import config as c
from tests.lab.conftest import Lab, overlay_9000, pinned_service

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]


def _nodes(lab: Lab) -> list[dict[str, Any]]:
    ids = lab.docker(1, "node", "ls", "-q").stdout.split()
    out = json.loads(lab.docker(1, "node", "inspect", *ids).stdout)
    assert isinstance(out, list)
    return out


def _service_tasks(lab: Lab, name: str) -> list[dict[str, Any]]:
    p = lab.docker(1, "service", "ps", name, "--no-trunc", "--format", "{{json .}}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def test_swarm_forms_with_all_nodes_ready(lab: Lab) -> None:
    """Every lab host is a Ready swarm node with its own hostname and address."""
    nodes = {n["Description"]["Hostname"]: n for n in _nodes(lab)}
    for i in range(1, lab.hosts + 1):
        name = c.host_name(i)
        assert name in nodes, f"{name} is not a swarm node (nodes: {sorted(nodes)})"
        st = nodes[name]["Status"]
        assert st["State"] == "ready", f"{name} is {st['State']}, not ready"
        assert st["Addr"] == c.host_addr(i), f"{name} advertises {st['Addr']}"


def test_gpu_generic_resources_declared_per_node(lab: Lab) -> None:
    """Each node declares its own deterministic NVIDIA-GPU UUIDs as generic resources."""
    for n in _nodes(lab):
        name = n["Description"]["Hostname"]
        i = int(name.removeprefix("lab-h"))
        res = n["Description"]["Resources"].get("GenericResources") or []
        got = sorted(
            r["NamedResourceSpec"]["Value"]
            for r in res
            if r.get("NamedResourceSpec", {}).get("Kind") == layout.GPU_RESOURCE
        )
        assert got == sorted(c.gpu_uuids(i, lab.gpus)), f"{name} declares GPUs {got}"


def test_gpu_reservation_over_capacity_stays_pending(lab: Lab) -> None:
    """A service reserving more GPUs than any node has stays Pending; one that fits runs."""
    too_many, fits = "gpu-too-many", "gpu-fits"
    for name, n in ((too_many, lab.gpus + 1), (fits, lab.gpus)):
        lab.docker(
            1,
            "service",
            "create",
            "-d",
            "--name",
            name,
            "--endpoint-mode",
            "dnsrr",
            "--generic-resource",
            f"{layout.GPU_RESOURCE}={n}",
            lab.image,
            "sleep",
            "3600",
        )
    try:
        wait_for(
            f"service {fits} (reserving {lab.gpus} GPUs) to run",
            lambda: any(t["CurrentState"].startswith("Running") for t in _service_tasks(lab, fits)),
            60,
            interval=0.5,
        )
        tasks = _service_tasks(lab, too_many)
        assert tasks, f"service {too_many} has no task"
        assert all(t["CurrentState"].startswith("Pending") for t in tasks), (
            f"service {too_many} is not pending: {tasks}"
        )
        task = json.loads(lab.docker(1, "inspect", _task_ids(lab, too_many)[0]).stdout)[0]
        msg = task["Status"].get("Err", "")
        assert "insufficient resources" in msg, f"service {too_many}: pending for {msg!r}"
        host, got = _assigned_gpus(lab, fits)
        assert host, f"service {fits}: no running task"
        mine = set(c.gpu_uuids(int(host.removeprefix("lab-h")), lab.gpus))
        assert len(got) == lab.gpus and set(got) <= mine, (
            f"service {fits} on {host}: container got GPUs {got}, host has {sorted(mine)}"
        )
    finally:
        lab.docker(1, "service", "rm", too_many, fits, check=False)


def _task_ids(lab: Lab, service: str) -> list[str]:
    return lab.docker(1, "service", "ps", service, "--no-trunc", "-q").stdout.split()


def _assigned_gpus(lab: Lab, service: str) -> tuple[str, list[str]]:
    """(host, GPU UUIDs) that swarm gave the service's running task, from the container env."""
    for tid in _task_ids(lab, service):
        t = json.loads(lab.docker(1, "inspect", tid).stdout)[0]
        if t["Status"]["State"] != "running":
            continue
        node = json.loads(lab.docker(1, "node", "inspect", t["NodeID"]).stdout)[0]
        host = node["Description"]["Hostname"]
        cid = t["Status"]["ContainerStatus"]["ContainerID"]
        env = json.loads(
            lab.docker(
                int(host.removeprefix("lab-h")), "inspect", "--format", "{{json .Config.Env}}", cid
            ).stdout
        )
        key = f"DOCKER_RESOURCE_{layout.GPU_RESOURCE}="
        for e in env:
            if e.startswith(key):
                return host, e.removeprefix(key).split(",")
        return host, []
    return "", []


def test_overlay_across_hosts_has_expected_mtu(lab: Lab) -> None:
    """A container on h1 pings one on h2 over an mtu-9000 overlay with DF and 8922 bytes."""
    net, svc = "ov9000", "mtu-target"
    overlay_9000(lab, net)
    try:
        pinned_service(lab, svc, net, 2)
        wait_for(
            f"service {svc} on lab-h2",
            lambda: any(t["CurrentState"].startswith("Running") for t in _service_tasks(lab, svc)),
            60,
            interval=0.5,
        )
        p = lab.docker(
            1,
            "run",
            "--rm",
            "--network",
            net,
            lab.image,
            "sh",
            "-c",
            f"cat /sys/class/net/eth0/mtu && /bin/ping -c 2 -W 5 -M do -s 8922 tasks.{svc}",
            check=False,
        )
        lines = p.stdout.splitlines()
        assert lines and lines[0] == "8950", f"container on lab-h1 sees MTU {lines[:1]}, not 8950"
        assert p.returncode == 0, (
            f"lab-h1 -> {svc} on lab-h2: DF ping of 8922 bytes failed:\n{p.stdout}{p.stderr}"
        )
    finally:
        lab.docker(1, "service", "rm", svc, check=False)
        wait_for(
            f"network {net} to be removable",
            lambda: lab.docker(1, "network", "rm", net, check=False).returncode == 0,
            30,
            interval=0.5,
        )


def test_shared_dir_visible_on_all_hosts(lab: Lab) -> None:
    """A file written to the shared dir from a container on h2 is read by containers on all."""
    shared = str(lab.paths.shared)
    token = uuid.uuid4().hex
    lab.docker(
        2,
        "run",
        "--rm",
        "-v",
        f"{shared}:{shared}",
        lab.image,
        "sh",
        "-c",
        f"echo {token} > {shared}/probe-{token}",
    )
    for i in range(1, lab.hosts + 1):
        p = lab.docker(
            i,
            "run",
            "--rm",
            "-v",
            f"{shared}:{shared}",
            lab.image,
            "cat",
            f"{shared}/probe-{token}",
        )
        assert p.stdout.strip() == token, f"{c.host_name(i)}: shared file reads {p.stdout!r}"


def test_ssh_key_login_lands_on_each_host(lab: Lab) -> None:
    """ssh as root with the lab key reaches each host (its hostname, its netns address)."""
    for i in range(1, lab.hosts + 1):
        p = subprocess.run(
            [
                "ssh",
                *c.ssh_opts(lab.paths),
                f"root@{c.host_addr(i)}",
                "hostname; ip -4 -o addr show dev eth0",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert p.returncode == 0, f"{c.host_name(i)}: ssh failed: {p.stderr.strip()}"
        name, addr = p.stdout.splitlines()[:2]
        assert name == c.host_name(i), f"ssh to {c.host_addr(i)} landed on {name}"
        assert f"{c.host_addr(i)}/" in addr, f"{c.host_name(i)}: eth0 is {addr}"


def test_ssh_without_lab_key_is_refused(lab: Lab) -> None:
    """Without the lab key (no password auth), root login on h1 is refused."""
    p = subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            f"UserKnownHostsFile={lab.paths.known_hosts}",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-i",
            "/dev/null",
            f"root@{c.host_addr(1)}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode != 0, "lab-h1 accepted ssh without the lab key"


def test_docker_over_ssh_reaches_the_right_host(lab: Lab) -> None:
    """DOCKER_HOST=ssh://root@<addr> talks to that host's own daemon."""
    path = f"{lab.paths.ssh_bin}:{os.environ.get('PATH', '')}"
    for i in range(1, lab.hosts + 1):
        env = dict(os.environ, PATH=path, DOCKER_HOST=f"ssh://root@{c.host_addr(i)}")
        p = subprocess.run(
            ["docker", "info", "--format", "{{.Name}} {{.Swarm.NodeAddr}}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert p.returncode == 0, f"{c.host_name(i)}: docker over ssh failed: {p.stderr}"
        assert p.stdout.split() == [c.host_name(i), c.host_addr(i)], (
            f"ssh://root@{c.host_addr(i)} reached {p.stdout.strip()!r}"
        )


def test_status_json_describes_the_lab(lab: Lab) -> None:
    """`python -m lab status --json` lists every host with endpoints, GPUs and the registry."""
    p = lab_cli("status", "--json", check=False, timeout=60)
    assert p.returncode == 0, f"lab status failed: {p.stderr}"
    st = json.loads(p.stdout)
    assert st["registry"] == c.REGISTRY_ADDR and st["registry_up"], "registry not reported up"
    assert st["bridge_mtu"] == lab.mtu, f"bridge MTU reported {st['bridge_mtu']}"
    assert len(st["hosts"]) == lab.hosts, f"status lists {len(st['hosts'])} hosts"
    for h in st["hosts"]:
        assert h["daemon"] and h["ssh"], f"{h['name']}: daemon/ssh not answering"
        assert h["declared_gpus"] == h["gpu_uuids"], f"{h['name']}: GPUs {h['declared_gpus']}"
        assert h["swarm_state"] == "active", f"{h['name']}: swarm {h['swarm_state']}"
