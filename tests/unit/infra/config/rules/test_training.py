"""infra.config.rules.training: each rule with its exact message."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import parse_stack_config
from infra.render.labels import training_env
from tests.unit.infra.config.checks import problems, warnings_of
from tests.unit.infra.samples import host

pytestmark = pytest.mark.unit


def test_gpus_per_node_exceeds_host(raw: dict[str, Any]) -> None:
    """Asking more GPUs per node than a host declares names that host."""
    raw["hosts"][2]["gpus"]["count"] = 4
    assert problems(raw) == [
        "training.gpus_per_node: 8 is more than host 'gpu-03' declares "
        "(hosts[2].gpus.count=4); allowed: 0..4"
    ]


def test_zero_workers_with_multi_node_launcher() -> None:
    """pdsh with a single host (zero workers) is refused; no_ssh is the way out."""
    raw = {
        "hosts": [host(1, "manager")],
        "training": {"launch_mode": "pdsh"},
        "ssh": {"known_hosts_file": "~/.ssh/known_hosts"},
    }
    assert problems(raw) == [
        "training.launch_mode: 'pdsh' is a multi-node launcher but the stack has zero workers "
        "(one host); allowed: add worker hosts, or launch_mode 'no_ssh'"
    ]


@pytest.mark.parametrize("name", ["RANK", "LOCAL_WORLD_SIZE", "CROSS_RANK", "NODE_RANK"])
def test_env_launcher_owned(raw: dict[str, Any], name: str) -> None:
    """A variable the launcher sets per rank is refused in training.env."""
    raw["training"]["env"] = {name: "0"}
    assert problems(raw) == [
        f"training.env: {name} is set per rank by the launcher; allowed: any variable except "
        "RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NODE_RANK, "
        "GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, CROSS_RANK, CROSS_SIZE, "
        "CUDA_VISIBLE_DEVICES, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, "
        "TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_USE_AGENT_STORE"
    ]


def test_env_stack_owned(raw: dict[str, Any]) -> None:
    """A variable the stack derives from another key is refused, naming that key."""
    raw["training"]["env"] = {"DSS_SSH_PORT": "22"}
    assert problems(raw) == [
        "training.env: DSS_SSH_PORT is derived from training.sshd_port; allowed: set that "
        "key instead"
    ]


def test_metrics_env_is_derived(raw: dict[str, Any]) -> None:
    """DSS_METRICS_PORT in training.env is refused: monitoring.rank_metrics_port sets it."""
    raw["training"]["env"] = {"DSS_METRICS_PORT": "9999"}
    assert problems(raw) == [
        "training.env: DSS_METRICS_PORT is derived from monitoring.rank_metrics_port; allowed: "
        "set that key instead"
    ]


def test_checkpoint_after_last_step_warns(raw: dict[str, Any]) -> None:
    """checkpoint_every above steps is a warning: only the final checkpoint is written."""
    raw["training"].update(steps=100, checkpoint_every=500)
    assert warnings_of(raw) == [
        "training.checkpoint_every: 500 > training.steps 100: the only checkpoint is the final "
        "one; a failure restarts from step 0"
    ]


def test_short_grace_period_warns(raw: dict[str, Any]) -> None:
    """A stop grace period under 30s is a warning."""
    raw["training"]["stop_grace_period"] = "10s"
    assert warnings_of(raw) == [
        "training.stop_grace_period: 10s leaves little time for the final checkpoint before "
        "SIGKILL; suggested: at least 30s"
    ]


def test_nccl_socket_ifname_overridden(raw: dict[str, Any]) -> None:
    """NCCL_SOCKET_IFNAME other than the overlay's interface is refused."""
    raw["training"]["env"] = {"NCCL_SOCKET_IFNAME": "ib0"}
    assert problems(raw) == [
        "training.env: NCCL_SOCKET_IFNAME='ib0' overrides 'eth0', derived from "
        "network.data_plane (the overlay's eth0, or hosts[].nic on host); allowed: 'eth0' or "
        "unset (set that key instead)"
    ]


def test_network_env_with_the_derived_value_passes(raw: dict[str, Any]) -> None:
    """Repeating the value the stack derives (as Pulumi.prod.yaml does) is accepted."""
    raw["training"]["env"] = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}
    assert parse_stack_config(raw).training.env["NCCL_SOCKET_IFNAME"] == "eth0"


