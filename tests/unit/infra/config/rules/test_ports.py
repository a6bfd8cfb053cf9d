"""infra.config.rules.ports: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from tests.unit.infra.config.checks import monitored, problems

pytestmark = pytest.mark.unit


def test_master_port_collides_with_sshd(raw: dict[str, Any]) -> None:
    """A master port equal to the tasks' sshd port is refused."""
    raw["training"]["master_port"] = 2222
    assert problems(raw) == [
        "training.master_port: 2222 collides with training.sshd_port; allowed: any port "
        "except [2222, 2377, 4789, 7946]"
    ]


def test_master_port_collides_with_swarm(raw: dict[str, Any]) -> None:
    """A master port on a Swarm port is refused, naming what holds it."""
    raw["training"]["master_port"] = 2377
    assert problems(raw)[0].startswith("training.master_port: 2377 collides with swarm management")


def test_rank_metrics_ports_clear_of_the_master_port(raw: dict[str, Any]) -> None:
    """A rank metrics port range (8 ranks per node) reaching the master port is refused."""
    monitored(raw, rank_metrics_port=29495)
    assert problems(raw) == [
        "monitoring.rank_metrics_port: local rank 5 would serve on 29500, which is "
        "training.master_port; allowed: a base port whose 8 ports (29495-29502) avoid "
        "[2222, 2377, 4789, 7946, 29500]"
    ]


def test_rank_metrics_ports_are_not_checked_when_off(raw: dict[str, Any]) -> None:
    """With monitoring off no rank serves metrics: the port is not checked."""
    raw["monitoring"] = {"rank_metrics_port": 29500}
    assert not parse_stack_config(raw).monitoring.enabled


def test_prometheus_port_clear_of_swarm(raw: dict[str, Any]) -> None:
    """Prometheus published on a port Swarm holds on the master host is refused."""
    monitored(raw, prometheus_port=7946)
    assert problems(raw) == [
        "monitoring.prometheus_port: 7946 is published on the master host, where it is swarm "
        "gossip; allowed: any port except [22, 2377, 4789, 7946]"
    ]


def test_sshd_port_on_a_swarm_port(raw: dict[str, Any]) -> None:
    """The tasks' sshd on a port Swarm holds is refused."""
    raw["training"]["sshd_port"] = 7946
    assert problems(raw) == [
        "training.sshd_port: 7946 collides with swarm gossip; allowed: any port except "
        "[2377, 4789, 7946]"
    ]


def test_jupyter_port_on_the_master_ssh_port(raw: dict[str, Any]) -> None:
    """JupyterLab published on the master host's SSH port is refused."""
    raw["jupyter"] = {"enabled": True, "port": 22}
    assert problems(raw) == [
        "jupyter.port: 22 is published on the master host, where it is hosts[0].ssh_port "
        "(gpu-01); allowed: any port except [22, 2377, 4789, 7946]"
    ]


def test_jupyter_port_on_the_prometheus_port(raw: dict[str, Any]) -> None:
    """JupyterLab and Prometheus published on one port of the master host is refused."""
    raw["jupyter"] = {"enabled": True, "port": 9090}
    monitored(raw)
    assert problems(raw) == [
        "jupyter.port: 9090 is published on the master host, where it is "
        "monitoring.prometheus_port; allowed: any port except [22, 2377, 4789, 7946, 9090]"
    ]


def test_jupyter_port_unchecked_when_off(raw: dict[str, Any]) -> None:
    """With JupyterLab off nothing is published: its port is not checked."""
    raw["jupyter"] = {"port": 22}
    assert not parse_stack_config(raw).jupyter.enabled


def test_host_data_plane_sshd_port_clear_of_the_hosts_sshd(raw: dict[str, Any]) -> None:
    """On the host data plane the tasks' sshd on a host's own SSH port is refused."""
    raw["network"]["data_plane"] = "host"
    raw["training"]["sshd_port"] = 22
    assert problems(raw) == [
        "training.sshd_port: 22 is also hosts[0].ssh_port (gpu-01), and with network.data_plane "
        "'host' both are in the host's own network; allowed: any port except [22]"
    ]


def test_host_data_plane_rank_ports_clear_of_prometheus(raw: dict[str, Any]) -> None:
    """On the host data plane a rank's metrics port on Prometheus' published port is refused."""
    raw["network"]["data_plane"] = "host"
    monitored(raw)["monitoring"].update(rank_metrics_port=9089, prometheus_port=9090)
    assert problems(raw) == [
        "monitoring.rank_metrics_port (local rank 1): 9090 is also monitoring.prometheus_port "
        "(published on the master), and with network.data_plane 'host' both are in the host's "
        "own network; allowed: any port except [22, 9090]"
    ]


def test_overlay_sshd_port_may_equal_the_hosts_sshd(raw: dict[str, Any]) -> None:
    """On the overlay the tasks have their own network namespace: port 22 is theirs."""
    raw["training"]["sshd_port"] = 22
    assert parse_stack_config(raw).training.sshd_port == 22


def _job_on(raw: dict[str, Any], *hosts: str) -> dict[str, Any]:
    """raw as a job that names its hosts (master first)."""
    raw.update(kind="job", cluster="c1")
    raw["training"].update(run_name="exp-a", hosts=list(hosts))
    return raw


def test_prometheus_port_judged_on_the_clusters_master_host(raw: dict[str, Any]) -> None:
    """Prometheus runs on hosts[0] whatever a job's own master is: its port is judged
    against that host's SSH port and named by it, not the job master's."""
    monitored(_job_on(raw, "gpu-03", "gpu-02"))
    raw["hosts"][2]["ssh"] = {"port": 9090}
    parse_stack_config(raw)  # the job's master's sshd is not where Prometheus publishes
    raw["hosts"][0]["ssh"] = {"port": 9090}
    assert problems(raw) == [
        "monitoring.prometheus_port: 9090 is published on the master host, where it is "
        "hosts[0].ssh_port (gpu-01); allowed: any port except [2377, 4789, 7946, 9090]"
    ]


def test_jupyter_port_names_the_master_hosts_own_key(raw: dict[str, Any]) -> None:
    """JupyterLab on a master that is not hosts[0] (a job that names its hosts): the SSH
    port it collides with is named by that host's index."""
    _job_on(raw, "gpu-03", "gpu-02")
    raw["jupyter"] = {"enabled": True, "port": 2200}
    raw["hosts"][2]["ssh"] = {"port": 2200}
    assert problems(raw) == [
        "jupyter.port: 2200 is published on the master host, where it is hosts[2].ssh_port "
        "(gpu-03); allowed: any port except [2200, 2377, 4789, 7946]"
    ]
