"""deepspeed-swarm: a DeepSpeed training cluster on Docker Swarm.

Table of contents: load the validated stack config, build the components in
dependency order (each from its config sections and the components before it),
export what a reviewer and an operator need.

Three kinds of stack (`deepspeed-swarm:kind`, docs/jobs.md): `single`, the cluster
and its one run; `cluster`, the cluster only; `job`, one run on a cluster stack,
which it reads through a stack reference and never changes.
"""

from pathlib import Path

import pulumi

from infra import config
from infra.components.clusterref import ClusterRef, ClusterRefArgs, ref_name
from infra.components.hostfacts import HostFacts, HostFactsArgs
from infra.components.idleservices import ClusterServices, ClusterServicesArgs
from infra.components.image import TrainingImage, TrainingImageArgs
from infra.components.jupyter import JupyterLab, JupyterLabArgs
from infra.components.launch import TrainingLaunch, TrainingLaunchArgs
from infra.components.monitoring import Monitoring, MonitoringArgs
from infra.components.network import OverlayNetwork, OverlayNetworkArgs
from infra.components.queue import QueuedJob, QueuedJobArgs
from infra.components.remote import ssh_links
from infra.components.scrape import JobScrape, JobScrapeArgs
from infra.components.secrets import ClusterSecrets, ClusterSecretsArgs
from infra.components.services import (
    TRAINING_SERVICES_TYPE,
    TrainingServices,
    TrainingServicesArgs,
)
from infra.components.swarm import SwarmCluster, SwarmClusterArgs, ssh_specs

PROJECT_DIR = Path(__file__).parent
stack = pulumi.get_stack()

# 1. Config: fails here, before any resource is registered, on a bad stack file.
cfg, secret_values = config.load(PROJECT_DIR)

# 2. Hosts: preflight facts (GPUs, NIC MTU, driver), then the swarm on top of them.
# 3. What the tasks need: image, overlay network, secrets.
# A job stack has none of its own: its cluster stack's, through a stack reference.
cluster = None
facts = None
swarm: SwarmCluster | ClusterRef
image: TrainingImage | ClusterRef
network: OverlayNetwork | ClusterRef
secrets: ClusterSecrets | ClusterRef
if cfg.kind == "job":
    assert cfg.cluster is not None  # the config's rules: a job names its cluster
    cluster = ClusterRef(
        ref_name(stack),
        ClusterRefArgs(
            cfg.cluster,
            cfg.hosts,
            cfg.leader,
            cfg.secret_names,
            cfg.cluster_digest,
            ssh=ssh_specs(cfg.hosts, cfg.ssh_for),
        ),
    )
    swarm = image = network = secrets = cluster
else:
    facts = HostFacts(
        f"{stack}-facts", HostFactsArgs(cfg.hosts, cfg.network, cfg.preflight, cfg.ssh)
    )
    swarm = SwarmCluster(
        f"{stack}-swarm",
        SwarmClusterArgs(
            cfg.hosts,
            cfg.leader,
            cfg.master,
            facts,
            master_moves=cfg.kind == "single" and cfg.training.recovery.follow_master,
            ssh=ssh_specs(cfg.hosts, cfg.ssh_for),
        ),
    )
    image = TrainingImage(f"{stack}-image", TrainingImageArgs(cfg.image, PROJECT_DIR, swarm))
    network = OverlayNetwork(f"{stack}-net", OverlayNetworkArgs(cfg.network, swarm))
    secrets = ClusterSecrets(f"{stack}-secrets", ClusterSecretsArgs(secret_values, swarm))

# 4. The GPU-reserving services, then the launch of the training job; a cluster stack
# has only the idle tasks every job's tasks come after; a queued job (it did not fit
# when submitted: docs/jobs.md) only its entry in the cluster's queue, and no GPU; a
# released job (its run ended) nothing: only its verdict, exported below.
launch = None
services = None
queued = None
# pulumi-command's connections to the ssh:// hosts, with their pinned host keys: fails
# here, naming the hosts, when the known_hosts file has none for one (a cluster stack
# runs no remote command).
runs = cfg.kind != "cluster" and not cfg.queued and not cfg.released
links = ssh_links(cfg.hosts, cfg.ssh_for) if runs else {}
if cfg.kind == "cluster":
    assert isinstance(image, TrainingImage) and isinstance(network, OverlayNetwork)
    assert isinstance(swarm, SwarmCluster) and facts is not None
    # Named and aliased as a single stack's TrainingServices: a single stack that
    # becomes a cluster (docs/jobs.md, "Migrating a single stack") keeps its warm-up
    # and standby services as they are.
    ClusterServices(
        f"{stack}-train",
        ClusterServicesArgs(cfg.active_hosts, cfg.spares, image, network, swarm, facts),
        pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=TRAINING_SERVICES_TYPE)]),
    )
elif cfg.queued:
    assert isinstance(cluster, ClusterRef)
    queued = QueuedJob(f"{stack}-queue", QueuedJobArgs(cfg, cluster))