def test_nccl_ib_hca_without_rdma(raw: dict[str, Any]) -> None:
    """NCCL_IB_HCA with no hosts[].rdma_interface (the stack disables IB) is refused."""
    raw["training"]["env"] = {"NCCL_IB_HCA": "mlx5_0"}
    assert problems(raw) == [
        "training.env: NCCL_IB_HCA='mlx5_0' contradicts hosts[].rdma_interface, from which "
        "the stack derives no NCCL_IB_HCA; allowed: unset (set that key instead)"
    ]


def test_nccl_ib_disable_with_rdma(raw: dict[str, Any]) -> None:
    """NCCL_IB_DISABLE while hosts declare RDMA devices is refused."""
    for h in raw["hosts"]:
        h["rdma_interface"] = "mlx5_0"
    raw["network"]["data_plane"] = "host"
    raw["training"]["env"] = {"NCCL_IB_DISABLE": "1"}
    assert problems(raw) == [
        "training.env: NCCL_IB_DISABLE='1' contradicts hosts[].rdma_interface (set on no "
        "host), from which the stack derives no NCCL_IB_DISABLE; allowed: unset (set that key "
        "instead)"
    ]


@pytest.mark.parametrize("rdma", [None, "mlx5_0"])
def test_network_env_is_what_render_derives(raw: dict[str, Any], rdma: str | None) -> None:
    """The NCCL/gloo values the rule allows are the ones training_env sets."""
    from infra.config.rules.training import NETWORK_ENV, network_env

    for h in raw["hosts"]:
        h["rdma_interface"] = rdma
    raw["network"]["data_plane"] = "host" if rdma else "overlay"
    cfg = parse_stack_config(raw)
    env = training_env(cfg)
    assert network_env(cfg.network, cfg.hosts) == {k: env[k] for k in NETWORK_ENV if k in env}


def test_every_derived_variable_is_guarded(raw: dict[str, Any]) -> None:
    """Every variable training_env derives is in STACK_ENV (refused or pinned)."""
    from infra.config import RDMA_DEBUG_ENV, STACK_ENV

    raw["hosts"][0]["rdma_interface"] = "mlx5_0"
    raw["network"].update(data_plane="host", rdma_gid_index=3)
    raw["monitoring"] = {"enabled": True}
    env = training_env(parse_stack_config(raw))
    # RDMA_DEBUG_ENV: defaults a stack may override (test_rdma_debug_env_is_overridable).
    assert set(env) - set(RDMA_DEBUG_ENV) <= set(STACK_ENV), set(env) - set(STACK_ENV)


def test_rdma_debug_env_is_overridable(raw: dict[str, Any]) -> None:
    """NCCL_DEBUG, a default with RDMA, is the stack's own to set."""
    raw["hosts"][0]["rdma_interface"] = "mlx5_0"
    raw["network"]["data_plane"] = "host"
    raw["training"]["env"] = {"NCCL_DEBUG": "WARN"}
    assert training_env(parse_stack_config(raw))["NCCL_DEBUG"] == "WARN"


def test_nccl_net_is_pinned_with_rdma(raw: dict[str, Any]) -> None:
    """NCCL_NET=Socket with RDMA declared (the silent slow path) is refused."""
    raw["hosts"][0]["rdma_interface"] = "mlx5_0"
    raw["network"]["data_plane"] = "host"
    raw["training"]["env"] = {"NCCL_NET": "Socket"}
    assert problems(raw) == [
        "training.env: NCCL_NET='Socket' overrides 'IB', derived from hosts[].rdma_interface "
        "(IB: never a silent fallback to sockets); allowed: 'IB' or unset (set that key instead)"
    ]


def test_gid_index_in_env_is_refused_without_the_key(raw: dict[str, Any]) -> None:
    """NCCL_IB_GID_INDEX in training.env points to network.rdma_gid_index."""
    raw["hosts"][0]["rdma_interface"] = "mlx5_0"
    raw["network"]["data_plane"] = "host"
    raw["training"]["env"] = {"NCCL_IB_GID_INDEX": "3"}
    assert problems(raw) == [
        "training.env: NCCL_IB_GID_INDEX='3' contradicts network.rdma_gid_index, from which "
        "the stack derives no NCCL_IB_GID_INDEX; allowed: unset (set that key instead)"
    ]


def test_shm_below_docker_default(raw: dict[str, Any]) -> None:
    """A /dev/shm smaller than Docker's own 64 MiB is refused."""
    raw["training"]["shm_size"] = "32m"
    assert problems(raw) == [
        "training.shm_size: '32m' is 32 MiB, less than Docker's own /dev/shm; allowed: at "
        "least 64m (NCCL's shared-memory transport and the DataLoader's workers need more, not "
        "less)"
    ]


