"""GPU and NIC health in the host facts against lab hosts (issue 21): the facts read
each fact over real SSH from a lab host whose `nvidia-smi` and `dmesg` are faked per
host (lab/hostfiles.py); a faked Xid line and a faked retired page are refused naming
host, GPU and remedy, and a refresh reports them as drift; a drained host is read, not
judged, and its baseline moves on, so it comes back clean. The NIC's speed and error
counters are the lab host's real veth sysfs files, faked where a test needs a slow or
erring link by a file bind-mounted over them in that host's mount namespace
(harness.lab.sysfs_faked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.configs import dev_on_hosts, unprefixed
from harness.lab import sysfs_faked
from infra.components.hostfacts import facts_props
from infra.config import StackConfig, parse_stack_config
from infra.providers.hostfacts import HostFactsProvider
from infra.render.remedy import drain_remedies
from lab import config as c
from lab import hostfiles as hf
from tests.lab.conftest import Lab, outs

pytestmark = pytest.mark.lab

GPU = c.gpu_uuids(2, 2)[1]
"""lab-h2's second fake GPU."""


def spare_config(
    nic: dict[str, int] | None = None, dcgm: int | None = None, **lab_h2: Any
) -> StackConfig:
    """The dev stack on 4 lab hosts, lab-h4 a spare (only lab-h2 is read here), so that
    lab-h2 can be drained (two training hosts stay); `nic`: preflight.nic; `dcgm`:
    preflight.dcgm_diag_level."""
    raw = unprefixed(dev_on_hosts(4, 2))
    raw["hosts"][3]["spare"] = True
    raw["hosts"][1].update(lab_h2)
    if nic is not None:
        raw.setdefault("preflight", {})["nic"] = nic
    if dcgm is not None:
        raw.setdefault("preflight", {})["dcgm_diag_level"] = dcgm
    return parse_stack_config(raw)


@pytest.fixture
def cfg() -> StackConfig:
    return spare_config()


@pytest.fixture
def health(bare_lab: Lab) -> Iterator[Lab]:
    """The lab with no faults written after each test."""
    try:
        yield bare_lab
    finally:
        for i in (1, 2):
            bare_lab.paths.host(i).gpu_health.unlink(missing_ok=True)
            bare_lab.paths.host(i).kernel_log.unlink(missing_ok=True)
            bare_lab.paths.host(i).dcgm_diag.unlink(missing_ok=True)


def props(cfg: StackConfig, name: str) -> dict[str, Any]:
    """The facts resource's inputs for a host, as the program passes them."""
    host = next(h for h in cfg.hosts if h.name == name)
    return {**facts_props(cfg, host, drain_remedies(cfg.hosts)[name]), "observed": None}


def test_healthy_gpus_pass_and_are_observed(health: Lab, cfg: StackConfig) -> None:
    """Healthy fake GPUs and a quiet kernel log pass; every GPU's health is observed."""
    created = outs(HostFactsProvider().create(props(cfg, "lab-h2")))
    seen = created["observed"]["health"]
    assert sorted(seen["gpus"]) == sorted(c.gpu_uuids(2, 2))
    assert seen["xids"] == [] and seen["boot_id"]
    assert created["health_baseline"]["boot_id"] == seen["boot_id"]


def test_an_xid_is_refused_naming_host_code_line_and_remedy(health: Lab, cfg: StackConfig) -> None:
    """An Xid 79 line in lab-h2's kernel log stops the deployment: host, code, the
    driver's line and the drain remedy."""
    health.paths.host(2).kernel_log.write_text(hf.xid_line(1234.5, 79))
    with pytest.raises(Exception) as e:
        HostFactsProvider().create(props(cfg, "lab-h2"))
    msg = str(e.value)
    assert "host lab-h2: GPU Xid error(s) 79 in the kernel log since the last check" in msg
    assert "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off" in msg
    assert "remedy: set hosts[1].availability: drain (the spare lab-h4 takes its place)" in msg


def test_an_application_xid_is_not_a_fault(health: Lab, cfg: StackConfig) -> None:
    """Xid 13 (a graphics engine exception a program causes) passes."""
    health.paths.host(2).kernel_log.write_text(hf.xid_line(50.0, 13, what="Graphics Exception"))
    HostFactsProvider().create(props(cfg, "lab-h2"))