elif runs:
    services = TrainingServices(
        f"{stack}-train",
        TrainingServicesArgs(
            training=cfg.training,
            monitoring=cfg.monitoring,
            network=cfg.network,
            hosts=cfg.hosts,
            active_hosts=cfg.active_hosts,
            workers=cfg.workers,
            unused=cfg.unused_hosts,
            spares=cfg.spares,
            secret_names=cfg.secret_names,
            image=image,
            overlay=network,
            secrets=secrets,
            swarm=swarm,
            facts=facts,
            job=cfg.job_name,
            master=cfg.master if cfg.training.hosts else None,
        ),
    )
    launch = TrainingLaunch(
        f"{stack}-launch",
        TrainingLaunchArgs(
            training=cfg.training,
            master=cfg.master,
            training_hosts=cfg.training_hosts,
            hosts=cfg.hosts,
            network=cfg.network,
            preflight=cfg.preflight,
            services=services,
            swarm=swarm,
            image=image,
            ssh_links=links,
            restart_metrics=cfg.monitoring.enabled,
            universal_checkpoints=config.resumes_universal(cfg.training),
        ),
    )

# 5. Optional: JupyterLab on the master, beside the job.
if cfg.jupyter.enabled and isinstance(image, TrainingImage) and isinstance(swarm, SwarmCluster):
    jupyter = JupyterLab(
        f"{stack}-jupyter", JupyterLabArgs(cfg.jupyter, cfg.training, cfg.master, image, swarm)
    )
    pulumi.export("jupyterUrl", jupyter.url)
    pulumi.export("jupyterToken", jupyter.token)

# 6. Optional monitoring (Prometheus, node exporters): nothing of it exists when off.
# A cluster's Prometheus finds its jobs by the file each job stack adds.
monitoring = None
if cfg.monitoring.enabled and cfg.job_name is not None and services is not None:
    JobScrape(
        f"{stack}-scrape",
        JobScrapeArgs(
            job=cfg.job_name,
            monitoring=cfg.monitoring,
            training=cfg.training,
            network=cfg.network,
            master=cfg.master,
            workers=cfg.workers,
            active_hosts=cfg.run_hosts,
            preflight=cfg.preflight,
            services=services,
            ssh_links=links,
            prometheus_host=cfg.hosts[0],
        ),
    )
if cfg.monitoring.enabled and isinstance(network, OverlayNetwork):
    assert isinstance(swarm, SwarmCluster)
    monitoring = Monitoring(
        f"{stack}-monitoring",
        MonitoringArgs(
            monitoring=cfg.monitoring,
            training=cfg.training,
            workers=cfg.workers,
            master=cfg.master,
            network=cfg.network,
            active_hosts=cfg.run_hosts,
            image=cfg.image,
            project_dir=PROJECT_DIR,
            overlay=network,
            swarm=swarm,
            jobs=cfg.kind == "cluster",
        ),
    )

# 7. Outputs a PR preview and an operator read (a job stack reads its cluster's).
pulumi.export("masterHost", cfg.master.address)
pulumi.export("imageRef", image.ref)
pulumi.export("networkId", network.network_id)
pulumi.export("swarmId", swarm.swarm_id)
if isinstance(image, TrainingImage):
    pulumi.export("imageTag", image.tag)
if isinstance(network, OverlayNetwork):
    pulumi.export("networkName", network.network_name)
    pulumi.export("networkMtu", network.mtu)
if cfg.kind == "cluster" and isinstance(secrets, ClusterSecrets):
    # What its job stacks mount the secrets by (ids and names, never the values).
    pulumi.export(
        "secretRefs", {n: {"id": s.id, "name": s.name} for n, s in secrets.secrets.items()}
    )
    # What its jobs read of its stack file, as deployed (ClusterRef checks it).
    pulumi.export("clusterDigest", cfg.cluster_digest)
if launch is not None and services is not None:
    pulumi.export("masterAddress", launch.master_address)
    pulumi.export("hostfile", launch.hostfile)
    pulumi.export("rankMap", launch.rank_map)
    pulumi.export("serviceNames", services.service_names)
    pulumi.export("logsCommand", launch.logs_command)
    pulumi.export("trainingLog", launch.training_log)
    pulumi.export("trainingSteps", cfg.training.steps)
    pulumi.export(
        "run",
        {
            "state": launch.run.state,
            "reason": launch.run.reason,
            "step": launch.run.step,
            "checkpoint": launch.run.checkpoint,
            "restarts": launch.run.restarts,
            "relaunches": launch.run.relaunches,
        },
    )
    if launch.gate is not None:
        pulumi.export("gate", launch.gate.summary)
    if launch.code is not None:
        # The version the run trains with: what its checkpoints were made by.
        pulumi.export(
            "code",
            {
                "digest": launch.code.digest,
                "path": launch.code.path,
                "files": len(launch.code.bundle.files),
            },
        )
if monitoring is not None:
    pulumi.export("prometheusAddress", monitoring.address)
if cfg.released and cfg.training.released is not None:
    # The verdict the ended run was released with (`scripts/job queue --run`).
    pulumi.export("run", cfg.training.released.model_dump(mode="json"))
if queued is not None:
    entry = queued.entry
    pulumi.export(
        "queue", {"state": entry.state, "position": entry.position, "reason": entry.reason}
    )
