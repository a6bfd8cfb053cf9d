"""infra.config.jobs: a job stack's config over its cluster stack's file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, parse_stack_config, stack_file_yaml
from infra.config.jobs import job_config, merged
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit


def cluster_file(tmp_path: Path, name: str = "c1", **changes: Any) -> Path:
    """The dev stack's config as a cluster stack `name` in project dir `tmp_path`."""
    raw = {**stack_config("dev"), "kind": "cluster", **changes}
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(stack_file_yaml({f"deepspeed-swarm:{k}": v for k, v in raw.items()}))
    return path


def job(**training: Any) -> dict[str, Any]:
    return {"kind": "job", "cluster": "c1", "training": training}


def test_merged_replaces_key_by_key() -> None:
    """Objects merge key by key; lists and scalars are replaced."""
    base = {"a": 1, "o": {"x": 1, "y": 2}, "l": [1, 2]}
    assert merged(base, {"o": {"y": 3}, "l": [9]}) == {"a": 1, "o": {"x": 1, "y": 3}, "l": [9]}


def test_job_takes_the_clusters_hosts_and_its_own_training(tmp_path: Path) -> None:
    """A job validates with the cluster's hosts, the cluster's training defaults under
    its own keys, and its stack's name as its run name."""
    cluster_file(tmp_path)
    raw, secret_keys, problems = job_config(job(steps=7, args=["--lr", "1e-2"]), "exp1", tmp_path)
    assert problems == []
    cfg = parse_stack_config(raw, secret_keys)
    assert cfg.kind == "job" and cfg.cluster == "c1" and cfg.job_name == "exp1"
    assert [h.name for h in cfg.hosts] == ["lab-h1", "lab-h2"]
    t = cfg.training
    assert (t.steps, t.args, t.run_name) == (7, ["--lr", "1e-2"], "exp1")
    assert t.data_dir == "/var/lib/dss-lab/shared" and t.cpu_only  # the cluster's defaults


def test_job_gets_secret_names_never_values(tmp_path: Path) -> None:
    """The cluster's secrets reach a job by name; their values are not read."""
    cluster_file(tmp_path)
    raw, secret_keys, _ = job_config(job(), "exp1", tmp_path)
    assert raw["secrets"] == {"wandb_api_key": None} and secret_keys == {"secrets"}
    assert parse_stack_config(raw, secret_keys).secret_names == ["wandb_api_key"]


def test_cluster_keys_in_a_job_are_refused(tmp_path: Path) -> None:
    """A job stack holding a cluster's key is refused, naming the key and what is allowed."""
    cluster_file(tmp_path)
    _, _, problems = job_config({**job(), "hosts": [{"name": "h9"}]}, "exp1", tmp_path)
    assert problems == [
        "hosts: belongs to the cluster stack, not a job stack; allowed in a job stack: "
        "kind, cluster, manager, training"
    ]


def test_pulumi_yaml_defaults_are_no_cluster_keys(tmp_path: Path) -> None:
    """The empty defaults Pulumi.yaml gives every object key do not count as set."""
    cluster_file(tmp_path)
    _, _, problems = job_config({**job(), "hosts": [], "network": {}}, "exp1", tmp_path)
    assert problems == []


def test_missing_cluster_file_is_refused(tmp_path: Path) -> None:
    """A job naming a cluster with no stack file says which file it looked for."""
    _, _, problems = job_config(job(), "exp1", tmp_path)
    assert problems == [
        "cluster: 'c1' has no stack file Pulumi.c1.yaml beside Pulumi.yaml; allowed: a "
        "stack of this project with kind: cluster"
    ]


def test_a_single_stack_is_no_cluster(tmp_path: Path) -> None:
    """A job on a stack whose kind is not `cluster` is refused."""
    cluster_file(tmp_path, kind="single")
    _, _, problems = job_config(job(), "exp1", tmp_path)
    assert problems == ["cluster: 'c1' has kind 'single'; allowed: a stack with kind: cluster"]


def test_another_run_name_is_refused(tmp_path: Path) -> None:
    """A job's run is named after its stack: another run name is refused."""
    cluster_file(tmp_path)
    _, _, problems = job_config(job(run_name="other"), "exp1", tmp_path)
    assert problems == [
        "training.run_name: 'other' in job stack 'exp1'; allowed: unset or 'exp1' (a job's "
        "run, checkpoints and services are named after its stack)"
    ]


def test_a_job_without_cluster_is_refused() -> None:
    """`kind: job` without `cluster` is refused by the config's rules."""
    with pytest.raises(ConfigError, match="cluster: missing in a job stack"):
        parse_stack_config({**stack_config("dev"), "kind": "job"}, {"secrets"})


def test_cluster_key_outside_a_job_is_refused() -> None:
    """`cluster` in a single or cluster stack is refused."""
    with pytest.raises(ConfigError, match="cluster: 'c1' in a stack of kind 'single'"):
        parse_stack_config({**stack_config("dev"), "cluster": "c1"}, {"secrets"})


def test_job_takes_the_clusters_monitoring(tmp_path: Path) -> None:
    """A job follows its cluster's monitoring as it is (its ranks then serve metrics)."""
    cluster_file(tmp_path, monitoring={"enabled": True, "scrape_interval": "7s"})
    raw, secret_keys, problems = job_config(job(steps=7), "exp1", tmp_path)
    cfg = parse_stack_config(raw, secret_keys)
    assert problems == []
    assert (cfg.monitoring.enabled, cfg.monitoring.scrape_interval) == (True, "7s")


