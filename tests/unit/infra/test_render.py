"""infra.render: hostfiles, rank maps, launch lines and scripts (golden files)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from infra.config import STACK_ENV, parse_stack_config
from infra.layout import IMAGE_PYTHON
from infra.render.digest import tree_hash
from infra.render.labels import training_env
from infra.render.launch import (
    RosterEntry,
    duplicate_gpus,
    launch_argv,
    launch_script,
    order_roster,
    rank_map,
    render_hostfile,
    stop_script,
)
from infra.render.run import follow_path, forkserver_path, supervisor_prefix
from infra.render.specs import docker_duration
from tests.unit.golden import check_golden

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, text: str) -> None:
    """Compare with golden/<name>; DSS_UPDATE_GOLDEN=1 rewrites it."""
    check_golden(GOLDEN / name, text)


def entry(service: str, slot: int, node: str, address: str, gpus: list[str]) -> RosterEntry:
    return {
        "service": service,
        "slot": slot,
        "task_id": f"t-{node}",
        "node": node,
        "address": address,
        "container_id": f"c-{node}",
        "gpu_uuids": gpus,
    }


UNORDERED = [
    entry("ds-worker", 2, "gpu-03", "10.0.1.5", ["GPU-c", "GPU-d"]),
    entry("ds-master", 1, "gpu-01", "10.0.1.3", ["GPU-a"]),
    entry("ds-worker", 1, "gpu-02", "10.0.1.4", ["GPU-b"]),
]


ROSTER = order_roster(UNORDERED)


def test_order_master_first_then_workers_by_node() -> None:
    """Node rank order: the master task, then workers by node name."""
    assert [e["node"] for e in ROSTER] == ["gpu-01", "gpu-02", "gpu-03"]


def test_hostfile_master_first_then_workers_by_node() -> None:
    """The hostfile lists the master first, workers by node name, with slots."""
    assert render_hostfile(ROSTER, 8) == ("10.0.1.3 slots=8\n10.0.1.4 slots=8\n10.0.1.5 slots=8\n")


def test_rank_map_assigns_contiguous_ranks() -> None:
    """Node rank k holds global ranks k*slots .. k*slots+slots-1."""
    m = rank_map(ROSTER, 2)
    assert [(r["node"], r["ranks"]) for r in m] == [
        ("gpu-01", [0, 1]),
        ("gpu-02", [2, 3]),
        ("gpu-03", [4, 5]),
    ]


def test_rank_map_without_models_names_no_model() -> None:
    """A stack that names no hosts gets the rank map's keys as before, no `gpu_model`."""
    assert all("gpu_model" not in r for r in rank_map(ROSTER, 2)), rank_map(ROSTER, 2)


def test_rank_map_with_models_gives_each_rank_its_hosts_model() -> None:
    """With the hosts' models, each entry names its node's; empty where the host sets
    none or no host has the node's name."""
    m = rank_map(ROSTER, 2, {"gpu-01": "H100-SXM", "gpu-02": ""})
    assert [(r["node"], r["gpu_model"]) for r in m] == [
        ("gpu-01", "H100-SXM"),
        ("gpu-02", ""),
        ("gpu-03", ""),
    ]


def test_duplicate_gpus_found() -> None:
    """A GPU UUID held by two tasks is reported with both holders."""
    roster = [*ROSTER, entry("ds-worker", 3, "gpu-04", "10.0.1.6", ["GPU-a"])]
    assert duplicate_gpus(roster) == {"GPU-a": ["ds-master.1@gpu-01", "ds-worker.3@gpu-04"]}


def test_no_duplicate_gpus() -> None:
    """Distinct GPUs per task report nothing."""
    assert duplicate_gpus(ROSTER) == {}


def test_launch_argv_pdsh(raw: dict[str, Any]) -> None:
    """pdsh: one deepspeed launch with the hostfile, master address and node count,
    then the script alone: its settings are the run's DSS_* variables."""
    cfg = parse_stack_config(raw)
    assert launch_argv(cfg, "10.0.1.3", 3) == [
        "deepspeed",
        "--hostfile=/data/.dss/run/hostfile",
        "--master_addr=10.0.1.3",
        "--master_port=29500",
        "--launcher=pdsh",
        "--ssh_port=2222",
        "--num_nodes=3",
        "/opt/dss/train.py",
    ]