def test_a_pending_retired_page_is_refused_naming_the_gpu(health: Lab, cfg: StackConfig) -> None:
    """A GPU with a page pending retirement stops the deployment, naming that GPU."""
    health.paths.host(2).gpu_health.write_text(f"{GPU} 0 Yes No No\n")
    with pytest.raises(Exception, match=rf"host lab-h2: GPU {GPU} has memory pending retirement"):
        HostFactsProvider().create(props(cfg, "lab-h2"))


def test_failed_remap_and_ecc_are_refused(health: Lab, cfg: StackConfig) -> None:
    """A failed row remap and uncorrected ECC errors are each refused."""
    health.paths.host(2).gpu_health.write_text(f"{GPU} 3 No No Yes\n")
    with pytest.raises(Exception) as e:
        HostFactsProvider().create(props(cfg, "lab-h2"))
    assert f"GPU {GPU} ran out of spare rows (remapped_rows.failure: Yes)" in str(e.value)
    assert f"ecc.errors.uncorrected.volatile.total {GPU}: 3" in str(e.value)


def test_refresh_reports_an_xid_after_the_check_as_drift(health: Lab, cfg: StackConfig) -> None:
    """An Xid logged after the last check is drift naming the fact; one logged before
    the check that passed (the baseline) is not."""
    p = HostFactsProvider()
    want = props(cfg, "lab-h2")
    log = health.paths.host(2).kernel_log
    log.write_text(hf.xid_line(10.0, 13))
    created = outs(p.create(want))
    read = p.read("facts-lab-h2", created)
    assert p.diff("facts-lab-h2", outs(read), want).changes is False
    log.write_text(hf.xid_line(10.0, 13) + hf.xid_line(20.0, 48))
    read = p.read("facts-lab-h2", created)
    assert read.inputs is not None and read.inputs["expected"]["gpu_xid_errors"] == [48]
    assert p.diff("facts-lab-h2", outs(read), want).changes is True


def test_refresh_reports_a_retired_page_as_drift(health: Lab, cfg: StackConfig) -> None:
    """A page pending retirement after the check is drift naming the GPU."""
    p = HostFactsProvider()
    want = props(cfg, "lab-h2")
    created = outs(p.create(want))
    health.paths.host(2).gpu_health.write_text(f"{GPU} 0 Yes No No\n")
    read = p.read("facts-lab-h2", created)
    assert read.inputs is not None
    assert read.inputs["expected"]["gpus_retirement_pending"] == [GPU]


def test_a_drained_host_is_read_not_judged_and_comes_back_clean(
    health: Lab, cfg: StackConfig
) -> None:
    """Drained, the host with an Xid passes and its baseline moves past the Xid; back
    to active (repaired, nothing new logged) it passes."""
    p = HostFactsProvider()
    health.paths.host(2).kernel_log.write_text(hf.xid_line(30.0, 79))
    with pytest.raises(Exception, match="Xid"):
        p.create(props(cfg, "lab-h2"))
    drained_outs = outs(p.create(props(spare_config(availability="drain"), "lab-h2")))
    assert drained_outs["health_baseline"]["xid_ts"] == 30.0
    back = outs(p.update("facts-lab-h2", drained_outs, props(cfg, "lab-h2")))
    assert back["health_baseline"]["xid_ts"] == 30.0


SPEED = "/sys/class/net/eth0/speed"
CRC = "/sys/class/net/eth0/statistics/rx_crc_errors"


def test_nic_speed_is_read_from_the_host(health: Lab) -> None:
    """The lab host's real veth reports its speed (10000 Mb/s), which meets a 10000 floor."""
    cfg = spare_config(nic={"min_speed_Mbps": 10000})
    created = outs(HostFactsProvider().create(props(cfg, "lab-h2")))
    assert created["observed"]["nic_link"]["speed_Mbps"] == 10000
    assert "rx_crc_errors" in created["observed"]["nic_link"]["counters"]