def test_monitoring_in_a_job_file_is_refused(tmp_path: Path) -> None:
    """`monitoring` in a job's own file is refused: it is the cluster's."""
    cluster_file(tmp_path)
    _, _, problems = job_config({**job(), "monitoring": {"enabled": True}}, "exp1", tmp_path)
    assert problems == [
        "monitoring: belongs to the cluster stack, not a job stack; allowed in a job stack: "
        "kind, cluster, manager, training"
    ]


def test_monitoring_changes_the_digest_only_when_on(tmp_path: Path) -> None:
    """A cluster's digest is what it was without monitoring, and changes with it on."""
    base = {**stack_config("dev"), "kind": "cluster"}
    off = parse_stack_config(base, {"secrets"}).cluster_digest
    off_too = parse_stack_config({**base, "monitoring": {"scrape_interval": "7s"}}, {"secrets"})
    on = parse_stack_config({**base, "monitoring": {"enabled": True}}, {"secrets"})
    assert off_too.cluster_digest == off
    assert on.cluster_digest != off


def test_job_reads_the_clusters_digest(tmp_path: Path) -> None:
    """A job computes the same cluster digest as the cluster stack itself (what the
    cluster exports as deployed), whatever its own training keys."""
    cluster_file(tmp_path)
    cluster = parse_stack_config({**stack_config("dev"), "kind": "cluster"}, {"secrets"})
    raw, secret_keys, _ = job_config(job(steps=7, nodes=1, launch_mode="no_ssh"), "exp1", tmp_path)
    assert parse_stack_config(raw, secret_keys).cluster_digest == cluster.cluster_digest


def test_a_host_change_changes_the_digest(tmp_path: Path) -> None:
    """A host's change in the cluster's file (a node label) changes the digest a job
    reads."""

    def digest() -> str:
        raw, secret_keys, _ = job_config(job(), "exp1", tmp_path)
        return parse_stack_config(raw, secret_keys).cluster_digest

    cluster_file(tmp_path)
    before = digest()
    hosts = stack_config("dev")["hosts"]
    cluster_file(tmp_path, hosts=[hosts[0], {**hosts[1], "labels": {"rack": "r2"}}])
    assert digest() != before


def test_a_command_job_drops_the_clusters_trainer_defaults(tmp_path: Path) -> None:
    """A job with a torchrun command on a cluster whose defaults name deepspeed and the
    project's trainer's args: the command's launcher, no args, accepted."""
    cluster_file(tmp_path)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    command = "torchrun train.py --epochs 2"
    raw, secret_keys, problems = job_config(
        job(command=command, code={"dir": str(code)}), "exp1", tmp_path
    )
    t = parse_stack_config(raw, secret_keys).training
    assert (problems, t.launcher, t.args, t.command) == ([], "torchrun", [], command)


def test_a_plain_script_job_keeps_the_clusters_launcher(tmp_path: Path) -> None:
    """A plain python command runs under the cluster's launcher default."""
    cluster_file(tmp_path)
    raw, _, _ = job_config(job(command="python -m pkg.train"), "exp1", tmp_path)
    assert raw["training"]["launcher"] == "deepspeed" and "args" not in raw["training"]


def test_a_job_goes_through_the_manager_it_names(tmp_path: Path) -> None:
    """A job's `manager` (one of its cluster's managers) is its leader: its services,
    queue entry and GPU check are made and read there; without it, the cluster's first
    manager is."""
    cluster_file(tmp_path, hosts=stack_config("lab8")["hosts"])
    raw, secret_keys, problems = job_config({**job(), "manager": "lab-h2"}, "exp1", tmp_path)
    assert problems == []
    assert parse_stack_config(raw, secret_keys).leader.name == "lab-h2"
    raw, secret_keys, _ = job_config(job(), "exp1", tmp_path)
    assert parse_stack_config(raw, secret_keys).leader.name == "lab-h1"


def test_a_manager_that_is_not_a_manager_of_the_cluster_is_refused(tmp_path: Path) -> None:
    """A job's `manager` that is a worker of its cluster is refused, naming the
    cluster's managers."""
    cluster_file(tmp_path, hosts=stack_config("lab8")["hosts"])
    raw, secret_keys, _ = job_config({**job(), "manager": "lab-h4"}, "exp1", tmp_path)
    with pytest.raises(ConfigError) as err:
        parse_stack_config(raw, secret_keys)
    assert err.value.problems == [
        "manager: 'lab-h4' is not a manager of cluster 'c1'; allowed: lab-h1, lab-h2, lab-h3"
    ]


def test_manager_key_outside_a_job_is_refused() -> None:
    """`manager` in a single or cluster stack is refused: those go through their first
    manager."""
    with pytest.raises(ConfigError, match="manager: 'lab-h1' in a stack of kind 'single'"):
        parse_stack_config({**stack_config("dev"), "manager": "lab-h1"}, {"secrets"})


def test_a_clusters_manager_key_does_not_reach_its_jobs(tmp_path: Path) -> None:
    """The cluster file's own keys a job does not take include `manager`: a job's way in
    is its own file's."""
    cluster_file(tmp_path, hosts=stack_config("lab8")["hosts"], manager="lab-h2")
    raw, _, problems = job_config(job(), "exp1", tmp_path)
    assert problems == [] and "manager" not in raw
