"""delivery.impact: roles from component, type and inputs, checked against what the
program really registers (under Pulumi mocks), and the verdict table."""

from __future__ import annotations

import copy
import runpy
from collections.abc import Mapping
from typing import Any

import pulumi
import pytest
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from delivery import preview
from delivery.impact import RULES, SCRAPE, VERDICTS, Impact, Role, assess, role_of
from infra.layout import COMMAND_TYPE, DYNAMIC_TYPE, ROLE_LABEL, SERVICE_TYPE
from tests.unit.conftest import sample_ssh_home
from tests.unit.infra.samples import ROOT, Mocks, set_stack_config, stack_config

pytestmark = pytest.mark.unit

# Roles the program never registers on purpose: the table's fallbacks.
FALLBACKS = {Role.OTHER, Role.UNKNOWN_SERVICE}


def everything_on() -> dict[str, Any]:
    """The dev stack with every optional part: a spare, JupyterLab, monitoring, a secret,
    training code synced from a directory (the image's own code, as a code dir)."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    spare = {**raw["hosts"][1], "name": "lab-h3", "address": "10.213.0.13", "spare": True}
    raw["hosts"].append({**spare, "docker_host": "unix:///var/lib/dss-lab/h3/docker.sock"})
    raw["jupyter"] = {"enabled": True}
    raw["monitoring"] = {"enabled": True}
    raw["training"] = {**raw["training"], "code": {"dir": "images"}, "script": "train.py"}
    return raw


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Mapping[str, Any]]:
    """URN -> properties of every resource the program registers with everything on."""
    pulumi.runtime.set_mocks(Mocks(), project="deepspeed-swarm", stack="unit", preview=False)
    key = tmp_path_factory.mktemp("key") / "id_ed25519"
    key.write_text("lab-key")
    raw = everything_on()
    raw["preflight"] = {**raw["preflight"], "ssh_private_key_file": str(key)}
    set_stack_config({**raw, "secrets": {"wandb_api_key": "s3cr3t"}}, ("secrets",))
    with pytest.MonkeyPatch.context() as mp:
        # Module scope: set up before the autouse HOME of each test (tests/unit/conftest.py).
        sample_ssh_home(mp, tmp_path_factory.mktemp("home"))
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
        _sync_await(wait_for_rpcs())
    monitor = pulumi.runtime.settings.get_monitor()
    assert isinstance(monitor, MockMonitor), "set_mocks installs the mock monitor"
    return {urn: reg.state for urn, reg in monitor.get_registered_resources().items()}


def roles(registered: dict[str, Mapping[str, Any]]) -> dict[str, tuple[str, Role]]:
    """Resource name -> (type, role) for every custom resource registered."""
    out = {}
    for urn, props in registered.items():
        types, name = preview.parse_urn(urn)
        if types[-1].startswith("deepspeed-swarm:"):
            continue
        out[name] = (types[-1], role_of(preview.component_of(types), types[-1], props))
    return out


def test_every_registered_resource_has_a_role(registered: dict[str, Mapping[str, Any]]) -> None:
    """Every resource the program registers, providers aside, matches a rule of its own:
    a new resource or a renamed input fails here, not silently in a PR comment."""
    unknown = {
        name: (type_, role.value)
        for name, (type_, role) in roles(registered).items()
        if role in FALLBACKS and not type_.startswith("pulumi:providers:")
    }
    assert not unknown, f"resources no rule of delivery/impact.py RULES knows: {unknown}"


def test_every_rule_matches_a_registered_resource(
    registered: dict[str, Mapping[str, Any]],
) -> None:
    """No rule of the table is dead: each role but the fallbacks is registered."""
    seen = {role for _type, role in roles(registered).values()}
    missing = {r.role for r in RULES} - seen - FALLBACKS
    assert not missing, f"roles no registered resource has: {sorted(r.value for r in missing)}"


DYNAMIC_ROLES = {
    "unit-facts-lab-h1": Role.HOST_FACTS,
    "unit-swarm-init": Role.SWARM_INIT,
    "unit-swarm-node-lab-h1": Role.SWARM_NODE,
    "unit-swarm-node-lab-h3": Role.SWARM_NODE,
    "unit-secrets-ssh-key": Role.SSH_KEY,
    "unit-launch-roster": Role.ROSTER,
    "unit-jupyter-token": Role.JUPYTER_TOKEN,
}


@pytest.mark.parametrize(("name", "role"), DYNAMIC_ROLES.items())
def test_dynamic_resources_told_apart(
    registered: dict[str, Mapping[str, Any]], name: str, role: Role
) -> None:
    """Dynamic resources (one type for all) get their role from component and inputs."""
    assert roles(registered)[name] == (DYNAMIC_TYPE, role), name


SERVICE_ROLES = {
    "unit-train-net-warmup": Role.WARMUP_SERVICE,
    "unit-train-standby": Role.STANDBY_SERVICE,
    "unit-train-master": Role.TRAINING_SERVICE,
    "unit-train-worker": Role.TRAINING_SERVICE,
    "unit-jupyter-service": Role.JUPYTER_SERVICE,
    "unit-monitoring-prometheus": Role.MONITORING_SERVICE,
    "unit-monitoring-node-exporter": Role.MONITORING_SERVICE,
}


@pytest.mark.parametrize(("name", "role"), SERVICE_ROLES.items())
def test_services_told_apart(
    registered: dict[str, Mapping[str, Any]], name: str, role: Role
) -> None:
    """Services get their role from their Swarm name or dss.role label."""
    assert roles(registered)[name] == (SERVICE_TYPE, role), name


SERVICES = "deepspeed-swarm:services:TrainingServices"


def test_role_label_alone_makes_a_training_service() -> None:
    """A service whose Swarm name is new but that carries dss.role=worker is training."""
    props = {"name": "ds-renamed", "labels": [{"label": ROLE_LABEL, "value": "worker"}]}
    assert role_of(SERVICES, SERVICE_TYPE, props) is Role.TRAINING_SERVICE


def test_unknown_service_assumed_to_restart() -> None:
    """A service no rule knows is reported as restarting the job, never as harmless."""
    role = role_of(SERVICES, SERVICE_TYPE, {"name": "ds-new"})
    assert role is Role.UNKNOWN_SERVICE
    assert assess(role, "update", ("taskSpec",), {}, {})[0] is Impact.RESTARTS


def test_unknown_dynamic_resource_is_no_training_resource() -> None:
    """A dynamic resource whose inputs match no rule falls back to no training resource."""
    role = role_of(SERVICES, DYNAMIC_TYPE, {"something": 1})
    assert role is Role.OTHER
    assert assess(role, "create", (), {}, {}) == (Impact.NONE, "no training resource")


def test_replica_counts_only_as_integers() -> None:
    """The replica change names counts only when they are integers (a masked value is '?')."""
    old = {"mode": {"replicated": {"replicas": 1}}}
    new = {"mode": {"replicated": {"replicas": "[secret]"}}}
    impact, why = assess(Role.TRAINING_SERVICE, "update", ("mode.replicated.replicas",), old, new)
    assert impact is Impact.MOVES and "replicas 1 -> ?" in why, why


def test_training_service_label_update_restarts_nothing() -> None:
    """An update of a training service's labels alone keeps its tasks; with the task spec
    too, Swarm rolls them."""
    labels = ("labels",)
    assert assess(Role.TRAINING_SERVICE, "update", labels, {}, {})[0] is Impact.NONE
    both = ("labels", "taskSpec.containerSpec.env")
    assert assess(Role.TRAINING_SERVICE, "update", both, {}, {})[0] is Impact.RESTARTS


def test_every_role_has_verdicts() -> None:
    """Each role has a verdict row, the last of which matches any operation."""
    for role in Role:
        assert VERDICTS[role] and VERDICTS[role][-1].ops is None, role


def test_reasons_name_no_values() -> None:
    """Reasons are fixed text: nothing of a resource's inputs is formatted into them
    but the replica counts and the host facts' remedy (the program's own sentence of
    host names and indexes, infra/render/remedy.py; never a secret)."""
    for role, rows in VERDICTS.items():
        for v in rows:
            fixed = v.why.replace("{replicas}", "").replace("{remedy}", "")
            assert "{" not in fixed, (role, v.why)
            assert "{remedy}" not in v.why or role is Role.HOST_FACTS, (role, v.why)


def test_a_gpu_health_drift_names_the_hosts_remedy() -> None:
    """A host facts change in a GPU health fact says `up` refuses it and gives the
    host's own remedy (its `remedy` input)."""
    remedy = "set hosts[1].availability: drain (the spare lab-h3 takes its place), then `pulumi up`"
    impact, why = assess(
        Role.HOST_FACTS, "drift", ("expected.gpu_xid_errors[0]",), {}, {"remedy": remedy}
    )
    assert impact is Impact.NONE
    assert "GPU health fault" in why and why.endswith(f"remedy: {remedy}")


