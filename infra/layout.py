"""The container contract: what the program, the lab, the policy pack, the PR comment
and the ops scripts agree on about a training task and the swarm it runs in.

Paths inside the tasks, service names, node and object labels, the GPU resource kind,
the training user's uid and the Pulumi type tokens the program registers. Everything
that would silently break if two places spelled it differently lives here, and only
here; `images/Dockerfile` states the image-side half (IMAGE_HOME, the uid) and
`tests/unit/infra/test_layout.py` holds the two equal.
"""

from __future__ import annotations

PROJECT = "deepspeed-swarm"

# --- Paths inside every training task ------------------------------------------------
# The shared data dir (bind of training.data_dir), the sized tmpfs, where Swarm puts
# secrets, and where the image keeps its code (images/Dockerfile).
DATA_MOUNT = "/data"
SHM_MOUNT = "/dev/shm"
SECRETS_DIR = "/run/secrets"
IMAGE_HOME = "/opt/dss"
IMAGE_PYTHON = "/opt/venv/bin/python"
"""The image's interpreter (its venv: torch, DeepSpeed); first on the tasks' PATH."""
DEFAULT_SCRIPT = f"{IMAGE_HOME}/train.py"
# Launch files live on the shared /data: pdsh starts ranks on the workers, whose
# train.py checks its world size against the same hostfile.
LAUNCH_DIR = f"{DATA_MOUNT}/.dss"
# `training.code.dir`: the code's versions on the shared /data, one directory per
# content digest, each with its manifest (infra/render/code.py).
CODE_DIR = f"{DATA_MOUNT}/code"
CODE_MANIFEST = ".dss-code.sha256"
SSH_PRIVATE_KEY_FILE = "ssh_private_key"
SSH_PUBLIC_KEY_FILE = "ssh_public_key"
# The image's unprivileged training user (images/Dockerfile `useradd -u`).
TRAIN_UID = "1000"

# --- Swarm service names -------------------------------------------------------------
MASTER_SERVICE = "ds-master"
WORKER_SERVICE = "ds-worker"
WARMUP_SERVICE = "ds-net-warmup"
STANDBY_SERVICE = "ds-standby"
JUPYTER_SERVICE = "ds-jupyter"
TRAINING_SERVICES = (MASTER_SERVICE, WORKER_SERVICE)


def training_service_names(job: str | None) -> tuple[str, str]:
    """The master and worker services of a job stack (`<job>-master`, `<job>-worker`),
    or of a single stack (None: `ds-master`, `ds-worker`, as every stack before jobs):
    several jobs on one swarm need names of their own."""
    if job is None:
        return MASTER_SERVICE, WORKER_SERVICE
    return f"{job}-master", f"{job}-worker"


def job_standby_name(job: str) -> str:
    """A job stack's own idle service on the spares (`<job>-standby`, TrainingServices
    says why); a single stack has only `ds-standby`."""
    return f"{job}-standby"


# --- Labels --------------------------------------------------------------------------
# Node labels the program owns (users' labels may not use the prefix).
LABEL_PREFIX = "dss."
ROLE_LABEL = "dss.role"
GPUS_LABEL = "dss.gpus"
GPU_MODEL_LABEL = "dss.gpu-model"
RDMA_LABEL = "dss.rdma"
SPARE_LABEL = "dss.spare"
# training.recovery.follow_master: on the master's host and the spares, where the master
# task may run (Swarm has no OR between constraints: one label on both).
MASTER_OK_LABEL = "dss.master_ok"
# The master service's label that its tasks read into DSS_SPEC (a Swarm template): the
# digest of the task spec, so a task knows whether an update made it (infra/task/takeover.py).
SPEC_LABEL = "dss.spec"
# Object labels: the file name a secret or config is mounted as; who manages a network;
# the job stack a service belongs to (ops/recover.py tells one stack's from another's).
FILE_LABEL = "dss.file"
JOB_LABEL = "dss.job"
MANAGED_BY_LABEL = "dss.managed-by"
ROLE_MASTER = "master"
ROLE_WORKER = "worker"
ROLE_MONITORING = "monitoring"
GPU_ROLES = (ROLE_MASTER, ROLE_WORKER)

# --- GPUs ----------------------------------------------------------------------------
# The Swarm generic resource kind a GPU is advertised as (dockerd
# `node-generic-resources`), and the variable Swarm hands a task its assigned GPUs in,
# which the NVIDIA container runtime must read (`swarm-resource` in its config.toml).
GPU_RESOURCE = "NVIDIA-GPU"
SWARM_RESOURCE_ENV = f"DOCKER_RESOURCE_{GPU_RESOURCE}"

# --- Hosts ---------------------------------------------------------------------------
# The oldest Docker engine the preflight accepts (HostFacts refuses an older one on
# create/update). 20.10 is the oldest engine the program is tested on (the lab's
# legacy row, dockerd 20.10.24; lab/engines.py); what it relies on is older still
# (Swarm generic resources 17.06, placement max_replicas 19.03 / API 1.40), but
# nothing older than 20.10 has ever run it, and 19.03 and older are out of support
# upstream. Compared on the numeric release only (`20.10.24+dfsg1` is 20.10.24).
MIN_DOCKER_ENGINE = "20.10.0"
# The first engine whose Swarm schedules a GPU-reserving task onto a node that has not
# yet used the task's overlay (moby/swarmkit#3082, in Docker 23.0.2; the regression for
# counted resources, moby/swarmkit#3162, was fixed in 25.0.3 and never reached 20.10).
# Older engines get the `ds-net-warmup` service (infra/components/services.py).
OVERLAY_ATTACH_FIXED_IN = "23.0.2"
# That fix inverted the check for counted (discrete) resources: from 23.0.2 the
# constraint enforcer rejects a task reserving `NVIDIA-GPU=<n>` on a node that has
# them, until moby/swarmkit#3162 (Docker 25.0.3). HostFacts refuses a GPU host whose
# engine is in [OVERLAY_ATTACH_FIXED_IN, COUNTED_RESOURCES_FIXED_IN).
COUNTED_RESOURCES_FIXED_IN = "25.0.3"

# --- Pulumi type tokens the program registers ----------------------------------------
SERVICE_TYPE = "docker:index/service:Service"
NETWORK_TYPE = "docker:index/network:Network"
SECRET_TYPE = "docker:index/secret:Secret"
IMAGE_TYPE = "docker:index/image:Image"
CONFIG_TYPE = "docker:index/serviceConfig:ServiceConfig"
COMMAND_TYPE = "command:remote:Command"
DYNAMIC_TYPE = "pulumi-python:dynamic:Resource"
STACK_TYPE = "pulumi:pulumi:Stack"
# A job stack's view of its cluster (infra/components/clusterref.py): what tells a job
# stack's state from a cluster's (ops/recover.py).
CLUSTER_REF_TYPE = "deepspeed-swarm:clusterref:ClusterRef"
# The launch (infra/components/launch.py) and, among its children, its run record (the
# TrainingRun dynamic resource, `<launch>-run-state`): where the job command reads a
# run's state in a stack's state, which a refresh rewrites (jobs/record.py).
LAUNCH_TYPE = "deepspeed-swarm:launch:TrainingLaunch"
RUN_RECORD_SUFFIX = "-run-state"
