"""harness.gpu: the host script a GPU check carries is the provider's, NIC left open."""

from __future__ import annotations

import pytest

from harness import gpu

pytestmark = pytest.mark.unit


def test_host_script_reads_health_nic_and_dcgm_with_the_nic_open() -> None:
    """Every reading but fabric and peers is in it, the NIC named by the placeholder."""
    script = gpu.host_script()
    for piece in ("--query-gpu=uuid,driver_version", "remapped_rows.pending", "nic|speed",
                  "dcgmi diag -r 1", f"/sys/class/net/{gpu.NIC_PLACEHOLDER}/mtu"):  # fmt: skip
        assert piece in script
    assert "ibv_devinfo" not in script


def test_main_refuses_other_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """Anything but `host-script` is a usage error (exit 2), nothing printed to stdout."""
    assert gpu.main(["facts"]) == 2
    assert capsys.readouterr().out == ""
