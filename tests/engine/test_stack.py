"""The dev stack on the lab with the real engine: preflight, up, idempotence, the PR
comment's verdicts on real previews, drift, secrets in state, destroy. Tests run in file
order against one deployed stack.

The previews (delivery/impact.py on the real engine's `pulumi preview --json`): each
change of tests/unit/delivery/real_cases.py is made in the stack file, previewed and
undone (the state never changes). With `DSS_UPDATE_FIXTURES=1` each digest is also
written to tests/unit/delivery/fixtures/real/<case>.json, which the unit suite
classifies. They share this module's stack rather than deploying one of their own (a lab
and an `up`, about a minute of the test command)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from delivery.preview import changes
from harness import ROOT
from harness.configs import dev_config
from harness.lab import (
    LAB_ROOT,
    docker,
    edit_node,
    logged_steps,
    remove_network,
    run_log,
    shared,
)
from harness.lab import client as lab_client
from harness.stack import Stack
from tests.engine.conftest import MakeStack
from tests.unit.delivery.real_cases import (
    CASES,
    REAL,
    SECRET_VALUES,
    UPDATE_ENV,
    WANDB_SECRET,
    Case,
    problems,
)

pytestmark = pytest.mark.engine

SECRET = WANDB_SECRET
"""The stack's user secret: the one the preview digests are checked never to hold."""
RUN = "enginetest"
# Fields of the preview digest that hold the capturing machine's paths (the program's source).
MACHINE_FIELDS = ("sourcePosition", "stackTrace")


@pytest.fixture(scope="module")
def deployed(lab: dict[str, Any], make_stack: MakeStack) -> Stack:
    """The dev stack, brought up once for the module (short CPU run), with the image's
    DeepSpeed config inline (so that a ds_config change is a stack change, as on lab8)."""
    ds_config = json.loads((ROOT / "images" / "ds_config.json").read_text())
    stack = make_stack(
        "test-engine",
        dev_config(run_name=RUN, steps=2000, checkpoint_every=10, ds_config=ds_config),
        {"wandb_api_key": SECRET},
    )
    stack.pulumi("up", "--yes", "--skip-preview")
    return stack


def expect_drift(stack: Stack, resource: str, *needles: str) -> list[dict[str, Any]]:
    """`preview --refresh --expect-no-changes` must fail, with a change step for
    `resource` whose diff names each needle (a property path or key)."""
    proc = stack.pulumi("preview", "--refresh", "--expect-no-changes", "--json", check=False)
    assert proc.returncode != 0, f"drift not detected; preview said:\n{proc.stdout[-3000:]}"
    steps = json.loads(proc.stdout).get("steps", [])
    changed = [st for st in steps if st["urn"].endswith(f"::{resource}") and st["op"] != "same"]
    assert changed, f"no change proposed for {resource}: {[(st['op'], st['urn']) for st in steps]}"
    paths = [
        p
        for st in changed
        for p in changed_paths(
            (st.get("oldState") or {}).get("inputs"), (st.get("newState") or {}).get("inputs")
        )
    ]
    for needle in needles:
        assert any(needle in p for p in paths), (
            f"{resource}: the diff names {paths}, not {needle!r}"
        )
    return changed


def changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The property paths whose values differ between two input trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [p for k in keys for p in changed_paths(old.get(k), new.get(k), f"{prefix}.{k}")]
    return [] if old == new else [prefix.lstrip(".")]


