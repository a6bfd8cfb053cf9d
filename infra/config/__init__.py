"""The one place stack configuration is read and validated.

Everything under `infra/` receives a validated `StackConfig`; nothing else calls
`pulumi.Config`. Validation runs before any resource is registered, so a bad
stack file fails `pulumi preview` without touching a host. Every error names the
config key, the bad value and what is allowed.

- `units`: Docker's durations and sizes.
- `models`: the pydantic models, one per config object, `StackConfig` at the top.
- `rules`: the cross-key rules by concern, run in `RULES` order by StackConfig.
- `parse`: raw engine values -> StackConfig (`parse_stack_config`, `load`).
- `stackfile`: writing and reading `Pulumi.<stack>.yaml`.
- `reference`: docs/configuration.md's tables (`python -m infra.config`).

The names below are the package's interface: import them from `infra.config`.
"""

# Stack files only (no model): before the models by name, as the sort wants it.
from infra.config.jobs import job_names

# StackConfig runs the rules; the rules import no model at run time (types only).
from infra.config.models import (
    CONFIG_KEYS,
    IPSEC_OVERHEAD,
    MTU_MAX,
    MTU_MIN,
    VXLAN_OVERHEAD,
    Alerts,
    Code,
    DockerTls,
    Gate,
    Gpus,
    Host,
    Image,
    Jupyter,
    Monitoring,
    Mount,
    Mtu,
    Network,
    Port,
    Preflight,
    Recovery,
    RestartPolicy,
    Ssh,
    SshJump,
    StackConfig,
    Training,
)
from infra.config.parse import ConfigError, load, parse_job, parse_stack_config
from infra.config.reference import (
    README_END,
    README_START,
    config_reference,
    readme_with_reference,
    rules_reference,
    update_docs,
    with_reference,
)
from infra.config.resume import resumes_universal, world_size_problems
from infra.config.rules import RULES, Rule, Severity
from infra.config.rules.code import code_dir
from infra.config.rules.command import DEEPSPEED_ENV_FILE
from infra.config.rules.deepspeed import (
    DS_OPTIMIZERS,
    DS_SCHEDULERS,
    TORCH_OPTIMIZERS,
    TORCH_SCHEDULERS,
    ZERO_STAGES,
)
from infra.config.rules.mounts import RESERVED_TARGETS
from infra.config.rules.network import (
    DOCKER_POOLS,
    MONITORING_ADDRS,
    MONITORING_ADDRS_PER_NODE,
    OVERLAY_ADDRS_PER_NODE,
    SUBNET_OVERHEAD,
)
from infra.config.rules.ports import SWARM_PORTS
from infra.config.rules.training import (
    LAUNCHER_ENV,
    MIN_CHECKPOINT_GRACE_S,
    MIN_SHM_BYTES,
    RDMA_DEBUG_ENV,
    STACK_ENV,
    network_env,
)
from infra.config.ssh import host_ssh
from infra.config.stackfile import stack_file_values, stack_file_yaml
from infra.config.units import duration_seconds, size_bytes

# Re-exported as before the split (bench/handrun.py imports them from here).
from infra.layout import DATA_MOUNT, DEFAULT_SCRIPT, IMAGE_HOME, PROJECT, SECRETS_DIR, SHM_MOUNT

__all__ = [
    "CONFIG_KEYS",
    "DATA_MOUNT",
    "DEEPSPEED_ENV_FILE",
    "DEFAULT_SCRIPT",
    "DOCKER_POOLS",
    "DS_OPTIMIZERS",
    "DS_SCHEDULERS",
    "IMAGE_HOME",
    "IPSEC_OVERHEAD",
    "LAUNCHER_ENV",
    "MIN_CHECKPOINT_GRACE_S",
    "MIN_SHM_BYTES",
    "MONITORING_ADDRS",
    "MONITORING_ADDRS_PER_NODE",
    "MTU_MAX",
    "MTU_MIN",
    "OVERLAY_ADDRS_PER_NODE",
    "PROJECT",
    "RDMA_DEBUG_ENV",
    "README_END",
    "README_START",
    "RESERVED_TARGETS",
    "RULES",
    "SECRETS_DIR",
    "SHM_MOUNT",
    "STACK_ENV",
    "SUBNET_OVERHEAD",
    "SWARM_PORTS",
    "TORCH_OPTIMIZERS",
    "TORCH_SCHEDULERS",
    "VXLAN_OVERHEAD",
    "ZERO_STAGES",
    "Alerts",
    "Code",
    "ConfigError",
    "DockerTls",
    "Gate",
    "Gpus",
    "Host",
    "Image",
    "Jupyter",
    "Monitoring",
    "Mount",
    "Mtu",
    "Network",
    "Port",
    "Preflight",
    "Recovery",
    "RestartPolicy",
    "Rule",
    "Severity",
    "Ssh",
    "SshJump",
    "StackConfig",
    "Training",
    "code_dir",
    "config_reference",
    "duration_seconds",
    "host_ssh",
    "job_names",
    "load",
    "network_env",
    "parse_job",
    "parse_stack_config",
    "readme_with_reference",
    "resumes_universal",
    "rules_reference",
    "size_bytes",
    "stack_file_values",
    "stack_file_yaml",
    "update_docs",
    "with_reference",
    "world_size_problems",
]
