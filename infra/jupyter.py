"""JupyterLab: an optional notebook server on the master host (`jupyter.enabled`).

It runs the training image (the same torch and DeepSpeed as the job) as the
training user, with the shared data dir at /data, as the deployment guides run it
beside a cluster. Its token is generated once (`GeneratedToken`), held only as a
Swarm secret mounted at /run/secrets/jupyter_token and as the secret stack output
`jupyterToken`: never in the service spec, an env var of the spec, or a log. The
port is published in host mode on the master only, not on Swarm's routing mesh.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_docker as docker

from infra import render
from infra.config import StackConfig
from infra.layout import DATA_MOUNT, JUPYTER_SERVICE, SECRETS_DIR
from infra.secrets import GeneratedToken, secret_mount, swarm_secret
from infra.services import PLATFORMS

SERVICE_NAME = JUPYTER_SERVICE
TOKEN_FILE = "jupyter_token"
CONTAINER_PORT = 8888
# The token is read from the secret file at start (jupyter_server takes JUPYTER_TOKEN),
# so it never appears in the service spec or on a command line.
COMMAND = (
    f'JUPYTER_TOKEN="$(cat {SECRETS_DIR}/{TOKEN_FILE})" exec jupyter lab '
    f"--ip=0.0.0.0 --port={CONTAINER_PORT} --no-browser --ServerApp.root_dir={DATA_MOUNT}"
)


class JupyterLab(pulumi.ComponentResource):
    """JupyterLab on the master, its token a Swarm secret and a secret output."""

    url: pulumi.Output[str]
    """Where to open it: the master host's address and the published port."""
    token: pulumi.Output[str]
    """The login token (a secret output)."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        image_ref: pulumi.Input[str],
        provider: docker.Provider,
        depends_on: Sequence[pulumi.Resource],
        rotation: str = "1",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:jupyter:JupyterLab", name, None, opts)
        token = GeneratedToken(
            f"{name}-token", {"rotation": rotation}, pulumi.ResourceOptions(parent=self)
        )
        secret = swarm_secret(
            f"{name}-token-secret",
            TOKEN_FILE,
            token.value,
            provider,
            pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )
        docker.Service(
            f"{name}-service",
            name=SERVICE_NAME,
            mode=docker.ServiceModeArgs(replicated=docker.ServiceModeReplicatedArgs(replicas=1)),
            task_spec=docker.ServiceTaskSpecArgs(
                container_spec=docker.ServiceTaskSpecContainerSpecArgs(
                    image=image_ref,
                    commands=["/bin/sh", "-c", COMMAND],
                    user=render.TRAIN_UID,
                    mounts=[
                        docker.ServiceTaskSpecContainerSpecMountArgs(
                            type="bind",
                            source=cfg.training.data_dir,
                            target=DATA_MOUNT,
                            read_only=False,
                        )
                    ],
                    secrets=[secret_mount(TOKEN_FILE, secret)],
                    # The image's healthcheck probes sshd, which this task does not run.
                    healthcheck=docker.ServiceTaskSpecContainerSpecHealthcheckArgs(tests=["NONE"]),
                ),
                placement=docker.ServiceTaskSpecPlacementArgs(
                    constraints=render.placement_constraints("master"),
                    max_replicas=1,
                    platforms=PLATFORMS,
                ),
            ),
            endpoint_spec=docker.ServiceEndpointSpecArgs(
                mode="dnsrr",
                ports=[
                    docker.ServiceEndpointSpecPortArgs(
                        target_port=CONTAINER_PORT,
                        published_port=cfg.jupyter.port,
                        # Host mode: only the master's own port, no routing mesh.
                        publish_mode="host",
                        protocol="tcp",
                    )
                ],
            ),
            converge_config=docker.ServiceConvergeConfigArgs(delay="2s", timeout="5m"),
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[secret]),
        )
        self.url = pulumi.Output.from_input(f"http://{cfg.master.address}:{cfg.jupyter.port}/lab")
        self.token = pulumi.Output.secret(token.value)
        self.register_outputs({"url": self.url})
