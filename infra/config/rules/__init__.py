"""Every cross-key rule, in the order it runs.

A rule is a free function of the validated models that returns one message per
problem; each message names the key, the value and what is allowed. Errors refuse
the stack (StackConfig's model validator raises them all); warnings show in the
preview (`load()` passes them to pulumi.log.warn). docs/configuration.md's rule
table is generated from `RULES`, one row per rule, with its `summary`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.config.rules import (
    code,
    command,
    hosts,
    image,
    kinds,
    monitoring,
    mounts,
    network,
    placement,
    ports,
    ssh,
    training,
)
from infra.config.rules.dsregistry import DEEPSPEED_RULES
from infra.config.rules.rule import Rule as Rule
from infra.config.rules.rule import Severity as Severity

if TYPE_CHECKING:
    from infra.config.models.stack import StackConfig

RULES: tuple[Rule, ...] = (
    Rule(
        "cluster",
        "error",
        "A job stack names its cluster stack; no other kind has one.",
        kinds.job_names_its_cluster,
    ),
    Rule(
        "manager",
        "error",
        "A job's manager is one of its cluster's managers; no other kind has one.",
        kinds.job_manager_is_a_manager,
    ),
    Rule("hosts", "error", "Each host name and address appears once.", hosts.unique_hosts),
    Rule(
        "hosts[].role",
        "error",
        "1, 3, 5 or 7 managers (an odd number keeps Raft quorum).",
        hosts.manager_quorum,
    ),
    Rule(
        "training.gpus_per_node",
        "error",
        "At most the GPUs every host declares (a job: every host it trains on).",
        training.gpu_capacity,
    ),
    Rule(
        "training.gpu_model",
        "error",
        "Every training host has the GPU model the job asks for.",
        training.gpu_model,
    ),
    Rule(
        "training.nodes",
        "error",
        "No more nodes than active training hosts (spares and drained hosts not counted); "
        "a job: the next rule.",
        training.nodes,
    ),
    Rule(
        "training.nodes",
        "error",
        "A job's ask fits the cluster: at least `nodes` active, non-spare hosts with "
        "`gpus_per_node` GPUs (of `gpu_model`), naming the job and the shortfall.",
        placement.job_fits_cluster,
    ),
    Rule(
        "training.hosts",
        "error",
        "Only in a job: `nodes` active, non-spare cluster hosts, each once, with the GPUs "
        "(and model) the job asks for.",
        placement.named_hosts,
    ),
    Rule(
        "training.placement", "error", "Only with training.hosts.", placement.placement_needs_hosts
    ),
    Rule("training.queued", "error", "Only in a job stack.", placement.queued_only_in_a_job),
    Rule(
        "training.released",
        "error",
        "Only in a job stack, and not with training.queued.",
        placement.released_only_in_a_job,
    ),
    Rule(
        "training.gpu_model",
        "warning",
        "A spare of another GPU model cannot take a task.",
        training.spare_gpu_model,
    ),
    Rule(
        "network.mtu",
        "error",
        "Overlay MTU + VXLAN (+ IPsec when encrypted) fits the underlay MTU.",
        network.mtu_path,
    ),
    Rule(
        "training.master_port",
        "error",
        "Not the tasks' sshd port nor a port Swarm holds.",
        ports.master_port,
    ),
    Rule(
        "hosts[].spare",
        "error",
        "The master is neither spare nor drained; spares need pdsh.",
        hosts.spares,
    ),
    Rule(
        "training.launch_mode",
        "error",
        "pdsh needs at least one worker host.",
        training.workers_for_launcher,
    ),
    Rule(
        "training.recovery.follow_moves",
        "error",
        "Only with launcher deepspeed and launch_mode pdsh.",
        training.follow_moves,
    ),
    Rule(
        "training.fork_server",
        "error",
        "Only with launcher deepspeed.",
        training.fork_server,
    ),
    Rule(
        "training.recovery.follow_master",
        "error",
        "Only in a single stack, with follow_moves, and with an active spare that fits the master.",
        training.follow_master,
    ),
    Rule(
        "hosts[].address",
        "error",
        "An IP address or an RFC 1123 DNS host name.",
        hosts.host_addresses,
    ),
    Rule(
        "hosts[].docker_host",
        "error",
        "One Docker engine endpoint per host.",
        hosts.unique_engines,
    ),
    Rule(
        "ssh, hosts[].ssh",
        "error",
        "Older keys (hosts[].ssh_user/ssh_port, preflight.ssh_*) and ssh:// URLs agree with "
        "the ssh keys; ssh:// hosts need known_hosts_file unless strict: false (then none).",
        ssh.ssh,
    ),
    Rule("hosts[].gpus.uuids", "error", "A GPU UUID belongs to one host.", hosts.unique_gpus),
    Rule(
        "preflight.min_driver_version",
        "error",
        "A dotted numeric version (e.g. 550.54).",
        hosts.driver_version,
    ),
    Rule(
        "network.name",
        "error",
        "A name Swarm accepts: letters, digits, inner '-'/'_', 56 max.",
        network.network_name,
    ),
    Rule(
        "training.code.dir",
        "error",
        "A directory of at most 64 MiB / 10000 files holding training.script.",
        code.code,
    ),
    Rule(
        "training.command",
        "error",
        "Not with training.script or training.args (the command holds both).",
        command.command_alone,
    ),
    Rule(
        "training.command",
        "error",
        "Its launcher (deepspeed, torchrun) is training.launcher's, which may be left unset.",
        command.command_launcher,
    ),
    Rule(
        "training.command",
        "error",
        "With training.code.dir: its script (unless absolute) is a file of the code dir.",
        command.command_script,
    ),
    Rule(
        "training.command",
        "error",
        "With training.code.dir: a `--deepspeed_config` file it names is a JSON object in "
        "the code dir that passes the training.ds_config rules below (named by file and key).",
        command.ds_config_file,
    ),
    Rule(
        "training.secret_env",
        "error",
        "With training.command: variable names a rank may be given, each a secret of the stack.",
        command.secret_env,
    ),
    Rule(
        "training.code.dir",
        "error",
        "With training.command, `.deepspeed_env` in it: KEY=VALUE lines (no blank "
        'line), no space around VALUE nor a bare `"` in it (DeepSpeed exports it in double '
        "quotes), no variable the launcher sets per rank.",
        command.deepspeed_env,
    ),
    Rule(
        "image.repository",
        "error",
        "A Docker repository path: lower-case components.",
        image.repository,
    ),
    Rule(
        "image.registry",
        "error",
        "host[:port], as in a Docker image reference.",
        image.registry,
    ),
    Rule(
        "image.build_args",
        "error",
        "Only ARGs the Dockerfile declares (images/Dockerfile: "
        f"{', '.join(image.IMAGE_ARGS)}) or Docker's predefined proxy args; DSS_UID, if "
        "set, is the uid the tasks run as.",
        image.build_args,
    ),
    Rule(
        "training.data_dir, training.datasets[]",
        "error",
        "Bind sources and targets are absolute.",
        mounts.absolute_paths,
    ),
    Rule(
        "training.datasets[].target",
        "error",
        "Clear of /data, /dev/shm, /run/secrets and the image home, and of each other.",
        mounts.mount_targets,
    ),
    Rule(
        "training.datasets[].source",
        "warning",
        "Not the shared data_dir (or inside it).",
        mounts.dataset_sources,
    ),
    Rule(
        "monitoring.storage",
        "error",
        "With monitoring: an absolute host path or a Docker volume name (not a relative path).",
        mounts.prometheus_storage,
    ),
    Rule("network.subnet", "error", "Clear of the hosts' own addresses.", network.subnet_hosts),
    Rule(
        "network.subnet",
        "error",
        f"Room for {network.OVERLAY_ADDRS_PER_NODE} overlay addresses per host (task, warm-up, "
        "LB); with monitoring one more per host (node exporter) and one for Prometheus.",
        network.subnet_size,
    ),
    Rule(
        "network.subnet",
        "warning",
        "Clear of Docker's ingress and local address pools.",
        network.subnet_pools,
    ),
    Rule(
        "training.env",
        "error",
        "No variable the launcher sets per rank or the stack derives.",
        training.env_owned,
    ),
    Rule(
        "training.env",
        "error",
        f"{', '.join(training.NETWORK_ENV)}: only the value the stack derives from "
        "network.data_plane, hosts[].nic, hosts[].rdma_interface and network.rdma_gid_index.",
        training.env_network,
    ),
    Rule(
        "training.checkpoint_every",
        "warning",
        "At most training.steps.",
        training.checkpoint_cadence,
    ),
    Rule(
        "training.stop_grace_period",
        "warning",
        f"At least {training.MIN_CHECKPOINT_GRACE_S}s.",
        training.grace_fits_checkpoint,
    ),
    Rule(
        "training.shm_size",
        "error",
        f"At least {training.MIN_SHM_BYTES >> 20}m; on one CPU node "
        f"{training.SHM_COMM_BYTES_PER_RANK >> 20}m per rank (DeepSpeed's shm all-reduce).",
        training.shm_size,
    ),
    Rule(
        "monitoring.rank_metrics_port",
        "error",
        "With monitoring: the ranks' ports (one per local rank) clear of the master and "
        "sshd ports and of Swarm's.",
        ports.rank_metrics_ports,
    ),
    Rule(
        "monitoring.prometheus_port",
        "error",
        "With monitoring: not a port Swarm holds nor the SSH port of hosts[0], where "
        "Prometheus runs (in a job too).",
        ports.prometheus_port,
    ),
    Rule(
        "training.sshd_port",
        "error",
        "Not a port Swarm holds (as for training.master_port).",
        ports.sshd_port,
    ),
    Rule(
        "preflight.gate.port",
        "error",
        "With the gate on: clear of the master, sshd and (with monitoring) rank metrics "
        "ports and of Swarm's, all inside the training tasks.",
        ports.gate_port,
    ),
    Rule(
        "jupyter.port",
        "error",
        "With JupyterLab: not a port Swarm holds, the master host's SSH port nor (with "
        "monitoring) Prometheus' port, all on the master host.",
        ports.jupyter_port,
    ),
    Rule(
        "network.data_plane",
        "error",
        "With 'host': the training tasks' ports (sshd, rendezvous, rank metrics) clear of "
        "the hosts' SSH ports and of what the master publishes.",
        ports.host_data_plane_ports,
    ),
    Rule(
        "hosts[].nic",
        "error",
        "With network.data_plane 'host': one interface name on every active host.",
        network.data_plane_nic,
    ),
    Rule(
        "network.data_plane",
        "error",
        "'host' wherever a host declares an rdma_interface (RDMA cannot reach the overlay).",
        network.rdma_needs_host,
    ),
    Rule(
        "network.rdma_gid_index",
        "error",
        "Only with an rdma_interface on some host.",
        network.rdma_gid_index,
    ),
    Rule(
        "monitoring.enabled",
        "error",
        "The master host (hosts[0]), where Prometheus runs, is a manager.",
        monitoring.prometheus_on_a_manager,
    ),
    Rule(
        "monitoring.evaluation_interval",
        "warning",
        "At most the scrape interval (alerts would lag the data).",
        monitoring.evaluation_interval,
    ),
    *DEEPSPEED_RULES,
)


def findings(cfg: StackConfig, severity: Severity) -> list[str]:
    """The messages of every rule of one severity, in registry order."""
    return [msg for r in RULES if r.severity == severity for msg in r.check(cfg)]
