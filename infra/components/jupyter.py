"""JupyterLab: an optional notebook server on the master host (`jupyter.enabled`).

It runs the training image (the same torch and DeepSpeed as the job) as the
training user, with the shared data dir at /data, as the deployment guides run it
beside a cluster. Its token is generated once (`GeneratedToken`), held only as a
Swarm secret mounted at /run/secrets/jupyter_token and as the secret stack output
`jupyterToken`: never in the service spec, an env var of the spec, or a log. The
port is published in host mode on the master only, not on Swarm's routing mesh.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from infra.components.image import TrainingImage
from infra.components.secrets import swarm_secret
from infra.components.swarm import SwarmCluster
from infra.config import Host, Jupyter, Training
from infra.layout import DATA_MOUNT, JUPYTER_SERVICE, SECRETS_DIR, TRAIN_UID
from infra.providers.secrets import GeneratedToken
from infra.render import specs
from infra.render.labels import placement_constraints

SERVICE_NAME = JUPYTER_SERVICE
TOKEN_FILE = "jupyter_token"
CONTAINER_PORT = 8888
# The token is read from the secret file at start (jupyter_server takes JUPYTER_TOKEN),
# so it never appears in the service spec or on a command line.
COMMAND = (
    f'JUPYTER_TOKEN="$(cat {SECRETS_DIR}/{TOKEN_FILE})" exec jupyter lab '
    f"--ip=0.0.0.0 --port={CONTAINER_PORT} --no-browser --ServerApp.root_dir={DATA_MOUNT}"
)


@dataclass(frozen=True)
class JupyterLabArgs:
    """Its settings, the master it runs on, the shared data dir, image and swarm."""

    jupyter: Jupyter
    training: Training
    """`data_dir`: what it serves at /data."""
    master: Host
    image: TrainingImage
    swarm: SwarmCluster
    rotation: str = "1"
    """Change to generate a new token."""


class JupyterLab(pulumi.ComponentResource):
    """JupyterLab on the master, its token a Swarm secret and a secret output."""

    url: pulumi.Output[str]
    """Where to open it: the master host's address and the published port."""
    token: pulumi.Output[str]
    """The login token (a secret output)."""

    def __init__(
        self, name: str, args: JupyterLabArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:jupyter:JupyterLab", name, None, opts)
        provider = args.swarm.manager_provider
        token = GeneratedToken(
            f"{name}-token", {"rotation": args.rotation}, pulumi.ResourceOptions(parent=self)
        )
        secret = swarm_secret(
            f"{name}-token-secret",
            TOKEN_FILE,
            token.value,
            provider,
            pulumi.ResourceOptions(parent=self, depends_on=[args.image, *args.swarm.members]),
        )
        docker.Service(
            f"{name}-service",
            name=SERVICE_NAME,
            mode=specs.replicated(1),
            task_spec=docker.ServiceTaskSpecArgs(
                container_spec=docker.ServiceTaskSpecContainerSpecArgs(
                    image=args.image.ref,
                    commands=["/bin/sh", "-c", COMMAND],
                    user=TRAIN_UID,
                    mounts=[specs.data_mount(args.training.data_dir)],
                    secrets=[specs.secret_mount(TOKEN_FILE, secret)],
                    healthcheck=specs.no_healthcheck(),
                ),
                placement=specs.placement(placement_constraints("master"), max_replicas=1),
            ),
            # Host mode: only the master's own port, no routing mesh.
            endpoint_spec=specs.dnsrr([specs.host_port(CONTAINER_PORT, args.jupyter.port)]),
            converge_config=specs.converge("5m"),
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[secret]),
        )
        self.url = pulumi.Output.from_input(f"http://{args.master.address}:{args.jupyter.port}/lab")
        self.token = pulumi.Output.secret(token.value)
        self.register_outputs({"url": self.url})
