"""Monitoring: Prometheus on the master host and a node exporter on every host, as
Swarm services on the training overlay (only when `monitoring.enabled`).

- The image (`monitoring/`) holds Debian's prometheus and prometheus-node-exporter;
  it is built and distributed like the training image (content tag, pushed digest).
- Prometheus' configuration and alert rules are rendered by infra/render/prometheus.py
  and infra/render/alerts.py, and delivered as Swarm configs rather than baked into the
  image: a new threshold or scrape interval is a new config object and a Prometheus
  restart, not an image build and push; `docker config inspect` shows exactly what
  runs, and Swarm mounts it read-only. Configs are immutable, so each is named by its content and
  replaced create-before-delete (Docker refuses to delete one a service uses).
- `ds-prometheus`: one task pinned to the master host, published there only
  (host-mode port: no routing mesh, which the lab's kernel lacks anyway), data on
  a named volume (created by Swarm on the master, kept across `destroy`) or a
  host path. It finds the ranks and the exporters through Swarm's DNS
  (`tasks.<service>`).
- `ds-node-exporter`: a global service, the host's /proc, /sys and / read-only.
- On a cluster stack Prometheus has no run of its own: each job stack adds the scrape
  config of its ranks as a file on the shared data dir, which Prometheus reads
  (mounted read-only) at start and on the SIGHUP the job sends
  (infra/components/scrape.py).

None of these resources is part of a training task: a change to them never restarts
training (delivery/preview.py reports it so). Turning monitoring on or off does, once:
the training tasks get or lose the ranks' metrics port (infra/render/labels.py training_env).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker

from infra.components.image import distribute, image_name
from infra.components.network import OverlayNetwork
from infra.components.swarm import SwarmCluster
from infra.config import Host, Image, Network, Training
from infra.config import Monitoring as MonitoringConfig
from infra.layout import DATA_MOUNT
from infra.render import alerts, prometheus, specs
from infra.render.digest import content_hash, tree_hash

ROLE_LABEL = docker.ServiceLabelArgs(label="dss.role", value="monitoring")


@dataclass(frozen=True)
class MonitoringArgs:
    """Monitoring's settings and what Prometheus scrapes (the training job, its
    workers), the master it runs on, the image registry and builder it shares with
    the training image, and the overlay and swarm it runs on."""

    monitoring: MonitoringConfig
    training: Training
    workers: Sequence[Host]
    master: Host
    network: Network
    """`data_plane`: how Prometheus finds the ranks (Swarm DNS, or the hosts' addresses)."""
    active_hosts: Sequence[Host]
    """On the host data plane, the hosts whose rank ports are scraped."""
    image: Image
    project_dir: Path
    overlay: OverlayNetwork
    swarm: SwarmCluster
    jobs: bool = False
    """A cluster stack's Prometheus: no run of its own; it reads its jobs' scrape configs
    from the shared data dir (`training.data_dir`, mounted read-only), which each job
    stack writes (infra/components/scrape.py). Default false: a single stack's."""


def image_tag(project_dir: Path, mon: MonitoringConfig) -> str:
    """Content tag of the monitoring image (its Dockerfile, package list, base script)."""
    return tree_hash(project_dir / mon.context)


def storage_mount(mon: MonitoringConfig) -> docker.ServiceTaskSpecContainerSpecMountArgs:
    """Prometheus' data: a named volume, or a bind of an absolute host path."""
    source = mon.storage
    kind = "bind" if source.startswith("/") else "volume"
    return docker.ServiceTaskSpecContainerSpecMountArgs(
        type=kind, source=source, target=prometheus.DATA_DIR, read_only=False
    )


def host_mounts() -> list[docker.ServiceTaskSpecContainerSpecMountArgs]:
    """The host's /proc, /sys and / for the node exporter, read-only."""
    return [
        specs.bind_mount(source, f"{prometheus.HOST_ROOT}/{target}", read_only=True)
        for source, target in (("/proc", "proc"), ("/sys", "sys"), ("/", "root"))
    ]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _restart() -> docker.ServiceTaskSpecRestartPolicyArgs:
    """Both services: restarted whenever they stop, after 10 s, without end."""
    return specs.restart_policy("any", "10s", max_attempts=0, window="0s")


class Monitoring(pulumi.ComponentResource):
    """Prometheus and the node exporters of one stack."""

    prometheus: docker.Service
    node_exporter: docker.Service
    image_ref: pulumi.Output[str]
    address: str
    """`http://<master host>:<prometheus_port>`: where an operator or Grafana reaches it."""

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:monitoring:Monitoring", name, None, opts)
        self.image_ref = self._image(name, args)
        on_swarm = pulumi.ResourceOptions(
            parent=self,
            provider=args.swarm.manager_provider,
            depends_on=[args.overlay, *args.swarm.members],
        )
        configs = [
            self._swarm_config(
                name,
                "config",
                prometheus.prometheus_config(args, jobs=args.jobs),
                prometheus.CONFIG_FILE,
                on_swarm,
            ),
            self._swarm_config(
                name, "rules", alerts.alert_rules(args), prometheus.RULES_FILE, on_swarm
            ),
        ]
        self.prometheus = self._prometheus(name, args, configs, on_swarm)
        self.node_exporter = self._node_exporter(name, args, on_swarm)
        self.address = f"http://{args.master.address}:{args.monitoring.prometheus_port}"
        self.register_outputs({"address": self.address, "image_ref": self.image_ref})

    def _image(self, name: str, args: MonitoringArgs) -> pulumi.Output[str]:
        """The monitoring image, built and distributed as the training image is (content
        tag, pushed digest): its reference."""
        mon = args.monitoring
        build = docker.DockerBuildArgs(
            context=mon.context,
            dockerfile=f"{mon.context}/Dockerfile",
            args={"BASE_IMAGE": mon.base_image},
            builder_version=docker.BuilderVersion(args.image.builder),
            platform=specs.BUILD_PLATFORM,
        )
        return distribute(
            self,
            f"{name}-image",
            args.image,
            image_name(args.image, image_tag(args.project_dir, mon), mon.repository),
            build,
            args.swarm.providers,
        )

    def _swarm_config(
        self, name: str, role: str, text: str, file_name: str, on_swarm: pulumi.ResourceOptions
    ) -> docker.ServiceTaskSpecContainerSpecConfigArgs:
        """`text` as a Swarm config (`<name>-<role>`), and its mount at `file_name` in
        Prometheus' task, readable by nobody."""
        config = docker.ServiceConfig(
            f"{name}-{role}",
            # Named by content: a change is a new config (configs are immutable).
            name=f"{prometheus.PROMETHEUS_SERVICE}-{role}-{content_hash(text)}",
            data=_b64(text),
            labels=[docker.ServiceConfigLabelArgs(label="dss.file", value=file_name)],
            opts=pulumi.ResourceOptions.merge(
                on_swarm,
                # The new config exists before the service moves to it and the
                # old one goes after (the name changes with the content).
                pulumi.ResourceOptions(delete_before_replace=False),
            ),
        )
        return docker.ServiceTaskSpecContainerSpecConfigArgs(
            config_id=config.id,
            config_name=config.name,
            file_name=file_name,
            file_uid=prometheus.MONITORING_UID,
            file_gid=prometheus.MONITORING_UID,
            file_mode=0o444,
        )

    def _prometheus(
        self,
        name: str,
        args: MonitoringArgs,
        configs: list[docker.ServiceTaskSpecContainerSpecConfigArgs],
        on_swarm: pulumi.ResourceOptions,
    ) -> docker.Service:
        """`ds-prometheus`: one task on the master host, its configs mounted, its data
        on the storage monitoring names (a cluster's: the data dir too, read-only)."""
        mon = args.monitoring
        mounts = [storage_mount(mon)]
        if args.jobs:
            mounts.append(specs.bind_mount(args.training.data_dir, DATA_MOUNT, read_only=True))
        return docker.Service(
            f"{name}-prometheus",
            name=prometheus.PROMETHEUS_SERVICE,
            mode=specs.replicated(1),
            task_spec=docker.ServiceTaskSpecArgs(
                container_spec=docker.ServiceTaskSpecContainerSpecArgs(
                    image=self.image_ref,
                    commands=prometheus.prometheus_args(args),
                    user=prometheus.MONITORING_UID,
                    configs=configs,
                    mounts=mounts,
                    # The TSDB writes its head block on SIGTERM.
                    stop_signal="SIGTERM",
                    stop_grace_period=specs.docker_duration("30s"),
                ),
                networks_advanceds=specs.overlay(args.overlay.network_id),
                placement=specs.placement([f"node.hostname=={args.master.name}"], max_replicas=1),
                restart_policy=_restart(),
            ),
            # Published on the master host only: host mode binds the port where the
            # task runs. dnsrr: no VIP (the lab has no IPVS; nothing needs one).
            endpoint_spec=specs.dnsrr(
                [specs.host_port(prometheus.PROMETHEUS_PORT, mon.prometheus_port)]
            ),
            converge_config=specs.converge("5m"),
            labels=[ROLE_LABEL],
            opts=on_swarm,
        )

    def _node_exporter(
        self, name: str, args: MonitoringArgs, on_swarm: pulumi.ResourceOptions
    ) -> docker.Service:
        """`ds-node-exporter`: global, one per node, also on hosts joined later (the
        docker provider refuses converge_config with global mode)."""
        return docker.Service(
            f"{name}-node-exporter",
            name=prometheus.NODE_EXPORTER_SERVICE,
            mode=docker.ServiceModeArgs(global_=True),
            task_spec=docker.ServiceTaskSpecArgs(
                container_spec=docker.ServiceTaskSpecContainerSpecArgs(
                    image=self.image_ref,
                    commands=prometheus.node_exporter_args(args),
                    user=prometheus.MONITORING_UID,
                    mounts=host_mounts(),
                    # node_uname_info then names the Swarm node, not a container id.
                    hostname="{{.Node.Hostname}}",
                ),
                networks_advanceds=specs.overlay(args.overlay.network_id),
                placement=specs.placement(),
                restart_policy=_restart(),
            ),
            endpoint_spec=specs.dnsrr(),
            labels=[ROLE_LABEL],
            opts=on_swarm,
        )
