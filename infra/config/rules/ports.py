"""Rules about ports: inside the training tasks, and published on the master host.

Two places hold ports. Inside every training task (one network namespace): the
rendezvous port, the tasks' sshd and, with monitoring, one metrics port per local
rank. On the master host itself (host-mode publishing, no routing mesh): JupyterLab,
Prometheus, the host's own sshd and Swarm's ports. Swarm's ports are kept out of
the task ports too, as the master port always has been.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.config.models.cluster import Host
    from infra.config.models.stack import StackConfig

# Ports Swarm itself holds on every host: a master port here would collide.
SWARM_PORTS = {2377: "swarm management", 7946: "swarm gossip", 4789: "VXLAN data path"}


def master_port(cfg: StackConfig) -> list[str]:
    t = cfg.training
    taken = {**SWARM_PORTS, t.sshd_port: "training.sshd_port"}
    if t.master_port in taken:
        return [
            f"training.master_port: {t.master_port} collides with {taken[t.master_port]}; "
            f"allowed: any port except {sorted(taken)}"
        ]
    return []


def sshd_port(cfg: StackConfig) -> list[str]:
    # Its pair with the master port is master_port's; here the rest.
    port = cfg.training.sshd_port
    if port not in SWARM_PORTS:
        return []
    return [
        f"training.sshd_port: {port} collides with {SWARM_PORTS[port]}; allowed: any port "
        f"except {sorted(SWARM_PORTS)}"
    ]


def rank_metrics_ports(cfg: StackConfig) -> list[str]:
    mon, t = cfg.monitoring, cfg.training
    if not mon.enabled:
        return []
    ports = range(mon.rank_metrics_port, mon.rank_metrics_port + t.ranks_per_node)
    taken = {
        **SWARM_PORTS,
        t.master_port: "training.master_port",
        t.sshd_port: "training.sshd_port",
    }
    if ports.stop - 1 > 65535:
        return [
            f"monitoring.rank_metrics_port: {mon.rank_metrics_port} + {t.ranks_per_node} "
            f"ranks per node runs past 65535; allowed: at most {65536 - t.ranks_per_node}"
        ]
    return [
        f"monitoring.rank_metrics_port: local rank {p - ports.start} would serve on {p}, "
        f"which is {taken[p]}; allowed: a base port whose {t.ranks_per_node} ports "
        f"({ports.start}-{ports.stop - 1}) avoid {sorted(taken)}"
        for p in ports
        if p in taken
    ]


def gate_port(cfg: StackConfig) -> list[str]:
    gate, mon, t = cfg.preflight.gate, cfg.monitoring, cfg.training
    if not gate.enabled:
        return []
    taken = {
        **SWARM_PORTS,
        t.master_port: "training.master_port",
        t.sshd_port: "training.sshd_port",
    }
    if mon.enabled:
        for i in range(t.ranks_per_node):
            taken[mon.rank_metrics_port + i] = f"local rank {i}'s monitoring.rank_metrics_port"
    if gate.port not in taken:
        return []
    return [
        f"preflight.gate.port: {gate.port} is {taken[gate.port]} inside the training tasks; "
        f"allowed: any port except {sorted(taken)}"
    ]


def _ssh_port(cfg: StackConfig, host: Host) -> dict[int, str]:
    """`host`'s own sshd port, named by its index in `hosts`: what a port published
    there must avoid."""
    i = next(i for i, h in enumerate(cfg.hosts) if h.name == host.name)
    return {cfg.ssh_for(host).port: f"hosts[{i}].ssh_port ({host.name})"}


def prometheus_port(cfg: StackConfig) -> list[str]:
    mon = cfg.monitoring
    if not mon.enabled:
        return []
    # Prometheus runs on the cluster's master host, hosts[0], wherever a job that names
    # its hosts has its own master (rules/monitoring.py, prometheus_on_a_manager).
    taken = {**SWARM_PORTS, **_ssh_port(cfg, cfg.hosts[0])}
    if mon.prometheus_port not in taken:
        return []
    return [
        f"monitoring.prometheus_port: {mon.prometheus_port} is published on the master "
        f"host, where it is {taken[mon.prometheus_port]}; allowed: any port except "
        f"{sorted(taken)}"
    ]


def jupyter_port(cfg: StackConfig) -> list[str]:
    # Swarm would leave the task pending ("host-mode port already in use"), or
    # Docker fails it at start: only `pulumi up` would tell.
    if not cfg.jupyter.enabled:
        return []
    # On the stack's master host (infra/components/jupyter.py), named by its own index.
    taken = {**SWARM_PORTS, **_ssh_port(cfg, cfg.master)}
    if cfg.monitoring.enabled:
        taken[cfg.monitoring.prometheus_port] = "monitoring.prometheus_port"
    port = cfg.jupyter.port
    if port not in taken:
        return []
    return [
        f"jupyter.port: {port} is published on the master host, where it is {taken[port]}; "
        f"allowed: any port except {sorted(taken)}"
    ]


def host_data_plane_ports(cfg: StackConfig) -> list[str]:
    # On the host data plane the training tasks listen in each host's own network
    # namespace: their sshd, the rendezvous and the ranks' metrics ports share it with
    # the host's sshd and what the master host publishes. A clash fails at start (sshd
    # cannot bind, the task restarts in a loop), which only `pulumi up` would tell.
    if cfg.network.data_plane != "host":
        return []
    t, mon = cfg.training, cfg.monitoring
    task_ports = {t.sshd_port: "training.sshd_port", t.master_port: "training.master_port"}
    if mon.enabled:
        for local_rank in range(t.ranks_per_node):
            port = mon.rank_metrics_port + local_rank
            task_ports.setdefault(port, f"monitoring.rank_metrics_port (local rank {local_rank})")
    taken = {
        cfg.ssh_for(h).port: f"hosts[{i}].ssh_port ({h.name})"
        for i, h in reversed(list(enumerate(cfg.hosts)))
        if h.availability == "active"
    }
    if mon.enabled:
        taken[mon.prometheus_port] = "monitoring.prometheus_port (published on the master)"
    if cfg.jupyter.enabled:
        taken[cfg.jupyter.port] = "jupyter.port (published on the master)"
    return [
        f"{key}: {port} is also {taken[port]}, and with network.data_plane 'host' both "
        f"are in the host's own network; allowed: any port except {sorted(taken)}"
        for port, key in task_ports.items()
        if port in taken
    ]
