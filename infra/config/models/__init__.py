"""The pydantic models of the stack configuration, leaves first, StackConfig last."""

from infra.config.models.base import MTU_MAX, MTU_MIN, Mtu, Port
from infra.config.models.cluster import (
    IPSEC_OVERHEAD,
    VXLAN_OVERHEAD,
    DockerTls,
    Gpus,
    Host,
    Network,
)
from infra.config.models.job import Code, Image, Mount, Recovery, RestartPolicy, Training
from infra.config.models.services import Alerts, Gate, Jupyter, Monitoring, Preflight
from infra.config.models.ssh import HostSsh, Ssh, SshJump
from infra.config.models.stack import CONFIG_KEYS, StackConfig

__all__ = [
    "CONFIG_KEYS",
    "IPSEC_OVERHEAD",
    "MTU_MAX",
    "MTU_MIN",
    "VXLAN_OVERHEAD",
    "Alerts",
    "Code",
    "DockerTls",
    "Gate",
    "Gpus",
    "Host",
    "HostSsh",
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
    "Ssh",
    "SshJump",
    "StackConfig",
    "Training",
]
