"""The whole program under Pulumi mocks: the resource graph, key properties, ordering."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from infra.providers.health import HEALTH_KEYS
from jobs.command import run_record
from tests.unit.infra.samples import ROOT, Mocks, host, set_stack_config

pytestmark = pytest.mark.unit

SERVICE = "docker:index/service:Service"
DYNAMIC = "pulumi-python:dynamic:Resource"
# How a secret value looks on the wire to the engine (Pulumi's property-value signature).
SECRET_SIG, SECRET_VALUE_SIG = (
    "4dabf18193072939515e22adb298388d",
    "1b47061264138c4ac30d75fd1eb44270",
)


def run_program(
    raw: dict[str, Any], tmp_path: Path, secrets: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run __main__.py against the mocked engine with this config."""
    key = tmp_path / "id_ed25519"
    key.write_text("lab-key")
    raw = {**raw, "preflight": {**raw.get("preflight", {}), "ssh_private_key_file": str(key)}}
    keys: tuple[str, ...] = ()
    if secrets:
        raw["secrets"] = secrets
        keys = ("secrets",)
    set_stack_config(raw, keys)
    program = runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
    # Let every registration (and the applies feeding it) reach the mocks.
    _sync_await(wait_for_rpcs())
    return program


def is_secret(output: pulumi.Output[Any]) -> bool:
    """Whether an output is marked secret (so state stores it encrypted)."""
    return bool(_sync_await(output.is_secret()))


