"""One replicated Swarm service with many env vars and a service label, for
tests/engine/test_service_env_order.py (which writes the stack's config): changing only
the label (config `revision`) must update the service without replacing its tasks."""

import pulumi
import pulumi_docker as docker

# The program's own spec builder (the project is on PYTHONPATH, scripts/env.sh).
from infra.render.specs import restart_policy

config = pulumi.Config()
env: dict[str, str] = config.require_object("env")
lab = docker.Provider("lab", host=config.require("docker_host"))
service = docker.Service(
    "envorder",
    name=config.require("service_name"),
    labels=[docker.ServiceLabelArgs(label="dss.test.revision", value=config.require("revision"))],
    task_spec=docker.ServiceTaskSpecArgs(
        container_spec=docker.ServiceTaskSpecContainerSpecArgs(
            # Digest-pinned: the daemon pins a bare tag at create, the provider sends the
            # tag again on update, and that alone would replace the tasks.
            image=config.require("image"),
            commands=["/bin/sleep", "3600"],
            env=env,
            # busybox's sleep ignores SIGTERM as PID 1: a short grace keeps destroy quick.
            stop_grace_period="1s",
        ),
        # The whole restart policy, as the program's services state it: the provider
        # sends the fields left out as zeros on update (Delay, Window: None -> 0), and that
        # alone replaces the tasks; this test is about the env order.
        restart_policy=restart_policy("any", "5s", 0, "0s"),
    ),
    mode=docker.ServiceModeArgs(
        replicated=docker.ServiceModeReplicatedArgs(replicas=config.require_int("replicas"))
    ),
    opts=pulumi.ResourceOptions(provider=lab),
)
pulumi.export("service_id", service.id)
