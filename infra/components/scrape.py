"""JobScrape: a job stack's ranks in its cluster's Prometheus (`monitoring.enabled` on
the cluster, which a job follows).

A cluster's Prometheus has no run of its own (infra/render/prometheus.py): it reads one
scrape config per job from the shared data dir. This component is that file, as a
`command.remote.Command` on the master host (where Prometheus runs): its create writes
the file through the job's master task and sends Prometheus a SIGHUP, its delete
removes it. The file is the job's: it shows in the job's preview, a change to it (a
new scrape interval in the cluster's file) rewrites it in place and restarts nothing,
and removing the job removes it. Discovery stays Swarm's DNS (`tasks.<job>-master`,
`tasks.<job>-worker`), so a task that moves to another host is found again without
the file changing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_command as command

from infra.components.remote import SshLink, connection
from infra.components.services import TrainingServices
from infra.config import Host, Monitoring, Network, Preflight, Training
from infra.render import prometheus


@dataclass(frozen=True)
class JobScrapeArgs:
    """The job (its name, training, hosts), monitoring's settings, how to reach the
    master host over SSH, and the services whose tasks are scraped."""

    job: str
    monitoring: Monitoring
    training: Training
    network: Network
    """`data_plane`: the ranks by Swarm DNS, or by their hosts' addresses."""
    master: Host
    workers: Sequence[Host]
    active_hosts: Sequence[Host]
    """On the host data plane, the hosts whose rank ports are scraped: the job's own."""
    preflight: Preflight
    """`ssh_private_key_file`: the key the command connects with (else the agent)."""
    services: TrainingServices
    ssh_links: Mapping[str, SshLink] = field(default_factory=dict)
    """The ssh:// hosts' connections (infra/components/remote.py `ssh_links`)."""
    prometheus_host: Host | None = None
    """Where the cluster's Prometheus runs (its first host) when that is not the job's
    master host (a job that names its hosts); None: the master host."""


class JobScrape(pulumi.ComponentResource):
    """One job's scrape config on its cluster's Prometheus."""

    text: str
    """The file, known while the program runs (the preview shows a change to it)."""
    path: str
    """Where it lives on the shared data dir, as the hosts see it."""

    def __init__(
        self, name: str, args: JobScrapeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:scrape:JobScrape", name, None, opts)
        self.text = prometheus.job_scrape_config(args, args.job)
        self.path = prometheus.job_scrape_path(args.job, args.training.data_dir)
        elsewhere = args.prometheus_host not in (None, args.master)
        written = command.remote.Command(
            f"{name}-config",
            connection=connection(args.preflight, args.master, args.ssh_links),
            # A new text is an update (the same create, run again): the file is
            # replaced whole and nothing else moves.
            create=prometheus.job_scrape_script(args.job, self.text, reload=not elsewhere),
            delete=prometheus.job_unscrape_script(args.job, args.training.data_dir),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.services]),
        )
        if elsewhere and args.prometheus_host is not None:
            self._reload(name, args, args.prometheus_host, written)
        self.register_outputs({"path": self.path})

    def _reload(
        self, name: str, args: JobScrapeArgs, host: Host, written: command.remote.Command
    ) -> None:
        """Prometheus on another host than the job's master: reload it there once the
        file is written (again for a new text); deleted first when the job goes, it
        removes the file on that host's data dir and reloads, so the removed job's
        targets go at once."""
        command.remote.Command(
            f"{name}-reload",
            connection=connection(args.preflight, host, args.ssh_links),
            create=prometheus.prometheus_reload_script(),
            delete=prometheus.job_unscrape_script(args.job, args.training.data_dir),
            triggers=[self.text],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[written]),
        )
