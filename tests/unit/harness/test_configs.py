"""harness.configs: the committed stacks' configs for throwaway lab stacks."""

from __future__ import annotations

import pytest
import yaml

from harness import ROOT
from harness.configs import (
    HOSTS,
    SECRETS,
    TRAINING,
    dev_config,
    dev_on_hosts,
    dev_stack_config,
    lab8_config,
    lab_hosts,
    unprefixed,
)
from harness.lab import socket

pytestmark = pytest.mark.unit


def test_committed_configs_leave_out_their_secrets() -> None:
    """The encrypted secrets of dev and lab8 are dropped (a throwaway stack sets its own)."""
    assert SECRETS not in dev_config() and SECRETS not in lab8_config()


def test_training_overrides_keep_the_other_keys() -> None:
    """Overrides replace the keys given; the stack file's other training keys stay."""
    committed = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"][TRAINING]
    training = dev_config(run_name="r", steps=7)[TRAINING]
    assert training == {**committed, "run_name": "r", "steps": 7}


def test_lab_hosts_take_the_labs_addresses_and_ssh_urls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each host gets its lab name, address and ssh:// engine (as prod reaches its hosts);
    the first `managers` manage."""
    monkeypatch.delenv("DSS_LAB_TRANSPORT", raising=False)
    hosts = lab_hosts({"nic": "eth0", "role": "worker"}, 4, managers=3, labels={"a": "b"})
    assert [h["name"] for h in hosts] == ["lab-h1", "lab-h2", "lab-h3", "lab-h4"]
    assert hosts[3]["address"] == "10.213.0.14"
    assert hosts[1]["docker_host"] == "ssh://root@10.213.0.12"
    assert [h["role"] for h in hosts] == ["manager"] * 3 + ["worker"]
    assert all(h["nic"] == "eth0" and h["labels"] == {"a": "b"} for h in hosts)


def test_the_unix_transport_puts_every_lab_host_on_its_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSS_LAB_TRANSPORT", "unix")
    assert [h["docker_host"] for h in lab8_config()[HOSTS]] == [
        f"unix://{socket(i)}" for i in range(1, 10)
    ]


def test_another_transport_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSS_LAB_TRANSPORT", "tcp")
    with pytest.raises(ValueError, match="DSS_LAB_TRANSPORT='tcp'; allowed: ssh, unix"):
        dev_config()


def test_dev_on_hosts_has_an_odd_number_of_managers() -> None:
    """Under 3 hosts one manager, from 3 on three (Raft wants an odd count)."""
    for count, managers in ((2, 1), (3, 3), (8, 3)):
        hosts = dev_on_hosts(count, 2, run_name="r")[HOSTS]
        assert sum(h["role"] == "manager" for h in hosts) == managers, count
        assert all(h["gpus"] == {"count": 2, "model": "fake-gpu"} for h in hosts)


def test_lab_hosts_take_each_hosts_own_fields() -> None:
    """`per_host[i - 1]` lands on lab-h<i> after the fields every host shares; a list
    that is not one entry a host is refused, naming both counts."""
    own = [{"gpus": {"count": 8, "model": "fake-a"}}, {"gpus": {"count": 4, "model": "fake-b"}}]
    hosts = lab_hosts({"nic": "eth0"}, 2, 1, own, gpus={"count": 1}, labels={"a": "b"})
    assert [h["gpus"] for h in hosts] == [o["gpus"] for o in own]
    assert all(h["labels"] == {"a": "b"} for h in hosts)
    with pytest.raises(ValueError, match=r"per_host has 2 entries; allowed: one per host \(3\)"):
        lab_hosts({}, 3, 1, own)


def test_dev_on_hosts_gives_each_host_its_count_and_model() -> None:
    """One count and model stand for every host (the default model the lab's, as
    before); per-host lists as `lab up --gpus 8,4 --gpu-models fake-a,fake-b` takes
    them; a list not one a host is refused as `lab up` refuses it."""
    assert dev_on_hosts(2, 2) == dev_config() | {
        HOSTS: [h | {"gpus": {"count": 2, "model": "fake-gpu"}} for h in dev_config()[HOSTS]]
    }
    hosts = dev_on_hosts(3, [8, 8, 4], gpu_models=["fake-a", "fake-a", "fake-b"])[HOSTS]
    assert [h["gpus"] for h in hosts] == [
        {"count": 8, "model": "fake-a"}, {"count": 8, "model": "fake-a"},
        {"count": 4, "model": "fake-b"},
    ]  # fmt: skip
    one_model = dev_on_hosts(2, [2, 1], gpu_models="fake-b", run_name="r")
    assert [h["gpus"]["model"] for h in one_model[HOSTS]] == ["fake-b", "fake-b"]
    assert one_model[TRAINING]["run_name"] == "r"
    with pytest.raises(ValueError, match=r"--gpus '8,4': 2 values for --hosts 3"):
        dev_on_hosts(3, [8, 4])


def test_unprefixed_drops_other_namespaces() -> None:
    """Only the project's keys are kept, without their prefix."""
    assert unprefixed({"deepspeed-swarm:hosts": [], "docker:host": "x"}) == {"hosts": []}


def test_dev_stack_config_validates() -> None:
    """The dev stack's config parses into the two lab hosts, lab-h1 leading."""
    cfg = dev_stack_config()
    assert [h.name for h in cfg.hosts] == ["lab-h1", "lab-h2"]
    assert cfg.leader.name == "lab-h1"