def test_launch_argv_ends_with_the_scripts_own_arguments(raw: dict[str, Any]) -> None:
    """training.args follow the script, and nothing the script did not ask for."""
    raw["training"]["args"] = ["--step-sleep", "0.5"]
    argv = launch_argv(parse_stack_config(raw), "10.0.1.3", 3)
    assert argv[-3:] == ["/opt/dss/train.py", "--step-sleep", "0.5"]


def test_launch_argv_no_ssh_has_node_rank(raw: dict[str, Any]) -> None:
    """SSH-less deepspeed gets --no_ssh and this node's rank."""
    raw["training"]["launch_mode"] = "no_ssh"
    argv = launch_argv(parse_stack_config(raw), "10.0.1.3", 3, node_rank=2)
    assert argv[4:6] == ["--no_ssh", "--node_rank=2"]


def test_launch_argv_torchrun(raw: dict[str, Any]) -> None:
    """torchrun gets nnodes, procs per node (one per GPU) and its node rank."""
    raw["training"]["launcher"] = "torchrun"
    argv = launch_argv(parse_stack_config(raw), "10.0.1.3", 3, node_rank=1)
    assert argv[:6] == [
        "torchrun",
        "--nnodes=3",
        "--nproc_per_node=8",
        "--node_rank=1",
        "--master_addr=10.0.1.3",
        "--master_port=29500",
    ]


def test_launch_argv_fork_server_runs_the_runner_through_the_client(raw: dict[str, Any]) -> None:
    """fork_server: the deepspeed runner as `<client> -u -m deepspeed.launcher.runner`,
    the rest of the command line as without it."""
    plain = launch_argv(parse_stack_config(raw), "10.0.1.3", 3)
    raw["training"]["fork_server"] = True
    argv = launch_argv(parse_stack_config(raw), "10.0.1.3", 3)
    client = forkserver_path("run")
    assert argv == [client, "-u", "-m", "deepspeed.launcher.runner", *plain[1:]]


def test_launch_script_writes_the_fork_servers_client_executable(raw: dict[str, Any]) -> None:
    """With the fork server the launch writes its client beside the hostfile, mode 755,
    replaced whole; without it, no such file."""
    raw["training"]["fork_server"] = True
    cfg = parse_stack_config(raw)
    common: dict[str, Any] = {
        "service": "ds-master", "argv": launch_argv(cfg, "10.0.1.3", 3), "run_name": "run",
        "hostfile": render_hostfile(ROSTER, 8), "ds_config": None,
    }  # fmt: skip
    client = forkserver_path("run")
    with_it = launch_script(**common, fork_server=True)
    assert f"cat > {client}.new && chmod 755 {client}.new && mv {client}.new {client}" in with_it
    assert "#!/opt/venv/bin/python -S" in with_it
    assert client not in launch_script(**common).split("if docker exec")[0]


def test_launch_script_golden(raw: dict[str, Any]) -> None:
    """The launch script run on the master host matches its golden file."""
    cfg = parse_stack_config(raw)
    script = launch_script(
        service="ds-master",
        argv=launch_argv(cfg, "10.0.1.3", 3),
        run_name="run",
        hostfile=render_hostfile(ROSTER, 8),
        ds_config='{"train_micro_batch_size_per_gpu":1}',
    )
    golden("launch_pdsh.sh", script)


def test_stop_script_golden() -> None:
    """The stop script (SIGTERM, wait for the checkpoint) matches its golden file."""
    stop = stop_script(service="ds-master", grace_seconds=120, pattern="/opt/dss/train.py")
    golden("stop.sh", stop)


def test_training_env_cpu_and_no_rdma(dev_raw: dict[str, Any]) -> None:
    """The lab's tasks train on CPU and tell NCCL there is no InfiniBand."""
    env = training_env(parse_stack_config(dev_raw))
    assert env["DS_ACCELERATOR"] == "cpu" and env["NCCL_IB_DISABLE"] == "1"