@pytest.fixture
def dev_program(mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The dev stack's program run under mocks, with one user secret: its globals."""
    return run_program(dev_raw, tmp_path, {"wandb_api_key": "s3cr3t-value"})


@pytest.fixture
def dev_graph(mocks: Mocks, dev_program: dict[str, Any]) -> Mocks:
    """The resources the dev stack's program registered."""
    return mocks


def test_component_types(dev_graph: Mocks) -> None:
    """One component per concern, typed deepspeed-swarm:<module>:<Class>."""
    types = {r.typ for r in dev_graph.resources if r.typ.startswith("deepspeed-swarm:")}
    assert types == {
        "deepspeed-swarm:hostfacts:HostFacts",
        "deepspeed-swarm:swarm:SwarmCluster",
        "deepspeed-swarm:image:TrainingImage",
        "deepspeed-swarm:network:OverlayNetwork",
        "deepspeed-swarm:secrets:ClusterSecrets",
        "deepspeed-swarm:services:TrainingServices",
        "deepspeed-swarm:launch:TrainingLaunch",
        "deepspeed-swarm:gate:BandwidthGate",
    }


def test_the_job_command_finds_the_run_record(dev_graph: Mocks) -> None:
    """The run record, by the URN the program registers it under, is the resource
    `scripts/job list` reads a run's state from in a stack's state (jobs/command.py
    run_record), and the only one it finds."""
    monitor = pulumi.runtime.settings.get_monitor()
    registered = monitor.get_registered_resources()  # type: ignore[union-attr]
    state = {"resources": [{"urn": urn, "outputs": dict(reg.state)}
                           for urn, reg in registered.items()]}  # fmt: skip
    record = run_record(state)
    assert record is not None and "stall_after_s" in record, record
    (urn,) = [u for u, reg in registered.items() if dict(reg.state) == record]
    assert urn.endswith("$pulumi-python:dynamic:Resource::unit-launch-run-state"), urn


def test_one_docker_provider_per_host(dev_graph: Mocks) -> None:
    """Every host gets an explicit docker provider for its own endpoint."""
    hosts = {
        r.name: r.inputs["host"]
        for r in dev_graph.by_type("pulumi:providers:docker")
        if "-swarm-docker-" in r.name
    }
    assert hosts == {
        "unit-swarm-docker-lab-h1": "ssh://root@10.213.0.11",
        "unit-swarm-docker-lab-h2": "ssh://root@10.213.0.12",
    }


def test_network_mtu_and_overlay(dev_graph: Mocks) -> None:
    """The overlay carries the configured MTU as a driver option and is attachable."""
    net = dev_graph.named("unit-net-overlay")
    assert net.inputs["driver"] == "overlay", f"{net.name}: driver"
    opts = net.inputs["options"]
    assert opts["com.docker.network.driver.mtu"] == "9000", f"{net.name}: MTU option"
    assert opts["com.docker.network.driver.overlay.vxlanid_list"].isdigit(), f"{net.name}: VNI"
    assert net.inputs["attachable"] is True, net.name


def test_services_reserve_gpus_and_use_dnsrr(dev_graph: Mocks) -> None:
    """Master and workers reserve NVIDIA-GPU per node, use dnsrr, one task per node."""
    svcs = {r.inputs["name"]: r.inputs for r in dev_graph.by_type(SERVICE)}
    assert set(svcs) == {"ds-master", "ds-worker", "ds-net-warmup"}
    warmup = svcs.pop("ds-net-warmup")
    assert warmup["mode"] == {"replicated": {"replicas": 2}}, "ds-net-warmup: one per host"
    assert warmup["taskSpec"]["placement"]["maxReplicas"] == 1, "ds-net-warmup: one per node"
    assert "resources" not in warmup["taskSpec"], "ds-net-warmup must reserve no GPU"
    for name, s in svcs.items():
        spec = s["taskSpec"]
        gen = spec["resources"]["reservation"]["genericResources"]
        assert gen["discreteResourcesSpecs"] == ["NVIDIA-GPU=2"], name
        assert s["endpointSpec"]["mode"] == "dnsrr", name
        assert spec["placement"]["maxReplicas"] == 1, name
        assert s["convergeConfig"]["timeout"] == "10m", name
    assert svcs["ds-master"]["mode"]["replicated"]["replicas"] == 1
    assert svcs["ds-worker"]["mode"]["replicated"]["replicas"] == 1
    assert svcs["ds-master"]["taskSpec"]["placement"]["constraints"] == [
        "node.labels.dss.role==master"
    ]


def test_services_state_what_swarm_reads_back(dev_graph: Mocks) -> None:
    """Placement names the image's platform and no mount asks for mode bits Swarm drops."""
    for r in dev_graph.by_type(SERVICE):
        spec = r.inputs["taskSpec"]
        assert spec["placement"]["platforms"] == [{"architecture": "amd64", "os": "linux"}], r.name
        for m in spec["containerSpec"].get("mounts", []):
            mode = m.get("tmpfsOptions", {}).get("mode", 0)
            assert mode <= 0o777, f"{r.name}: tmpfs mode {oct(mode)} keeps only 0o777 in Swarm"


def test_no_global_service_waits_to_converge(dev_graph: Mocks) -> None:
    """The docker provider refuses `converge_config` on a global-mode service."""
    for r in dev_graph.by_type(SERVICE):
        if r.inputs["mode"].get("global"):
            assert "convergeConfig" not in r.inputs, f"{r.name}: global mode with convergeConfig"


def test_services_mount_shm_data_and_secrets(dev_graph: Mocks) -> None:
    """Tasks get a sized /dev/shm tmpfs, /data, and secrets readable by uid 1000 only."""
    master = next(r for r in dev_graph.by_type(SERVICE) if r.inputs["name"] == "ds-master")
    c = master.inputs["taskSpec"]["containerSpec"]
    mounts = {m["target"]: m for m in c["mounts"]}
    assert mounts["/dev/shm"]["tmpfsOptions"]["sizeBytes"] == 256 << 20, master.name
    assert mounts["/data"]["source"] == "/var/lib/dss-lab/shared", master.name
    files = {s["fileName"]: s for s in c["secrets"]}
    assert set(files) == {"ssh_private_key", "ssh_public_key", "wandb_api_key"}, master.name
    assert all(s["fileUid"] == "1000" and s["fileMode"] == 0o400 for s in files.values())
    assert c["stopSignal"] == "SIGTERM" and c["stopGracePeriod"] == "1m", master.name
    assert c["env"]["DS_ACCELERATOR"] == "cpu", master.name
    assert "s3cr3t" not in str(c["env"]), f"{master.name}: a secret leaked into env"


def test_image_pinned_by_digest(dev_graph: Mocks) -> None:
    """Services run the pushed image by digest, not by a mutable tag."""
    master = next(r for r in dev_graph.by_type(SERVICE) if r.inputs["name"] == "ds-master")
    image = master.inputs["taskSpec"]["containerSpec"]["image"]
    assert image.startswith("10.213.0.1:5000/deepspeed-swarm/train@sha256:"), master.name


def test_secrets_are_secret(dev_graph: Mocks, dev_program: dict[str, Any]) -> None:
    """Every docker.Secret's data, and the generated private key, are secret outputs."""
    secrets = dev_graph.by_type("docker:index/secret:Secret")
    assert len(secrets) == 3
    for file_name, s in dev_program["secrets"].secrets.items():
        assert is_secret(s.data), f"docker.Secret {file_name}: data is not a secret output"
    names = sorted(s.name for s in secrets)
    assert names == [
        "unit-secrets-ssh-private-key",
        "unit-secrets-ssh-public-key",
        "unit-secrets-wandb-api-key",
    ]


def test_launch_is_delete_before_replace_pdsh(dev_graph: Mocks) -> None:
    """pdsh launches once, on the master host, with the hostfile in its triggers."""
    cmds = dev_graph.by_type("command:remote:Command")
    assert [c.name for c in cmds] == ["unit-launch-run"]
    create = cmds[0].inputs["create"]
    assert "--launcher=pdsh" in create and "--hostfile=/data/.dss/dev/hostfile" in create
    conn = cmds[0].inputs["connection"]
    # The connection (it holds the SSH key) reaches the engine wrapped as a secret.
    assert conn.get(SECRET_SIG) == SECRET_VALUE_SIG, f"{cmds[0].name}: connection is not secret"
    assert conn["value"]["host"] == "10.213.0.11", cmds[0].name
    assert "10.0.1.2 slots=1\n10.0.1.3 slots=1\n" in cmds[0].inputs["triggers"]


def test_launch_follows_the_tasks(dev_graph: Mocks) -> None:
    """New tasks (an update restarted them) relaunch: task ids are a launch trigger."""
    cmd = dev_graph.named("unit-launch-run")
    assert "task0,task1" in cmd.inputs["triggers"], f"{cmd.name}: triggers lack the task ids"


def test_roster_rereads_after_a_task_spec_update(dev_graph: Mocks) -> None:
    """The roster takes the services' task-spec digest, so a spec update re-reads tasks."""
    roster = dev_graph.named("unit-launch-roster")
    digest = roster.inputs["task_spec_digest"]
    assert isinstance(digest, str) and len(digest) == 16, f"{roster.name}: {digest!r}"


def test_task_spec_digest_follows_the_spec(
    mocks: Mocks, dev_raw: dict[str, Any], tmp_path: Path
) -> None:
    """The same config gives the same digest (a no-op stays one); another shm size
    (a task-spec change) gives another."""
    digests = []
    for shm in ("256m", "256m", "512m"):
        mocks.resources.clear()
        raw = {**dev_raw, "training": {**dev_raw["training"], "shm_size": shm}}
        run_program(raw, tmp_path)
        digests.append(mocks.named("unit-launch-roster").inputs["task_spec_digest"])
    assert digests[0] == digests[1], "the digest differs between two runs of one config"
    assert digests[1] != digests[2], "the digest ignores the task spec"


def test_task_spec_digest_ignores_host_level_changes(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """A node label or a drained host removed does not change the digest: the preview
    then does not show the launch as restarting."""
    digests = []
    for extra in ({}, {"labels": {"rack": "r1"}}):
        mocks.resources.clear()
        hosts = [raw["hosts"][0], raw["hosts"][1], {**raw["hosts"][2], **extra}]
        run_program({**raw, "hosts": hosts}, tmp_path)
        digests.append(mocks.named("unit-launch-roster").inputs["task_spec_digest"])
    mocks.resources.clear()
    drained = {**raw, "hosts": [*raw["hosts"], {**host(4), "availability": "drain"}]}
    run_program(drained, tmp_path)
    digests.append(mocks.named("unit-launch-roster").inputs["task_spec_digest"])
    assert len(set(digests)) == 1, f"host-level changes changed the digest: {digests}"


HEALTHY: dict[str, list[str]] = {k: [] for k in HEALTH_KEYS}


def test_facts_expect_config(dev_graph: Mocks) -> None:
    """Each host's facts resource expects the configured GPUs and NIC MTU, and healthy
    GPUs (no fault of any kind)."""
    facts = [r for r in dev_graph.by_type(DYNAMIC) if "expected" in r.inputs]
    assert {f.inputs["host"]: f.inputs["expected"] for f in facts} == {
        "lab-h1": {
            "hostname": "lab-h1",
            "gpu_count": 2,
            "nic_mtu": 9100,
            "driver_meets_minimum": True,
            **HEALTHY,
        },
        "lab-h2": {
            "hostname": "lab-h2",
            "gpu_count": 2,
            "nic_mtu": 9100,
            "driver_meets_minimum": True,
            **HEALTHY,
        },
    }


def test_node_labels(dev_graph: Mocks) -> None:
    """Swarm nodes carry role and GPU labels; the first host is the master."""
    nodes = {r.inputs["host"]: r.inputs for r in dev_graph.by_type(DYNAMIC) if "labels" in r.inputs}
    assert nodes["lab-h1"]["labels"]["dss.role"] == "master"
    assert nodes["lab-h2"]["labels"] == {
        "dss.role": "worker",
        "dss.gpus": "2",
        "dss.gpu-model": "fake-gpu",
    }
    assert nodes["lab-h1"]["role"] == "manager" and nodes["lab-h2"]["role"] == "worker"


def test_spare_gets_a_standby_task_and_no_worker(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """With a spare: workers for the training hosts only, `ds-standby` on the spare,
    the roster expecting the training hosts' tasks."""
    raw["hosts"].append({**host(4), "spare": True})
    run_program(raw, tmp_path)
    svcs = {r.inputs["name"]: r for r in mocks.by_type(SERVICE)}
    assert svcs["ds-worker"].inputs["mode"]["replicated"]["replicas"] == 2, "ds-worker"
    assert svcs["ds-net-warmup"].inputs["mode"]["replicated"]["replicas"] == 4, "warm-up"
    standby = svcs["ds-standby"].inputs
    assert standby["taskSpec"]["placement"]["constraints"] == ["node.labels.dss.spare==true"]
    assert (
        standby["mode"]["replicated"]["replicas"] == 1 and "resources" not in standby["taskSpec"]
    ), "ds-standby: one idle task per spare, no GPUs"
    roster = mocks.named("unit-launch-roster")
    assert roster.inputs["expected_tasks"] == 3, f"{roster.name}: spares carry no task"


def test_drained_host_gets_no_task(mocks: Mocks, raw: dict[str, Any], tmp_path: Path) -> None:
    """A drained host: its node is drained, and no warm-up or worker task counts on it."""
    raw["hosts"][2]["availability"] = "drain"
    run_program(raw, tmp_path)
    node = mocks.named("unit-swarm-node-gpu-03")
    assert node.inputs["availability"] == "drain", f"{node.name}: not drained"
    svcs = {r.inputs["name"]: r for r in mocks.by_type(SERVICE)}
    assert svcs["ds-worker"].inputs["mode"]["replicated"]["replicas"] == 1, "ds-worker"
    assert svcs["ds-net-warmup"].inputs["mode"]["replicated"]["replicas"] == 2, "warm-up"
    assert mocks.named("unit-launch-roster").inputs["expected_tasks"] == 2


def test_nodes_keeps_the_workers_off_the_hosts_left_out(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """`training.nodes: 2` of three hosts: one worker, kept off the third host by name;
    the master's placement and the warm-up tasks are as without it; the roster expects
    two tasks."""
    raw["training"] = {**raw.get("training", {}), "nodes": 2}
    run_program(raw, tmp_path)
    svcs = {r.inputs["name"]: r.inputs for r in mocks.by_type(SERVICE)}
    worker, master = svcs["ds-worker"], svcs["ds-master"]
    assert worker["mode"]["replicated"]["replicas"] == 1
    assert worker["taskSpec"]["placement"]["constraints"] == [
        "node.labels.dss.role==worker",
        "node.hostname!=gpu-03",
    ]
    assert master["taskSpec"]["placement"]["constraints"] == ["node.labels.dss.role==master"]
    assert svcs["ds-net-warmup"]["mode"]["replicated"]["replicas"] == 3, "warm-up"
    assert mocks.named("unit-launch-roster").inputs["expected_tasks"] == 2


@pytest.mark.parametrize(("engine", "tasks"), [("20.10.24+dfsg1", 3), ("28.5.2", 0)])
def test_warmup_tasks_follow_the_engine(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path, engine: str, tasks: int
) -> None:
    """`ds-net-warmup` has a task per active host where the hosts' facts read an engine
    with the overlay defect (20.10), and none on a current engine."""
    mocks.engine = engine
    run_program(raw, tmp_path)
    svcs = {r.inputs["name"]: r for r in mocks.by_type(SERVICE)}
    assert svcs["ds-net-warmup"].inputs["mode"]["replicated"]["replicas"] == tasks


def test_service_labels_reach_the_services_not_the_digest(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """`training.service_labels` label ds-master and ds-worker beside `dss.role`; the
    task-spec digest the roster takes is the same as without them."""

    def deploy(labels: dict[str, str]) -> Mocks:
        m = Mocks()
        pulumi.runtime.set_mocks(m, project="deepspeed-swarm", stack="unit", preview=False)
        run_program({**raw, "training": {**raw["training"], "service_labels": labels}}, tmp_path)
        return m

    plain, labelled = deploy({}), deploy({"team": "nlp"})
    for svc in labelled.by_type(SERVICE):
        if svc.inputs["name"] in ("ds-master", "ds-worker"):
            assert {"label": "team", "value": "nlp"} in svc.inputs["labels"], svc.name
    digest = [m.named("unit-launch-roster").inputs["task_spec_digest"] for m in (plain, labelled)]
    assert digest[0] == digest[1], "service labels changed the task-spec digest"


def test_jupyter_is_off_by_default(dev_graph: Mocks, dev_program: dict[str, Any]) -> None:
    """Without `jupyter.enabled` there is no notebook service and no token."""
    names = {r.inputs["name"] for r in dev_graph.by_type(SERVICE)}
    assert "ds-jupyter" not in names, "ds-jupyter runs although jupyter is off"
    assert not [r for r in dev_graph.resources if r.name.endswith("-jupyter-token")]


def test_jupyter_on_the_master_with_a_secret_token(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """JupyterLab runs on the master, publishes its port in host mode only, mounts
    /data and reads its token from a Swarm secret; the token output is secret."""
    raw["jupyter"] = {"enabled": True, "port": 8899}
    program = run_program(raw, tmp_path)
    svc = next(r for r in mocks.by_type(SERVICE) if r.inputs["name"] == "ds-jupyter").inputs
    spec = svc["taskSpec"]
    assert spec["placement"]["constraints"] == ["node.labels.dss.role==master"], "ds-jupyter"
    port = svc["endpointSpec"]["ports"][0]
    published = (port["publishMode"], port["publishedPort"], port["targetPort"])
    assert published == ("host", 8899, 8888), "ds-jupyter: published on the master's own port only"
    c = spec["containerSpec"]
    assert c["user"] == "1000" and c["mounts"][0]["target"] == "/data", "ds-jupyter"
    assert c["secrets"][0]["fileName"] == "jupyter_token", "ds-jupyter: token not a secret file"
    assert "env" not in c, "ds-jupyter: the token must not be in the spec's env"
    assert is_secret(program["jupyter"].token), "jupyterToken must be a secret output"


def _follow_master(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with a spare and training.recovery.follow_master on."""
    raw["hosts"].append({**host(4), "spare": True})
    raw["training"]["recovery"] = {"follow_moves": True, "follow_master": True}
    return raw


def test_follow_master_labels_the_masters_host_and_the_spares(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """With follow_master the master's host and the spare carry dss.master_ok, no worker does."""
    run_program(_follow_master(raw), tmp_path)
    labels = {
        r.inputs["host"]: r.inputs["labels"] for r in mocks.by_type(DYNAMIC) if "labels" in r.inputs
    }
    marked = sorted(h for h, ls in labels.items() if ls.get("dss.master_ok") == "true")
    assert marked == ["gpu-01", "gpu-04"], labels


def test_follow_master_gives_only_the_master_the_takeover_loop(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """The master service goes where dss.master_ok is, knows its task id and spec digest
    (Swarm templates; the digest is its own label) and runs the takeover loop; the
    workers' tasks are as they were."""
    run_program(_follow_master(raw), tmp_path)
    svcs = {r.inputs["name"]: r.inputs for r in mocks.by_type(SERVICE)}
    master, worker = svcs["ds-master"], svcs["ds-worker"]
    assert master["taskSpec"]["placement"]["constraints"] == ["node.labels.dss.master_ok==true"]
    env = master["taskSpec"]["containerSpec"]["env"]
    assert env["DSS_TASK_ID"] == "{{.Task.ID}}"
    assert env["DSS_SPEC"] == '{{index .Service.Labels "dss.spec"}}'
    args = master["taskSpec"]["containerSpec"]["args"]
    assert args[:2] == ["sh", "-c"] and "takeover.py" in args[2]
    spec = {x["label"]: x["value"] for x in master["labels"]}["dss.spec"]
    assert len(spec) == 16, spec
    assert "args" not in worker["taskSpec"]["containerSpec"]
    assert "DSS_TASK_ID" not in worker["taskSpec"]["containerSpec"]["env"]
    assert "dss.spec" not in {x["label"] for x in worker["labels"]}


def test_follow_master_launch_reads_rank_0_from_the_hostfile(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """The launch writes takeover.py, starts a new count of takeovers, and its
    supervisor passes the hostfile's first address as --master_addr; its stop kills the
    takeover program too; the run's record may find the master on another host."""
    run_program(_follow_master(raw), tmp_path)
    cmd = mocks.named("unit-launch-run").inputs
    create, delete = cmd["create"], cmd["delete"]
    assert "/data/.dss/run/takeover.py" in create, "takeover.py is not written"
    assert "rm -f /data/.dss/run/active /data/.dss/run/stop" in create
    assert "--master_addr=" + '"$master"' in create
    assert "--master_addr=10.0.1.2" not in create
    assert "pkill -KILL -f /data/.dss/run/takeover.py" in delete
    assert mocks.named("unit-launch-run-state").inputs["follow_master"] is True


def test_fork_server_relaunches_only_the_launch(
    mocks: Mocks, raw: dict[str, Any], tmp_path: Path
) -> None:
    """fork_server on: the launch runs the runner through the fork server's client and
    has one more trigger (so turning it on or off relaunches the run); the services and
    the roster's task-spec digest are as without it (no task restarts)."""
    run_program(raw, tmp_path)
    before = mocks.named("unit-launch-run").inputs
    digest = mocks.named("unit-launch-roster").inputs["task_spec_digest"]
    services = {r.inputs["name"]: r.inputs for r in mocks.by_type(SERVICE)}
    mocks.resources.clear()
    run_program({**raw, "training": {**raw["training"], "fork_server": True}}, tmp_path)
    after = mocks.named("unit-launch-run").inputs
    assert after["triggers"] == [*before["triggers"], "fork_server"]
    assert "/data/.dss/run/bin/python -u -m deepspeed.launcher.runner" in after["create"]
    assert after["delete"] == before["delete"]
    assert mocks.named("unit-launch-roster").inputs["task_spec_digest"] == digest
    assert {r.inputs["name"]: r.inputs for r in mocks.by_type(SERVICE)} == services