def test_another_host_facts_change_is_read_only() -> None:
    """A host facts change outside GPU health keeps the read-only verdict."""
    assert assess(Role.HOST_FACTS, "drift", ("expected.nic_mtu",), {}, {})[1] == (
        "host facts are read-only"
    )


def test_a_changed_launch_script_is_announced_as_kept_until_the_next_relaunch() -> None:
    """An update of the launch's script keeps the running run, and says that its next
    relaunch takes the new command line (the upgrade of issue 44)."""
    impact, why = assess(Role.LAUNCH, "update", ("create",), {}, {})
    assert impact is Impact.NONE and "until its next relaunch" in why


def test_a_changed_launch_trigger_alone_is_no_re_run() -> None:
    """An update that leaves the launch's script as it was is no re-run, said plainly."""
    assert assess(Role.LAUNCH, "update", ("delete",), {}, {}) == (
        Impact.NONE,
        "no re-run: only the launch triggers re-run it",
    )


def test_the_gate_leaves_training_alone() -> None:
    """The collective gate's create or update measures before a launch: no impact."""
    impact, why = assess(Role.GATE, "update", ("tasks",), {}, {})
    assert impact is Impact.NONE and "before the launch" in why


def test_a_jobs_scrape_file_leaves_training_alone() -> None:
    """A job's scrape config (a remote command under JobScrape) is monitoring, not a launch."""
    role = role_of(SCRAPE, COMMAND_TYPE, {"create": "set -eu"})
    assert role is Role.MONITORING_OTHER
    impact, _why = assess(role, "update", ("create",), {}, {})
    assert impact is Impact.NONE