def test_preflight_refuses_missing_gpus(lab: dict[str, Any], make_stack: MakeStack) -> None:
    """`up` stops before any service exists when a host has fewer GPUs than configured."""
    cfg = dev_config(run_name="preflight")
    hosts = cfg["deepspeed-swarm:hosts"]
    hosts[1] = {**hosts[1], "gpus": {"count": 3, "model": "fake-gpu"}}
    stack = make_stack("test-preflight", cfg, {"wandb_api_key": SECRET})
    proc = stack.pulumi("up", "--yes", "--skip-preview", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, "up succeeded although lab-h2 has 2 GPUs, not 3"
    assert "host lab-h2: gpu_count is 2, config says 3" in out, out[-3000:]
    assert lab_client(1).api.info()["Swarm"]["LocalNodeState"] != "active", (
        "preflight failed but the swarm was initialised anyway"
    )
    stack.pulumi("destroy", "--yes", "--skip-preview")


def test_up_forms_swarm_with_labels(deployed: Stack, lab: dict[str, Any]) -> None:
    """Both lab hosts are Ready swarm nodes with their dss.* labels."""
    nodes = {n.attrs["Description"]["Hostname"]: n.attrs for n in lab_client(1).nodes.list()}
    assert set(nodes) == {"lab-h1", "lab-h2"}
    assert nodes["lab-h1"]["Spec"]["Labels"]["dss.role"] == "master"
    assert nodes["lab-h2"]["Spec"]["Labels"]["dss.role"] == "worker"
    assert all(n["Status"]["State"] == "ready" for n in nodes.values())


def test_up_creates_overlay_with_mtu(deployed: Stack, lab: dict[str, Any]) -> None:
    """The overlay exists with MTU 9000 and is attachable."""
    name = deployed.outputs()["networkName"]
    assert name.startswith("ds-net-"), name
    net = lab_client(1).networks.get(name).attrs
    assert net["Driver"] == "overlay" and net["Attachable"]
    assert net["Options"]["com.docker.network.driver.mtu"] == "9000"


def test_tasks_reserve_distinct_gpus(deployed: Stack) -> None:
    """Each task holds its own fake GPUs; the rank map says which."""
    rank_map = deployed.outputs()["rankMap"]
    assert [r["node"] for r in rank_map] == ["lab-h1", "lab-h2"]
    uuids = [u for r in rank_map for u in r["gpu_uuids"]]
    assert len(uuids) == 4 and len(set(uuids)) == 4, rank_map


def test_hostfile_from_real_tasks(deployed: Stack) -> None:
    """The hostfile output lists both tasks' overlay addresses, master first."""
    out = deployed.outputs()
    lines = out["hostfile"].splitlines()
    assert len(lines) == 2 and all(line.endswith(" slots=1") for line in lines), lines
    assert lines[0].split()[0] == out["masterAddress"]


def test_training_runs(deployed: Stack) -> None:
    """The launch really trains: rank 0 logs steps with a loss to the shared /data."""
    log = run_log(RUN, "metrics.jsonl")
    deadline = time.monotonic() + 600
    steps: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if log.exists():
            steps = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
            if len(steps) >= 5:
                break
        time.sleep(5)
    assert len(steps) >= 5, f"{log}: {len(steps)} steps logged after 600 s"
    assert all("loss" in s and "step" in s for s in steps)


def test_second_preview_has_no_changes(deployed: Stack) -> None:
    """A preview right after up proposes nothing (no perpetual diff)."""
    deployed.pulumi("preview", "--expect-no-changes")


def preview_of(stack: Stack, case: Case) -> str:
    """`pulumi preview --json` with the case's change made; the stack file (its salt
    and secure values included) is restored after, whatever happens."""
    before = stack.config_file.read_text()
    try:
        # record=False: the argv may hold the new secret's value.
        stack.pulumi(*case.argv, record=False)
        return stack.pulumi("preview", "--json").stdout
    finally:
        stack.config_file.write_text(before)


def scrubbed(text: str, stack: Stack) -> str:
    """The digest as committed: machine fields dropped, this machine's paths replaced."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if k not in MACHINE_FIELDS}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = json.dumps(walk(json.loads(text)), indent=4) + "\n"
    for path, marker in (
        (stack.workdir, "<workdir>"),
        (ROOT, "<project>"),
        (Path.home(), "<home>"),
    ):
        if str(path) not in ("", "/"):
            out = out.replace(f"{path}/", f"{marker}/").replace(f'"{path}"', f'"{marker}"')
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_preview_verdicts(deployed: Stack, case: Case) -> None:
    """Each change, previewed by the real engine, gets the case's training impacts; the
    digest holds no secret value (the engine masks them)."""
    text = preview_of(deployed, case)
    leaked = [s for s in SECRET_VALUES if s in text]
    assert not leaked, f"{case.name}: the preview JSON holds secret values {leaked}"
    if os.environ.get(UPDATE_ENV) == "1":
        REAL.mkdir(parents=True, exist_ok=True)
        (REAL / f"{case.name}.json").write_text(scrubbed(text, deployed))
    found = problems(case, changes(json.loads(text)))
    assert not found, "\n".join(found)


def test_previews_left_the_stack_unchanged(deployed: Stack) -> None:
    """After the previews and the restored stack file, the stack is a no-op again."""
    deployed.pulumi("preview", "--expect-no-changes")


def test_refresh_finds_no_drift(deployed: Stack) -> None:
    """Refreshing an untouched stack proposes nothing (network, services, facts, nodes)."""
    deployed.pulumi("preview", "--refresh", "--expect-no-changes")


def test_refresh_preview_only_finds_no_drift(deployed: Stack) -> None:
    """`refresh --preview-only --expect-no-changes` (the CI drift check) exits 0 after up:
    no perpetual diff, the network's IPAM and vxlan fields included."""
    deployed.pulumi("refresh", "--preview-only", "--expect-no-changes")


def test_policy_pack_passes_in_preview(deployed: Stack) -> None:
    """The policy pack runs inside the real engine's preview (through the Python
    language host) and the dev stack passes every policy."""
    policy = ROOT / "policy"
    proc = deployed.pulumi(
        "preview",
        "--policy-pack",
        str(policy),
        "--policy-pack-config",
        str(policy / "config" / "dev.json"),
    )
    out = proc.stdout + proc.stderr
    assert "Policies:" in out and "deepspeed-swarm@v" in out, f"no policy report:\n{out[-3000:]}"
    reported = [x for x in out.splitlines() if "[advisory]" in x or "[mandatory]" in x]
    assert not reported, f"the dev stack breaks (or escapes) a policy:\n{out[-3000:]}"


def test_policy_pack_blocks_in_preview(deployed: Stack, tmp_path: Path) -> None:
    """A mandatory policy the stack breaks (an overlay MTU it does not have) fails the
    preview, naming the policy and the network resource."""
    config = tmp_path / "policy.json"
    rules = {
        "all": "mandatory",
        "overlay-mtu": {"mtu": 1500},
        "gpu-reservation": {"cpu_only": True},
    }
    config.write_text(json.dumps(rules))
    policy = str(ROOT / "policy")
    proc = deployed.pulumi(
        "preview", "--policy-pack", policy, "--policy-pack-config", str(config), check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"a mandatory violation did not fail the preview:\n{out[-3000:]}"
    assert "overlay-mtu" in out and "test-engine-net-overlay" in out, out[-3000:]


def test_state_has_no_plaintext_secrets(deployed: Stack) -> None:
    """Neither the user secret nor the generated SSH private key is readable in state,
    nor in anything the engine printed (up, previews, outputs)."""
    state = deployed.state_text()
    assert SECRET not in state, "the wandb secret is in the state in plaintext"
    assert "PRIVATE KEY" not in state, "an SSH private key is in the state in plaintext"
    printed = "\n".join(deployed.transcript)
    assert SECRET not in printed, "the engine printed the wandb secret"
    assert "PRIVATE KEY" not in printed, "the engine printed an SSH private key"


def test_task_spec_update_relaunches_training(deployed: Stack) -> None:
    """An update that restarts the tasks (a new /dev/shm size) relaunches the run in the
    new tasks, which resumes from its checkpoint; a second `up` meanwhile is refused by
    the stack's lock; then the stack is a no-op again."""
    before = max(logged_steps(RUN), default=0)
    deployed.pulumi("config", "set", "--path", "training.shm_size", "512m")
    first = deployed.start("up", "--yes", "--skip-preview")
    locks = deployed.workdir / "state" / ".pulumi" / "locks"
    deadline = time.monotonic() + 60
    while not any(p.is_file() for p in locks.rglob("*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    # A second operator's `up` while the first runs: refused by the backend's lock.
    second = deployed.pulumi("up", "--yes", "--skip-preview", check=False)
    out, _ = first.communicate(timeout=1500)
    deployed.record(out)
    assert first.returncode == 0, f"the first up failed:\n{out[-3000:]}"
    assert second.returncode != 0, "a concurrent up was not refused"
    assert "currently locked" in second.stdout + second.stderr, second.stderr[-2000:]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and max(logged_steps(RUN), default=0) <= before + 2:
        time.sleep(5)
    after = max(logged_steps(RUN), default=0)
    assert after > before + 2, f"training did not go on after the update: step {before} -> {after}"
    deployed.pulumi("preview", "--expect-no-changes")


def test_drift_node_label(deployed: Stack, lab: dict[str, Any]) -> None:
    """A label removed from a node by hand is drift on that node's resource."""
    client = lab_client(1)
    node = next(n for n in client.nodes.list() if n.attrs["Description"]["Hostname"] == "lab-h2")
    spec = node.attrs["Spec"]
    labels = dict(spec["Labels"])
    spec["Labels"] = {k: v for k, v in labels.items() if k != "dss.gpus"}
    node.update(spec)
    try:
        expect_drift(deployed, "test-engine-swarm-node-lab-h2", "dss.gpus")
    finally:
        node.reload()
        spec = node.attrs["Spec"]
        spec["Labels"] = labels
        node.update(spec)


def test_drift_nic_mtu(deployed: Stack) -> None:
    """A host whose NIC MTU changed is drift on its facts resource, naming the fact."""
    ns = "dsslab-h2"
    subprocess.run(
        ["ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "mtu", "9000"], check=True
    )
    try:
        expect_drift(deployed, "test-engine-facts-lab-h2", "nic_mtu")
    finally:
        subprocess.run(
            ["ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "mtu", "9100"], check=True
        )


def test_drift_lost_gpu(deployed: Stack) -> None:
    """A host that lost a GPU (nvidia-smi shows one fewer) is drift naming gpu_count."""
    gpus = LAB_ROOT / "h2" / "gpus"
    before = gpus.read_text()
    gpus.write_text("".join(before.splitlines(keepends=True)[1:]))
    try:
        expect_drift(deployed, "test-engine-facts-lab-h2", "gpu_count")
    finally:
        gpus.write_text(before)


def test_drift_driver_below_minimum(deployed: Stack) -> None:
    """A host whose NVIDIA driver fell below preflight.min_driver_version is drift on its facts."""
    driver = LAB_ROOT / "h2" / "driver-version"
    before = driver.read_text()
    driver.write_text("470.57.02\n")
    try:
        expect_drift(deployed, "test-engine-facts-lab-h2", "driver_meets_minimum")
    finally:
        driver.write_text(before)


def test_drift_service(deployed: Stack, lab: dict[str, Any]) -> None:
    """A service label added by hand is drift on the service resource."""
    docker(1, "service", "update", "--detach", "--label-add", "hand=edit", "ds-worker")
    try:
        expect_drift(deployed, "test-engine-train-worker", "labels")
    finally:
        docker(1, "service", "update", "--detach", "--label-rm", "hand", "ds-worker")


def test_drift_node_drained(deployed: Stack, lab: dict[str, Any]) -> None:
    """A node drained by hand is drift on its node resource, naming availability."""
    edit_node("lab-h2", Availability="drain")
    try:
        expect_drift(deployed, "test-engine-swarm-node-lab-h2", "availability")
    finally:
        edit_node("lab-h2", Availability="active")


def test_drift_node_role(deployed: Stack, lab: dict[str, Any]) -> None:
    """A worker promoted to manager by hand is drift on its node resource, naming role."""
    edit_node("lab-h2", Role="manager")
    try:
        expect_drift(deployed, "test-engine-swarm-node-lab-h2", "role")
    finally:
        edit_node("lab-h2", Role="worker")


def test_drift_hostname(deployed: Stack) -> None:
    """A host whose hostname changed is drift on its facts resource, naming hostname."""
    # The lab host's sshd lives in its UTS namespace: rename the host there.
    pid = (LAB_ROOT / "h2" / "sshd.pid").read_text().strip()
    uts = ["nsenter", "-t", pid, "-u", "hostname"]
    subprocess.run([*uts, "renamed-h2"], check=True)
    try:
        expect_drift(deployed, "test-engine-facts-lab-h2", "hostname")
    finally:
        subprocess.run([*uts, "lab-h2"], check=True)


def test_hand_removed_objects_are_reported_then_repaired(
    deployed: Stack, lab: dict[str, Any]
) -> None:
    """Services, a secret and the overlay removed by hand are drift naming each resource;
    `pulumi up --refresh` puts them back and the launch again; then a no-op is a no-op."""
    client = lab_client(1)
    network = deployed.outputs()["networkName"]
    # Docker refuses to remove a secret or network a service still uses: services first.
    docker(1, "service", "rm", "ds-master", "ds-worker", "ds-net-warmup")
    secret = next(
        s
        for s in client.secrets.list()
        if s.attrs["Spec"]["Labels"].get("dss.file") == "wandb_api_key"
    )
    secret.remove()
    remove_network(client, network)
    proc = deployed.pulumi("refresh", "--preview-only", "--expect-no-changes", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"hand removals not detected:\n{out[-3000:]}"
    gone = (
        "test-engine-train-master",
        "test-engine-train-worker",
        "test-engine-secrets-wandb-api-key",
        "test-engine-net-overlay",
    )
    for name in gone:
        deleted = re.search(rf"^\s*-\s+\S+ {name} delete\s*$", out, re.M)
        assert deleted, f"refresh does not report {name} as gone:\n{out[-3000:]}"
    assert "Exception" not in out, f"refresh failed instead of reporting:\n{out[-3000:]}"
    deployed.pulumi("up", "--refresh", "--yes", "--skip-preview")
    assert client.networks.get(network).attrs["Options"]["com.docker.network.driver.mtu"] == "9000"
    deployed.pulumi("preview", "--expect-no-changes")
    deployed.pulumi("refresh", "--preview-only", "--expect-no-changes")
    log = run_log(RUN, "launcher.log")
    assert log.exists(), f"{log}: the relaunch wrote nothing"


def test_destroy_stops_training_and_cleans_hosts(deployed: Stack, lab: dict[str, Any]) -> None:
    """Destroy SIGTERMs the run (it checkpoints), then leaves no service, network,
    secret or swarm behind on the lab hosts."""
    deployed.pulumi("destroy", "--yes", "--skip-preview")
    ckpts = shared("checkpoints", RUN)
    assert ckpts.exists() and any(ckpts.iterdir()), f"no checkpoint in {ckpts} after destroy"
    for i in (1, 2):
        info = lab_client(i).api.info()
        assert info["Swarm"]["LocalNodeState"] == "inactive", f"lab-h{i} is still in a swarm"
    for i in (1, 2):
        client = lab_client(i)
        # Swarm removes a removed service's task containers asynchronously.
        deadline = time.monotonic() + 60
        while client.containers.list(all=True) and time.monotonic() < deadline:
            time.sleep(2)
        left = [(c.name, c.status) for c in client.containers.list(all=True)]
        assert not left, f"lab-h{i}: containers left 60 s after destroy: {left}"
        nets = [n.name for n in client.networks.list() if (n.name or "").startswith("ds-net")]
        assert not nets, f"lab-h{i}: networks left after destroy: {nets}"
    state = deployed.state_text()
    assert '"type": "docker:index/service:Service"' not in state, "services left in state"