def rdma_raw(raw: dict[str, Any], gid_index: int | None = None) -> dict[str, Any]:
    """`raw` on the host data plane with mlx5_0 on every host."""
    for h in raw["hosts"]:
        h["rdma_interface"] = "mlx5_0"
    raw["network"]["data_plane"] = "host"
    if gid_index is not None:
        raw["network"]["rdma_gid_index"] = gid_index
    return raw


def test_training_env_rdma(raw: dict[str, Any]) -> None:
    """RoCE hosts set NCCL_IB_HCA to their devices; user env wins last."""
    rdma_raw(raw)["training"]["env"] = {"NCCL_DEBUG": "WARN"}
    env = training_env(parse_stack_config(raw))
    assert env["NCCL_IB_HCA"] == "mlx5_0" and "NCCL_IB_DISABLE" not in env
    assert env["NCCL_DEBUG"] == "WARN"


def test_training_env_rdma_is_ib_only(raw: dict[str, Any]) -> None:
    """With RDMA declared NCCL may use IB only (no silent socket fallback), the runtime
    injects the RDMA devices, and NCCL logs its transport choice by default."""
    env = training_env(parse_stack_config(rdma_raw(raw, gid_index=3)))
    assert {k: env[k] for k in ("NCCL_NET", "NVIDIA_MOFED", "NCCL_IB_GID_INDEX")} == {
        "NCCL_NET": "IB",
        "NVIDIA_MOFED": "enabled",
        "NCCL_IB_GID_INDEX": "3",
    }
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


def test_training_env_host_data_plane_binds_the_hosts_nic(raw: dict[str, Any]) -> None:
    """On the host data plane NCCL binds exactly the hosts' nic, gloo the same name."""
    raw["network"]["data_plane"] = "host"
    for h in raw["hosts"]:
        h["nic"] = "ens1f0np0"
    env = training_env(parse_stack_config(raw))
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("=ens1f0np0", "ens1f0np0")


def test_training_env_overlay_binds_eth0(raw: dict[str, Any]) -> None:
    """On the overlay both bind the task's overlay interface, whatever the hosts' nic."""
    for h in raw["hosts"]:
        h["nic"] = "ens1f0np0"
    env = training_env(parse_stack_config(raw))
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("eth0", "eth0")


def test_tree_hash_changes_with_content(tmp_path: Path) -> None:
    """A one-byte change in the build context changes the image tag."""
    (tmp_path / "train.py").write_text("print(1)\n")
    before = tree_hash(tmp_path)
    (tmp_path / "train.py").write_text("print(2)\n")
    assert tree_hash(tmp_path) != before


def test_stack_env_is_refused_in_training_env(raw: dict[str, Any]) -> None:
    """Every DSS_* variable training_env derives is one config refuses in training.env."""
    env = training_env(parse_stack_config(raw))
    derived = {k for k in env if k.startswith("DSS_")}
    assert derived <= set(STACK_ENV), f"not guarded by config.STACK_ENV: {derived - set(STACK_ENV)}"


@pytest.mark.parametrize(
    ("given", "read_back"),
    [
        ("10s", "10s"),
        ("60s", "1m"),
        ("90s", "1m30s"),
        ("120s", "2m"),
        ("2m", "2m"),
        ("3600s", "1h"),
        ("1h", "1h"),
        ("3660s", "1h1m"),
        ("3601s", "1h0m1s"),
        ("0s", "0s"),
    ],
)
def test_docker_duration_as_swarm_reads_it(given: str, read_back: str) -> None:
    """Durations are spelled as the docker provider reads them back (no perpetual diff)."""
    assert docker_duration(given) == read_back


