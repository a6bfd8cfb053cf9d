"""The hand-run path the program replaces, rendered from the same stack config: a
compose file for `docker stack deploy` and the shell script an engineer would run
(issue 11's baseline for "time to train").

    python -m bench.handrun --stack-file Pulumi.dev.yaml --out DIR   # DIR/deploy.sh, stack.yml
    bash DIR/deploy.sh                                               # on a bare lab

The script does what the guides do by hand, with the Docker CLI against each host's
daemon: `docker swarm init` / `join`, node labels, the image built and pushed,
`docker secret create` (an SSH key pair made with ssh-keygen, the named secrets),
`docker stack deploy` of the compose file (the overlay with its MTU in `driver_opts`,
GPU reservations as generic resources, the image's sshd health check), the hostfile
from `tasks.<service>` DNS, then `deepspeed --hostfile` in the master task. The only
piece reused from the program is the launch step (`infra.render.launch.launch_script`, the
same `docker exec` a person would type), so both paths start the same training.

The compose file carries one thing no guide has: a global warm-up service on the
overlay. Without it Docker 20.10 rejects the first GPU-reserving task on each node
for good (infra/components/services.py says why); the hand path needs it as much as the
program.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from harness import ROOT
from infra.config import StackConfig, parse_stack_config, size_bytes, stack_file_values
from infra.layout import (
    DATA_MOUNT,
    GPU_RESOURCE,
    IMAGE_HOME,
    MASTER_SERVICE,
    SHM_MOUNT,
    SSH_PRIVATE_KEY_FILE,
    SSH_PUBLIC_KEY_FILE,
    TRAIN_UID,
    WARMUP_SERVICE,
    WORKER_SERVICE,
)
from infra.render.labels import node_labels, placement_constraints, training_env
from infra.render.launch import ds_config_json, launch_argv, launch_script

STACK = "dss"
"""`docker stack deploy` name: services become dss_ds-master, dss_ds-worker."""
NETWORK = "ds-net"
IMAGE = "10.213.0.1:5000/deepspeed-swarm/handrun:latest"
"""The image deploy.sh builds and pushes (the lab's registry)."""


def load(stack_file: Path) -> StackConfig:
    """A stack file's config, without its (encrypted) secrets."""
    values = stack_file_values(stack_file.read_text())
    values.pop("secrets", None)
    return parse_stack_config(values)


def compose(cfg: StackConfig, image: str, secret_files: list[str]) -> dict[str, Any]:
    """The compose file (version 3.8) equivalent to the program's services."""
    t = cfg.training
    secrets = [
        {"source": f, "target": f, "uid": TRAIN_UID, "gid": TRAIN_UID, "mode": 0o400}
        for f in secret_files
    ]
    reservations: dict[str, Any] = {}
    if t.gpus_per_node:
        spec = {"kind": GPU_RESOURCE, "value": t.gpus_per_node}
        reservations["generic_resources"] = [{"discrete_resource_spec": spec}]

    def training(role: str, replicas: int) -> dict[str, Any]:
        return {
            "image": image,
            "hostname": "{{.Service.Name}}-{{.Task.Slot}}",
            "user": TRAIN_UID,
            "environment": training_env(cfg),
            "volumes": [
                {"type": "bind", "source": t.data_dir, "target": DATA_MOUNT},
                {"type": "tmpfs", "target": SHM_MOUNT, "tmpfs": {"size": size_bytes(t.shm_size)}},
            ],
            "secrets": secrets,
            "networks": [NETWORK],
            "healthcheck": {
                "test": ["CMD", f"{IMAGE_HOME}/healthcheck.sh"],
                "interval": "10s",
                "timeout": "5s",
                "retries": 3,
                "start_period": "20s",
            },
            "stop_signal": "SIGTERM",
            "stop_grace_period": t.stop_grace_period,
            "deploy": {
                "mode": "replicated",
                "replicas": replicas,
                "endpoint_mode": "dnsrr",
                "placement": {
                    "constraints": placement_constraints(role),
                    "max_replicas_per_node": 1,
                },
                "resources": {"reservations": reservations} if reservations else {},
                "restart_policy": {"condition": "on-failure"},
            },
        }

    services = {
        WARMUP_SERVICE: {
            "image": image,
            "command": ["sleep", "infinity"],
            "user": TRAIN_UID,
            "healthcheck": {"disable": True},
            "networks": [NETWORK],
            "deploy": {"mode": "global"},
        },
        MASTER_SERVICE: training("master", 1),
    }
    if cfg.workers:
        services[WORKER_SERVICE] = training("worker", len(cfg.workers))
    return {
        "version": "3.8",
        "services": services,
        "networks": {
            NETWORK: {
                "driver": "overlay",
                "attachable": True,
                "driver_opts": {"com.docker.network.driver.mtu": str(cfg.network.mtu)},
            }
        },
        "secrets": {f: {"external": True} for f in secret_files},
    }


class _Plain(yaml.SafeDumper):
    """Writes shared values out in full: no anchors in a file people read."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def deploy_script(cfg: StackConfig, image: str) -> str:
    """The shell script: swarm, labels, image, secrets, stack, hostfile, launch."""
    t = cfg.training
    hosts = cfg.hosts
    leader = cfg.managers[0]
    dk = {h.name: f"docker -H {shlex.quote(h.docker_host)}" for h in hosts}
    lines = [
        "#!/usr/bin/env bash",
        "# Rendered by bench/handrun.py: the hand-run baseline for `pulumi up`.",
        "set -euo pipefail",
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "",
        "# 1. swarm: init on the first manager, join the others",
        f"{dk[leader.name]} swarm init --advertise-addr {leader.address}",
        f"mtoken=$({dk[leader.name]} swarm join-token -q manager)",
        f"wtoken=$({dk[leader.name]} swarm join-token -q worker)",
    ]
    for h in hosts:
        if h is leader:
            continue
        token = "$mtoken" if h.role == "manager" else "$wtoken"
        join = f"swarm join --token {token} --advertise-addr {h.address} {leader.address}:2377"
        lines.append(f"{dk[h.name]} {join}")
    lines += ["", "# 2. node labels (placement and GPU facts)"]
    for h in hosts:
        labels = node_labels(cfg, h).items()
        adds = " ".join(f"--label-add {shlex.quote(f'{k}={v}')}" for k, v in labels)
        lines.append(f"{dk[leader.name]} node update {adds} {h.name}")
    lines += [
        "",
        "# 3. the image: build (cached layers) and push to the registry",
        f"DSS_IMAGE={shlex.quote(image)} {ROOT / 'images' / 'build'} >/dev/null",
        f"docker push {shlex.quote(image)} >/dev/null",
        "",
        "# 4. secrets: an SSH key pair for the tasks, the named secrets",
        'keys="$(mktemp -d)"; trap \'rm -rf "$keys"\' EXIT',
        'ssh-keygen -q -t ed25519 -N "" -C handrun -f "$keys/id"',
        f'{dk[leader.name]} secret create {SSH_PRIVATE_KEY_FILE} "$keys/id" >/dev/null',
        f'{dk[leader.name]} secret create {SSH_PUBLIC_KEY_FILE} "$keys/id.pub" >/dev/null',
        'for f in "$here"/secrets/*; do',
        f'  [ -e "$f" ] && {dk[leader.name]} secret create "$(basename "$f")" "$f" >/dev/null',
        "done",
        "",
        "# 5. the stack: overlay, warm-up, master and workers",
        f'{dk[leader.name]} stack deploy -c "$here/stack.yml" {STACK}',
        "",
        "# 6. wait for every training task to run healthy",
        f"want={1 + len(cfg.workers)}",
        "for i in $(seq 1 600); do",
        "  healthy=0",
    ]
    for h in hosts:
        lines.append(
            f"  healthy=$((healthy + $({dk[h.name]} ps -q "
            f"--filter label=com.docker.stack.namespace={STACK} "
            f"--filter health=healthy | wc -l)))"
        )
    lines += [
        '  [ "$healthy" -ge "$want" ] && break',
        "  sleep 1",
        "done",
        "",
        "# 7. hostfile from Swarm's DNS (tasks.<service>), master first",
        f"mnode=$({dk[leader.name]} service ps -q --filter desired-state=running "
        f"--format '{{{{.Node}}}}' {STACK}_{MASTER_SERVICE} | head -n1)",
        'case "$mnode" in',
        *[f"  {h.name}) mdocker={shlex.quote(h.docker_host)} ;;" for h in hosts],
        "esac",
        f'ctr=$(docker -H "$mdocker" ps -q --filter '
        f"label=com.docker.swarm.service.name={STACK}_{MASTER_SERVICE} | head -n1)",
        'resolve() { docker -H "$mdocker" exec "$ctr" getent ahostsv4 "tasks.$1" '
        "| awk '{print $1}' | sort -u; }",
        f"master_addr=$(resolve {STACK}_{MASTER_SERVICE} | head -n1)",
        f"workers=$(resolve {STACK}_{WORKER_SERVICE} || true)" if cfg.workers else "workers=",
        f'hostfile=$(for a in $master_addr $workers; do echo "$a slots={t.ranks_per_node}"; done)',
        'nnodes=$(echo "$hostfile" | wc -l)',
        "",
        "# 8. launch: deepspeed --hostfile in the master task",
        'export DOCKER_HOST="$mdocker"',
        f"PYTHONPATH={shlex.quote(str(ROOT))} {sys.executable} -m bench.handrun --launch-script "
        '--stack-config "$here/config.yaml" --master-addr "$master_addr" --nnodes "$nnodes" '
        '--hostfile "$hostfile" | sh',
    ]
    return "\n".join(lines) + "\n"


def launch(cfg: StackConfig, master_addr: str, nnodes: int, hostfile: str) -> str:
    """Step 8's script: the same `docker exec` launch the program runs over SSH."""
    t = cfg.training
    return launch_script(
        service=f"{STACK}_{MASTER_SERVICE}",
        argv=launch_argv(cfg, master_addr, nnodes),
        run_name=t.run_name,
        hostfile=hostfile + "\n",
        ds_config=ds_config_json(t),
    )


def write(
    cfg: StackConfig, stack_file: Path, image: str, out: Path, secrets: dict[str, str]
) -> Path:
    """deploy.sh, stack.yml, config.yaml and secrets/ in `out`; returns deploy.sh."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "secrets").mkdir(mode=0o700, exist_ok=True)
    for name, value in secrets.items():
        (out / "secrets" / name).write_text(value)
    files = [SSH_PRIVATE_KEY_FILE, SSH_PUBLIC_KEY_FILE, *sorted(secrets)]
    doc = compose(cfg, image, files)
    (out / "stack.yml").write_text(yaml.dump(doc, Dumper=_Plain, sort_keys=False))
    (out / "config.yaml").write_text(stack_file.read_text())
    script = out / "deploy.sh"
    script.write_text(deploy_script(cfg, image))
    script.chmod(0o755)
    return script


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack-file", type=Path, help="Pulumi.<stack>.yaml to render from")
    ap.add_argument("--out", type=Path, help="folder for deploy.sh and stack.yml")
    ap.add_argument("--image", default=IMAGE)
    ap.add_argument("--launch-script", action="store_true", help="(deploy.sh's step 8)")
    ap.add_argument("--stack-config", type=Path)
    ap.add_argument("--master-addr")
    ap.add_argument("--nnodes", type=int)
    ap.add_argument("--hostfile")
    a = ap.parse_args(argv)
    if a.launch_script:
        cfg = load(a.stack_config)
        print(launch(cfg, a.master_addr, a.nnodes, a.hostfile))
        return 0
    if not a.stack_file or not a.out:
        ap.error("--stack-file and --out are required")
    script = write(load(a.stack_file), a.stack_file, a.image, a.out, {"wandb_api_key": "dummy"})
    print(script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