def test_shm_for_one_cpu_node(raw: dict[str, Any]) -> None:
    """One CPU node needs DeepSpeed's shm all-reduce workspace per rank in /dev/shm."""
    raw["hosts"] = [host(1, "manager")]
    raw["training"] = {"cpu_only": True, "procs_per_node": 4, "launch_mode": "no_ssh"}
    raw["training"]["shm_size"] = "256m"
    assert problems(raw) == [
        "training.shm_size: '256m' is 256 MiB but DeepSpeed's CPU all-reduce maps 67 MiB per "
        "rank in /dev/shm when all 4 ranks are on one node; allowed: at least 268m"
    ]


def test_shm_for_cpu_nodes_across_hosts(raw: dict[str, Any]) -> None:
    """Across several CPU nodes DeepSpeed's shm all-reduce is off: 64m is enough."""
    raw["training"] = {"cpu_only": True, "procs_per_node": 4, "shm_size": "64m"}
    assert parse_stack_config(raw).training.shm_size == "64m"


@pytest.mark.parametrize(
    ("training", "named"),
    [({"launch_mode": "no_ssh"}, "'deepspeed' and launch_mode 'no_ssh'"),
     ({"launcher": "torchrun"}, "'torchrun' and launch_mode 'pdsh'")],
)  # fmt: skip
def test_follow_moves_needs_the_pdsh_launch(
    raw: dict[str, Any], training: dict[str, Any], named: str
) -> None:
    """follow_moves with per-node launchers is refused, naming launcher and mode."""
    raw["training"].update(training, recovery={"follow_moves": True})
    found = [p for p in problems(raw) if p.startswith("training.recovery.follow_moves")]
    assert found == [
        f"training.recovery.follow_moves: true with launcher {named}; allowed: "
        "follow_moves only with launcher 'deepspeed' and launch_mode 'pdsh' (the one "
        "launcher on the master follows the tasks; per-node launchers die with their "
        "host's task), or follow_moves false"
    ]


def test_follow_moves_with_pdsh_is_accepted(raw: dict[str, Any]) -> None:
    """The pdsh launch may follow its tasks."""
    raw["training"]["recovery"] = {"follow_moves": True}
    assert parse_stack_config(raw).training.recovery.follow_moves is True


def test_gpu_model_every_training_host_lacks(raw: dict[str, Any]) -> None:
    """A GPU model a training host does not have is refused, naming the host."""
    for h in raw["hosts"]:
        h["gpus"]["model"] = "H100"
    raw["hosts"][1]["gpus"]["model"] = "A100"
    raw["training"] = {**raw.get("training", {}), "gpu_model": "H100"}
    assert problems(raw) == [
        "training.gpu_model: 'H100' but training host 'gpu-02' has hosts[1].gpus.model="
        "'A100'; allowed: the model of every training host (A100, H100)"
    ]


def test_spare_of_another_gpu_model_warns(raw: dict[str, Any]) -> None:
    """A spare of another GPU model is a warning: no task can move onto it."""
    for h in raw["hosts"]:
        h["gpus"]["model"] = "H100"
    raw["hosts"].append({**host(9), "spare": True, "gpus": {"count": 8, "model": "A100"}})
    raw["training"] = {**raw.get("training", {}), "gpu_model": "H100"}
    assert warnings_of(raw) == [
        "hosts[3]: spare 'gpu-09' has gpus.model='A100', not training.gpu_model 'H100': no "
        "task can move onto it"
    ]


def test_gpu_model_pins_the_placement() -> None:
    """With a GPU model, the tasks' placement also needs the node's GPU model label."""
    from infra.render.labels import placement_constraints

    assert placement_constraints("worker") == ["node.labels.dss.role==worker"]
    assert placement_constraints("worker", "H100") == [
        "node.labels.dss.role==worker",
        "node.labels.dss.gpu-model==H100",
    ]


def test_nodes_more_than_the_training_hosts(raw: dict[str, Any]) -> None:
    """More nodes than active training hosts is refused, naming them; a spare and a
    drained host do not count."""
    raw["hosts"][2]["availability"] = "drain"
    raw["hosts"].append({**host(9), "spare": True})
    raw["training"] = {**raw.get("training", {}), "nodes": 3}
    assert problems(raw) == [
        "training.nodes: 3 but the stack has 2 active training host(s) (gpu-01, gpu-02); "
        "allowed: 1-2"
    ]