def test_transport_summary_of_each_data_plane(raw: dict[str, Any]) -> None:
    """Overlay, host without RDMA and host with RDMA each say what the ranks use."""
    from infra.render.labels import transport_summary

    assert transport_summary(parse_stack_config(raw)).startswith("TCP sockets over the VXLAN")
    raw["network"]["data_plane"] = "host"
    assert transport_summary(parse_stack_config(raw)).startswith(
        "TCP sockets on the hosts' own network (eth0)"
    )
    assert "fails the launch" in transport_summary(parse_stack_config(rdma_raw(raw)))


def test_host_data_plane_launch_forgets_earlier_host_keys() -> None:
    """On the host data plane a new launch forgets the host keys earlier tasks showed at
    the same addresses, after the keep-if-running check and before the launcher starts;
    on the overlay the script has no such line."""
    kw: dict[str, Any] = dict(
        service="ds-master", argv=["deepspeed"], run_name="r", hostfile="h", ds_config=None
    )
    forget = "docker exec -u 1000 \"$ctr\" sh -c 'rm -f ~/.ssh/known_hosts'"
    host = launch_script(**kw, forget_host_keys=True)
    assert host.index("already running; kept") < host.index(forget) < host.index("exec deepspeed")
    assert forget not in launch_script(**kw)


