"""deepspeed-swarm: a DeepSpeed training cluster on Docker Swarm.

Table of contents: load the validated stack config, build the components in
dependency order, export what a reviewer and an operator need.
"""

from pathlib import Path

import pulumi

from infra import config, render
from infra.hostfacts import HostFacts
from infra.image import TrainingImage
from infra.jupyter import JupyterLab
from infra.launch import TrainingLaunch
from infra.monitoring import Monitoring
from infra.network import OverlayNetwork
from infra.secrets import ClusterSecrets
from infra.services import TrainingServices
from infra.swarm import SwarmCluster, endpoint

PROJECT_DIR = Path(__file__).parent
stack = pulumi.get_stack()

# 1. Config: fails here, before any resource is registered, on a bad stack file.
cfg, secret_values = config.load()

# 2. Hosts: preflight facts (GPUs, NIC MTU, driver), then the swarm on top of them.
facts = HostFacts(f"{stack}-facts", cfg)
swarm = SwarmCluster(
    f"{stack}-swarm", cfg, pulumi.ResourceOptions(depends_on=list(facts.facts.values()))
)
nodes = list(swarm.nodes.values())

# 3. What the tasks need: image, overlay network, secrets.
image = TrainingImage(f"{stack}-image", cfg, PROJECT_DIR, swarm.providers)
network = OverlayNetwork(f"{stack}-net", cfg.network, swarm.manager_provider, depends_on=nodes)
secrets = ClusterSecrets(f"{stack}-secrets", secret_values, swarm.manager_provider, nodes)

# 4. The GPU-reserving services, then the launch of the training job.
services = TrainingServices(
    f"{stack}-train",
    cfg,
    image_ref=image.ref,
    network_id=network.network_id,
    secrets=secrets.secrets,
    provider=swarm.manager_provider,
    depends_on=[image, network, secrets, facts],
)
launch = TrainingLaunch(
    f"{stack}-launch",
    cfg,
    host_endpoints={h.name: endpoint(h) for h in cfg.hosts},
    services=[s for s in (services.master, services.workers) if s is not None],
    service_names=services.service_names,
    network_id=network.network_id,
    image_ref=image.ref,
    task_spec_digest=services.task_spec_digest,
)

# 5. Optional: JupyterLab on the master, beside the job.
if cfg.jupyter.enabled:
    jupyter = JupyterLab(
        f"{stack}-jupyter", cfg, image.ref, swarm.manager_provider, depends_on=[image, *nodes]
    )
    pulumi.export("jupyterUrl", jupyter.url)
    pulumi.export("jupyterToken", jupyter.token)

# 6. Optional monitoring (Prometheus, node exporters): nothing of it exists when off.
monitoring = None
if cfg.monitoring.enabled:
    monitoring = Monitoring(
        f"{stack}-monitoring",
        cfg,
        PROJECT_DIR,
        network_id=network.network_id,
        provider=swarm.manager_provider,
        host_providers=swarm.providers,
        depends_on=[network, *nodes],
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
pulumi.export("logsCommand", render.logs_command(cfg))
pulumi.export("trainingLog", render.metrics_path(cfg))
pulumi.export("trainingSteps", cfg.training.steps)
if monitoring is not None:
    pulumi.export("prometheusAddress", monitoring.address)
