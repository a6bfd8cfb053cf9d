"""The whole stack configuration: the top-level keys, their cross-key rules, derived views."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, field_validator, model_validator

from infra.config.models.base import MODEL_CONFIG
from infra.config.models.cluster import Host, Network
from infra.config.models.job import Image, Training
from infra.config.models.services import Jupyter, Monitoring, Preflight
from infra.config.models.ssh import Ssh
from infra.config.rules import findings
from infra.config.ssh import host_ssh
from infra.sshspec import SshSpec

# Top-level config keys (all in the `deepspeed-swarm:` namespace).
CONFIG_KEYS = (
    "hosts",
    "network",
    "image",
    "training",
    "secrets",
    "preflight",
    "jupyter",
    "monitoring",
    "kind",
    "cluster",
    "manager",
    "ssh",
)

StackKind = Literal["single", "cluster", "job"]


_SECRET_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")


class StackConfig(BaseModel):
    """The whole validated stack configuration."""

    model_config = MODEL_CONFIG

    hosts: list[Host]
    """The servers; the first is the master (rank 0), the first manager the leader."""
    network: Network = Network()
    """The overlay network."""
    image: Image = Image()
    """The training image."""
    training: Training = Training()
    """The training job."""
    secret_names: list[str] = []
    """Names of the values under `secrets` (the values never enter this model)."""
    preflight: Preflight = Preflight()
    """Host checks before services are created."""
    ssh: Ssh = Ssh()
    """How the operator's machine reaches the hosts over SSH (`hosts[].ssh` per host)."""
    jupyter: Jupyter = Jupyter()
    """JupyterLab on the master (optional, off by default)."""
    monitoring: Monitoring = Monitoring()
    """Prometheus, node exporters and per-rank metrics."""
    kind: StackKind = "single"
    """`single`: the cluster and its one training run in one stack (every stack before
    jobs). `cluster`: the cluster only (hosts, swarm, network, secrets, image); its
    jobs are stacks of their own. `job`: one training job on the cluster stack named
    by `cluster`; its stack file holds `kind`, `cluster`, `training` and `manager`
    only, the rest is read from the cluster's stack file. Default `single`."""
    cluster: str | None = None
    """A job stack's cluster stack (its name; `kind: job` only). Default none."""
    manager: str | None = None
    """A job stack's way into its cluster's swarm: the name of one of the cluster's
    managers, through which its services, its queue entry and its GPU check are made and
    read (`kind: job` only). Default: the cluster's first manager. `scripts/job` writes
    it when it submits or starts a job while the first manager does not answer
    (docs/jobs.md, "When a manager is lost"). A running job keeps it while it answers;
    once it does not, the job's next submit, resize, stop or release moves the job's
    state to the manager that command reached and writes that one here."""

    @field_validator("hosts")
    @classmethod
    def _at_least_one_host(cls, v: list[Host]) -> list[Host]:
        if not v:
            raise ValueError("no hosts; allowed: one or more hosts")
        return v

    @field_validator("secret_names")
    @classmethod
    def _secret_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _SECRET_NAME.match(name):
                raise ValueError(
                    f"secret name {name!r} is not allowed; allowed: [a-z0-9_], starting "
                    "with a letter or digit (it becomes a file under /run/secrets)"
                )
        return v

    @model_validator(mode="after")
    def _cluster_rules(self) -> StackConfig:
        # Every cross-key rule (infra/config/rules), in registry order.
        problems = findings(self, "error")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def job_name(self) -> str | None:
        """A job stack's name (its run name, its services' prefix); None otherwise."""
        return self.training.run_name if self.kind == "job" else None

    @property
    def cluster_digest(self) -> str:
        """What a job reads of its cluster's stack file, as a digest: the hosts, the
        network, the preflight checks, the secrets' names and monitoring when on. A cluster
        stack exports it as deployed (`clusterDigest`); a job computes it from the
        cluster's file as the repository has it, and refuses to run while the two differ
        (ClusterRef)."""
        data: dict[str, object] = {
            # Not how this machine reaches the hosts over SSH (`hosts[].ssh`, like the
            # stack's `ssh` block): nothing the cluster deployed.
            "hosts": [h.model_dump(mode="json", exclude={"ssh"}) for h in self.hosts],
            "network": self.network.model_dump(mode="json"),
            # Not the key file's path: where this machine keeps the launch's key, not
            # anything the cluster deployed.
            "preflight": self.preflight.model_dump(mode="json", exclude={"ssh_private_key_file"}),
            "secret_names": sorted(self.secret_names),
        }
        if self.monitoring.enabled:
            # Only when on: the digest of a cluster without monitoring is what it was
            # before jobs followed the cluster's monitoring.
            data["monitoring"] = self.monitoring.model_dump(mode="json")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def ssh_for(self, host: Host) -> SshSpec:
        """How this machine reaches `host` over SSH (infra/config/ssh.py: which key wins)."""
        i = next(i for i, h in enumerate(self.hosts) if h is host or h.name == host.name)
        return host_ssh(self.ssh, self.preflight, self.hosts[i], i)

    def warnings(self) -> list[str]:
        """What is valid but suspicious: `load()` shows these in the preview."""
        return findings(self, "warning")

    @property
    def world_size(self) -> int:
        """Ranks of the whole job: training hosts (spares excluded) x ranks per node."""
        return len(self.training_hosts) * self.training.ranks_per_node

    # -- derived views the components use -------------------------------------------
    @property
    def managers(self) -> list[Host]:
        return [h for h in self.hosts if h.role == "manager"]

    @property
    def leader(self) -> Host:
        """The manager that initialises the swarm and owns swarm-scoped objects; a job's:
        the manager it names (`manager`), else its cluster's first."""
        named = [h for h in self.managers if h.name == self.manager]
        return named[0] if named else self.managers[0]

    @property
    def master(self) -> Host:
        """The host that runs `ds-master` (rank 0): the first host in the list; a job's
        that names its hosts (`training.hosts`), the first of them."""
        named = self.training.hosts
        return self.training_hosts[0] if named and self.training_hosts else self.hosts[0]

    @property
    def active_hosts(self) -> list[Host]:
        """The hosts Swarm may place tasks on (every host but drained ones)."""
        return [h for h in self.hosts if h.availability == "active"]

    @property
    def queued(self) -> bool:
        """A job stack in its queued form: its entry in the cluster's queue, no GPU."""
        return self.kind == "job" and self.training.queued is not None

    @property
    def released(self) -> bool:
        """A job stack in its released form: its run ended, its verdict kept, no GPU."""
        return self.kind == "job" and self.training.released is not None

    @property
    def eligible_hosts(self) -> list[Host]:
        """The hosts that may carry a training task when all are up: active, not spares."""
        return [h for h in self.active_hosts if not h.spare]

    @property
    def training_hosts(self) -> list[Host]:
        """The hosts that carry a training task when all are up: a job's named hosts
        (`training.hosts`, master first), else the eligible hosts, the first
        `training.nodes` of them when set."""
        named = self.training.hosts
        if named:
            # A name that is no host is left out here: the rules refuse it by name.
            by_name = {h.name: h for h in self.hosts}
            return [by_name[n] for n in named if n in by_name]
        return self.eligible_hosts[: self.training.nodes]

    @property
    def unused_hosts(self) -> list[Host]:
        """Eligible hosts the run leaves out (`training.nodes`, `training.hosts`): no task
        of it goes there."""
        used = {h.name for h in self.training_hosts}
        return [h for h in self.eligible_hosts if h.name not in used]

    @property
    def run_hosts(self) -> list[Host]:
        """The active hosts a task of the run may be on: its training hosts and the
        spares (not the hosts `training.nodes` leaves out)."""
        return [h for h in self.active_hosts if h.spare or h in self.training_hosts]

    @property
    def spares(self) -> list[Host]:
        return [h for h in self.hosts if h.spare]

    @property
    def workers(self) -> list[Host]:
        """The training hosts besides the master: one `ds-worker` task each."""
        return self.training_hosts[1:]