def test_stop_script_with_follow_kills_the_supervisor_before_training(tmp_path: Path) -> None:
    """With follow_moves the stop kills the run's supervisor and follow program (which
    may be waiting in a rebuild, where a relaunch would keep it as the run) before it
    asks training to checkpoint and exit; without it the script is as deployed."""
    calls = tmp_path / "calls"
    docker = tmp_path / "docker"
    # `ps -q` names a container; `pgrep` finds nothing left; every call is logged.
    docker.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = ps ] && echo c1\n'
        '[ "$3" = pgrep ] && exit 1\nexit 0\n'
    )
    docker.chmod(0o755)
    stop = stop_script(service="ds-master", grace_seconds=5, pattern="/opt/dss/train.py",
                       run_name="r", follow=True)  # fmt: skip
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(["sh", "-c", stop], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    pkills = [line for line in calls.read_text().splitlines() if " pkill " in line]
    assert pkills == [
        f"exec c1 pkill -KILL -f {supervisor_prefix('r')}",
        f"exec c1 pkill -KILL -f {follow_path('r')}",
        "exec c1 pkill -TERM -f /opt/dss/train.py",
    ]
    plain = stop_script(service="ds-master", grace_seconds=5, pattern="p", run_name="r")
    assert "supervise" not in plain and "follow.py" not in plain


LOCAL_DOCKER = """#!/bin/sh
# `docker` run on this machine: `ps` names container c1; `exec [-i] [-u U] [-e K=V] c1
# CMD...` runs CMD here, with the image's python as this one.
[ "$1" = ps ] && {{ echo c1; exit 0; }}
shift
while :; do
  case "$1" in
    -i|-d) shift ;;
    -u) shift 2 ;;
    -e) export "$2"; shift 2 ;;
    *) break ;;
  esac
done
shift
[ "$1" = {image_python} ] && {{ shift; exec {python} "$@"; }}
exec "$@"
"""

RANK = """import pathlib, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
pathlib.Path(sys.argv[1] + ".started").touch()
while not stop:
    time.sleep(0.05)
time.sleep(1)  # the step it was in, then the all-reduce that agrees to stop
print("step done; saving", flush=True)  # through the launcher's pipe, as over pdsh
pathlib.Path(sys.argv[1]).write_text("saved")
"""

LAUNCHER = """import signal, subprocess, sys
rank = subprocess.Popen([sys.executable, "-u", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE)
def down(*_):  # as DeepSpeed's runner: kill pdsh, and the pipe every rank writes to
    rank.stdout.close()
    sys.exit(1)
signal.signal(signal.SIGTERM, down)
for line in rank.stdout:
    sys.stdout.buffer.write(line)
sys.exit(rank.wait())
"""


def test_stop_script_lets_the_ranks_save_before_the_launchers_go(tmp_path: Path) -> None:
    """The stop signals the ranks, not the launcher that holds their output: the rank
    prints and saves its checkpoint, the launcher ends by itself, the stop says so."""
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(LOCAL_DOCKER.format(image_python=IMAGE_PYTHON, python=sys.executable))
    docker.chmod(0o755)
    script, saved = tmp_path / "train.py", tmp_path / "ckpt"
    script.write_text(RANK)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    launcher = subprocess.Popen(
        [sys.executable, "-u", str(tmp_path / "launcher.py"), str(script), str(saved)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not Path(f"{saved}.started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        # From a file: `sh -c` would name the script, and `pgrep` here would find it.
        stop = tmp_path / "stop.sh"
        stop.write_text(stop_script(service="ds-master", grace_seconds=30, pattern=str(script)))
        env = {**os.environ, "PATH": f"{docker.parent}:{os.environ['PATH']}"}
        proc = subprocess.run(["sh", str(stop)], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert saved.read_text() == "saved", "the rank was stopped before it saved"
        assert "SIGTERM to 1 rank(s)" in proc.stdout and "training exited" in proc.stdout
        assert launcher.wait(timeout=10) == 0, "the launcher did not end with its rank"
    finally:
        launcher.kill()
        launcher.wait()


def _fake_docker_without_tasks(tmp_path: Path) -> dict[str, str]:
    """A `docker` on PATH that lists no container (the master task is not here)."""
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text("#!/bin/sh\nexit 0\n")
    docker.chmod(0o755)
    return {**os.environ, "PATH": f"{docker.parent}:{os.environ['PATH']}"}


def test_stop_of_a_run_taken_over_elsewhere_sets_the_marker_and_waits(tmp_path: Path) -> None:
    """follow_master: with no master task on this host and the run's active file on
    the shared data dir (a task elsewhere took the run over), the stop sets the marker
    there and waits until that supervisor released the run."""
    run_dir = tmp_path / "data" / ".dss" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "active").write_text("task-b spec 1\n")
    (run_dir / "lease").touch()  # its supervisor's watch runs
    stop = stop_script(service="ds-master", grace_seconds=5, pattern="p", run_name="r",
                       follow=True, takeover=True, data_dir=str(tmp_path / "data"))  # fmt: skip
    proc = subprocess.Popen(["sh", "-c", stop], env=_fake_docker_without_tasks(tmp_path),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not (run_dir / "stop").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (run_dir / "stop").exists(), "no stop marker on the data dir"
        assert proc.poll() is None, "the stop did not wait for the supervisor"
        (run_dir / "active").unlink()  # the supervisor there ended and released the run
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "training exited" in out


def test_stop_with_no_task_and_no_run_elsewhere_stops_nothing(tmp_path: Path) -> None:
    """follow_master, no master task here and no active run file: nothing to stop."""
    stop = stop_script(service="ds-master", grace_seconds=5, pattern="p", run_name="r",
                       follow=True, takeover=True, data_dir=str(tmp_path / "data"))  # fmt: skip
    proc = subprocess.run(["sh", "-c", stop], env=_fake_docker_without_tasks(tmp_path),
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert proc.returncode == 0 and "nothing to stop" in proc.stdout
    assert not (tmp_path / "data" / ".dss" / "r" / "stop").exists()


def test_stop_of_a_run_whose_lease_lapsed_does_not_wait(tmp_path: Path) -> None:
    """follow_master: the run's active file is there but its lease lapsed (its task was
    replaced with its supervisor, as in an update): the marker is set, nothing waited for."""
    run_dir = tmp_path / "data" / ".dss" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "active").write_text("task-b spec 1\n")
    (run_dir / "lease").touch()
    old = time.time() - 120
    os.utime(run_dir / "lease", (old, old))
    stop = stop_script(service="ds-master", grace_seconds=5, pattern="p", run_name="r",
                       follow=True, takeover=True, data_dir=str(tmp_path / "data"))  # fmt: skip
    proc = subprocess.run(["sh", "-c", stop], env=_fake_docker_without_tasks(tmp_path),
                          capture_output=True, text=True, timeout=10)  # fmt: skip
    assert proc.returncode == 0 and "no supervisor runs it" in proc.stdout
    assert (run_dir / "stop").exists()