def test_nodes_takes_the_first_training_hosts(raw: dict[str, Any]) -> None:
    """`nodes` keeps the first training hosts in `hosts` order (the master first); the
    rest are left out, and the world size follows."""
    raw["hosts"].append({**host(9), "spare": True})
    raw["training"] = {**raw.get("training", {}), "nodes": 2}
    cfg = parse_stack_config(raw)
    assert [h.name for h in cfg.training_hosts] == ["gpu-01", "gpu-02"]
    assert [h.name for h in cfg.unused_hosts] == ["gpu-03"]
    assert [h.name for h in cfg.workers] == ["gpu-02"]
    assert [h.name for h in cfg.spares] == ["gpu-09"]
    assert cfg.world_size == 2 * cfg.training.ranks_per_node


def test_nodes_unset_uses_every_training_host(raw: dict[str, Any]) -> None:
    """Without `nodes`, every active training host trains and none is left out."""
    cfg = parse_stack_config(raw)
    assert len(cfg.training_hosts) == 3 and cfg.unused_hosts == []


def test_follow_master_needs_follow_moves(raw: dict[str, Any]) -> None:
    """follow_master without follow_moves is refused, naming both keys."""
    raw["hosts"].append({**host(9), "spare": True})
    raw["training"]["recovery"] = {"follow_master": True}
    found = [p for p in problems(raw) if p.startswith("training.recovery.follow_master")]
    assert found == [
        "training.recovery.follow_master: true with follow_moves false; allowed: "
        "follow_master with follow_moves true (the master's supervisor follows the "
        "workers as before), or follow_master false"
    ]


def test_follow_master_needs_a_spare_that_fits_the_master(raw: dict[str, Any]) -> None:
    """follow_master with no spare that has the master's GPUs is refused."""
    for h in raw["hosts"]:
        h["gpus"]["model"] = "H100"
    raw["hosts"].append({**host(9), "spare": True, "gpus": {"count": 8, "model": "A100"}})
    raw["training"].update(gpu_model="H100", recovery={"follow_moves": True, "follow_master": True})
    assert problems(raw) == [
        "training.recovery.follow_master: true but no active spare host can take the "
        "master (8 GPUs of model 'H100'); allowed: follow_master with such a host "
        "(hosts[].spare: true), or false"
    ]


def test_follow_master_with_a_spare_is_accepted(raw: dict[str, Any]) -> None:
    """A single stack that follows its workers and has a fitting spare may follow its master."""
    raw["hosts"].append({**host(9), "spare": True})
    raw["training"]["recovery"] = {"follow_moves": True, "follow_master": True}
    assert parse_stack_config(raw).training.recovery.follow_master is True


def test_follow_master_only_in_a_single_stack(raw: dict[str, Any]) -> None:
    """In a job stack (whose master is the cluster's master host) it is refused."""
    from infra.config.rules.training import follow_master

    raw["hosts"].append({**host(9), "spare": True})
    raw["training"]["recovery"] = {"follow_moves": True, "follow_master": True}
    job = parse_stack_config(raw).model_copy(update={"kind": "job"})
    assert follow_master(job) == [
        "training.recovery.follow_master: true in a 'job' stack; allowed: only in a single "
        "stack (a job's master shares the cluster's master host), or false"
    ]


def test_follow_master_places_the_master_by_its_label() -> None:
    """With follow_master the master goes where dss.master_ok is; the workers keep their role."""
    from infra.render.labels import placement_constraints

    assert placement_constraints("master", "H100", master_moves=True) == [
        "node.labels.dss.master_ok==true",
        "node.labels.dss.gpu-model==H100",
    ]
    assert placement_constraints("worker", master_moves=True) == ["node.labels.dss.role==worker"]
    assert placement_constraints("master") == ["node.labels.dss.role==master"]


def test_fork_server_needs_the_deepspeed_launcher(raw: dict[str, Any]) -> None:
    """fork_server with torchrun is refused, naming the key, the launcher and what is
    allowed."""
    raw["training"].update(fork_server=True, launcher="torchrun")
    found = [p for p in problems(raw) if p.startswith("training.fork_server")]
    assert found == [
        "training.fork_server: true with launcher 'torchrun'; allowed: fork_server only "
        "with launcher 'deepspeed' (its runner and launchers start each process as "
        "`python -m` or `python <script>`, which the fork server serves), or false"
    ]


def test_fork_server_with_deepspeed_is_accepted(raw: dict[str, Any]) -> None:
    """fork_server with the deepspeed launcher (pdsh or no_ssh) is accepted."""
    for mode in ("pdsh", "no_ssh"):
        raw["training"].update(fork_server=True, launch_mode=mode)
        assert parse_stack_config(raw).training.fork_server is True
