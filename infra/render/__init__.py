"""Pure renderers: config (and observed task rosters) in, strings and spec inputs out.

By concern: `labels` (node labels, placement, task environment), `launch` (roster
order, hostfile, rank map, launcher lines, launch and stop scripts), `specs` (the
Swarm spec builders services share), `prometheus` (monitoring's configuration),
`digest` (content hashes). Code under infra/ imports the submodules.

This package also re-exports what the single `infra/render.py` module offered, so
that scripts outside infra/ (bench, the lab tests) that call `render.<name>` keep
working unchanged.
"""

from infra.layout import (
    DATA_MOUNT,
    GPU_RESOURCE,
    IMAGE_HOME,
    LAUNCH_DIR,
    MASTER_SERVICE,
    SECRETS_DIR,
    SSH_PRIVATE_KEY_FILE,
    SSH_PUBLIC_KEY_FILE,
    STANDBY_SERVICE,
    TRAIN_UID,
    WARMUP_SERVICE,
    WORKER_SERVICE,
)
from infra.render.digest import content_hash, tree_hash
from infra.render.labels import (
    SPARE_CONSTRAINT,
    env_list,
    node_labels,
    placement_constraints,
    training_env,
)
from infra.render.launch import (
    RosterEntry,
    ds_config_json,
    ds_config_path,
    duplicate_gpus,
    hostfile_path,
    launch_argv,
    launch_script,
    logs_command,
    metrics_path,
    order_roster,
    rank_map,
    render_hostfile,
    stop_script,
)
from infra.render.specs import docker_duration

__all__ = [
    "DATA_MOUNT",
    "GPU_RESOURCE",
    "IMAGE_HOME",
    "LAUNCH_DIR",
    "MASTER_SERVICE",
    "SECRETS_DIR",
    "SPARE_CONSTRAINT",
    "SSH_PRIVATE_KEY_FILE",
    "SSH_PUBLIC_KEY_FILE",
    "STANDBY_SERVICE",
    "TRAIN_UID",
    "WARMUP_SERVICE",
    "WORKER_SERVICE",
    "RosterEntry",
    "content_hash",
    "docker_duration",
    "ds_config_json",
    "ds_config_path",
    "duplicate_gpus",
    "env_list",
    "hostfile_path",
    "launch_argv",
    "launch_script",
    "logs_command",
    "metrics_path",
    "node_labels",
    "order_roster",
    "placement_constraints",
    "rank_map",
    "render_hostfile",
    "stop_script",
    "training_env",
    "tree_hash",
]