def test_a_slow_link_is_refused_naming_host_nic_speed_and_remedy(health: Lab) -> None:
    """A NIC that negotiated 1000 Mb/s under a 10000 floor stops the deployment."""
    cfg = spare_config(nic={"min_speed_Mbps": 10000})
    with sysfs_faked(2, SPEED, "1000\n"), pytest.raises(Exception) as e:
        HostFactsProvider().create(props(cfg, "lab-h2"))
    msg = str(e.value)
    assert (
        "host lab-h2: NIC eth0 negotiated 1000 Mb/s, under preflight.nic.min_speed_Mbps 10000"
        in msg
    )
    assert "remedy: set hosts[1].availability: drain (the spare lab-h4 takes its place)" in msg


def test_nic_errors_since_the_check_are_drift_and_refused(health: Lab) -> None:
    """CRC errors counted before the check are its baseline; 37 more after it are drift
    naming the counter, and the update is refused with the figures."""
    cfg = spare_config(nic={"max_errors": 0})
    p = HostFactsProvider()
    want = props(cfg, "lab-h2")
    with sysfs_faked(2, CRC, "5\n") as crc:
        created = outs(p.create(want))
        assert created["nic_baseline"]["counters"]["rx_crc_errors"] == 5
        assert p.diff("facts-lab-h2", outs(p.read("facts-lab-h2", created)), want).changes is False
        crc.write_text("42\n")
        read = p.read("facts-lab-h2", created)
        assert read.inputs is not None
        assert read.inputs["expected"]["nic_link_errors"] == {"rx_crc_errors": 37}
        assert p.diff("facts-lab-h2", outs(read), want).changes is True
        with pytest.raises(Exception) as e:
            p.update("facts-lab-h2", created, want)
    assert "host lab-h2: NIC eth0 counted 37 link error(s) since the last check" in str(e.value)
    assert "(rx_crc_errors +37), over preflight.nic.max_errors 0" in str(e.value)


def test_dcgm_diagnostic_passes_on_healthy_gpus(health: Lab) -> None:
    """With preflight.dcgm_diag_level 1, the host's dcgmi runs over SSH and passes."""
    created = outs(HostFactsProvider().create(props(spare_config(dcgm=1), "lab-h2")))
    assert created["observed"]["dcgm"] == {"tool": True, "rc": 0, "failures": [], "error": ""}


def test_a_failed_dcgm_test_is_refused_naming_gpu_and_remedy(health: Lab) -> None:
    """A GPU DCGM fails stops the deployment: host, level, test, GPU, DCGM's words, remedy."""
    health.paths.host(2).dcgm_diag.write_text(hf.dcgm_diag_json(2, {1: "Persistence mode off"}))
    with pytest.raises(Exception) as e:
        HostFactsProvider().create(props(spare_config(dcgm=1), "lab-h2"))
    msg = str(e.value)
    assert "host lab-h2: `dcgmi diag -r 1` failed: software on GPU 1 (Persistence mode off)" in msg
    assert "remedy: set hosts[1].availability: drain (the spare lab-h4 takes its place)" in msg


def test_level_one_runs_again_at_refresh_and_is_drift(health: Lab) -> None:
    """At level 1 a refresh runs the diagnostic again: a GPU failing since is drift."""
    p = HostFactsProvider()
    want = props(spare_config(dcgm=1), "lab-h2")
    created = outs(p.create(want))
    health.paths.host(2).dcgm_diag.write_text(hf.dcgm_diag_json(2, {0: "bad"}, major=3))
    read = p.read("facts-lab-h2", created)
    assert read.inputs is not None
    assert read.inputs["expected"]["dcgm_diag_failures"] == ["Page Retirement/Row Remap: GPU 0"]
    assert p.diff("facts-lab-h2", outs(read), want).changes is True


def test_higher_levels_do_not_run_beside_a_live_job(health: Lab) -> None:
    """At level 2 a refresh keeps the last check's verdict (it would load the GPUs);
    the next update runs it and refuses."""
    p = HostFactsProvider()
    want = props(spare_config(dcgm=2), "lab-h2")
    created = outs(p.create(want))
    health.paths.host(2).dcgm_diag.write_text(hf.dcgm_diag_json(2, {0: "bad"}))
    read = p.read("facts-lab-h2", created)
    assert read.inputs is not None and read.inputs["expected"]["dcgm_diag_failures"] == []
    with pytest.raises(Exception, match=r"`dcgmi diag -r 2` failed: software on GPU 0"):
        p.update("facts-lab-h2", created, want)
