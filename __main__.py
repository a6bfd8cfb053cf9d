"""deepspeed-swarm: a DeepSpeed training cluster on Docker Swarm.

Table of contents: load the validated stack config, build the components in
dependency order (each from its config sections and the components before it),
export what a reviewer and an operator need.
"""

from pathlib import Path

import pulumi

from infra import config
from infra.components.hostfacts import HostFacts, HostFactsArgs
from infra.components.image import TrainingImage, TrainingImageArgs
from infra.components.jupyter import JupyterLab, JupyterLabArgs
from infra.components.launch import TrainingLaunch, TrainingLaunchArgs
from infra.components.monitoring import Monitoring, MonitoringArgs
from infra.components.network import OverlayNetwork, OverlayNetworkArgs
from infra.components.secrets import ClusterSecrets, ClusterSecretsArgs
from infra.components.services import TrainingServices, TrainingServicesArgs
from infra.components.swarm import SwarmCluster, SwarmClusterArgs

PROJECT_DIR = Path(__file__).parent
stack = pulumi.get_stack()

# 1. Config: fails here, before any resource is registered, on a bad stack file.
cfg, secret_values = config.load()

# 2. Hosts: preflight facts (GPUs, NIC MTU, driver), then the swarm on top of them.
facts = HostFacts(f"{stack}-facts", HostFactsArgs(cfg.hosts, cfg.network, cfg.preflight))
swarm = SwarmCluster(f"{stack}-swarm", SwarmClusterArgs(cfg.hosts, cfg.leader, cfg.master, facts))

# 3. What the tasks need: image, overlay network, secrets.
image = TrainingImage(f"{stack}-image", TrainingImageArgs(cfg.image, PROJECT_DIR, swarm))
network = OverlayNetwork(f"{stack}-net", OverlayNetworkArgs(cfg.network, swarm))
secrets = ClusterSecrets(f"{stack}-secrets", ClusterSecretsArgs(secret_values, swarm))

# 4. The GPU-reserving services, then the launch of the training job.
services = TrainingServices(
    f"{stack}-train",
    TrainingServicesArgs(
        training=cfg.training,
        monitoring=cfg.monitoring,
        network=cfg.network,
        hosts=cfg.hosts,
        active_hosts=cfg.active_hosts,
        workers=cfg.workers,
        spares=cfg.spares,
        secret_names=cfg.secret_names,
        image=image,
        overlay=network,
        secrets=secrets,
        swarm=swarm,
        facts=facts,
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
        restart_metrics=cfg.monitoring.enabled,
    ),
)

# 5. Optional: JupyterLab on the master, beside the job.
if cfg.jupyter.enabled:
    jupyter = JupyterLab(
        f"{stack}-jupyter", JupyterLabArgs(cfg.jupyter, cfg.training, cfg.master, image, swarm)
    )
    pulumi.export("jupyterUrl", jupyter.url)
    pulumi.export("jupyterToken", jupyter.token)

# 6. Optional monitoring (Prometheus, node exporters): nothing of it exists when off.
monitoring = None
if cfg.monitoring.enabled:
    monitoring = Monitoring(
        f"{stack}-monitoring",
        MonitoringArgs(
            monitoring=cfg.monitoring,
            training=cfg.training,
            workers=cfg.workers,
            master=cfg.master,
            network=cfg.network,
            active_hosts=cfg.active_hosts,
            image=cfg.image,
            project_dir=PROJECT_DIR,
            overlay=network,
            swarm=swarm,
        ),
    )

# 7. Outputs a PR preview and an operator read.
pulumi.export("masterAddress", launch.master_address)
pulumi.export("masterHost", cfg.master.address)
pulumi.export("hostfile", launch.hostfile)
pulumi.export("rankMap", launch.rank_map)
pulumi.export("serviceNames", services.service_names)
pulumi.export("imageTag", image.tag)
pulumi.export("imageRef", image.ref)
pulumi.export("networkId", network.network_id)
pulumi.export("networkName", network.network_name)
pulumi.export("networkMtu", network.mtu)
pulumi.export("swarmId", swarm.swarm_id)
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
