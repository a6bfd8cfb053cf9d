"""The host-script parsers and the lab's fake nvidia-smi, held to what a real H200
printed (tests/unit/infra/fixtures/gpu-h200, recorded by scripts/gpu-check) and to
NVML's view of the same GPU, recorded beside it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.gpu import GPU_HOST_PROPS, NIC_PLACEHOLDER
from infra.providers.dcgm import parse_dcgm
from infra.providers.health import parse_health, seen_health
from infra.providers.hostfacts import host_script, parse_facts
from infra.providers.nic import parse_nic
from lab import config as c
from lab import hostfiles as hf

pytestmark = pytest.mark.unit

RECORD = Path(__file__).parents[1] / "fixtures" / "gpu-h200"
CSV = "--format=csv,noheader,nounits"


def _nvml() -> dict[str, Any]:
    out: dict[str, Any] = json.loads((RECORD / "nvml.json").read_text())
    return out


def _out() -> str:
    return (RECORD / "host-script.out").read_text()


def test_recorded_script_is_the_one_the_provider_sends() -> None:
    """The record came from the script HostFacts sends now (the GPU host's NIC in place of
    the placeholder): a changed query fails here until it is recorded again."""
    recorded = (RECORD / "host-script.sh").read_text()
    nic = recorded.split("/sys/class/net/", 1)[1].split("/", 1)[0]
    assert host_script(GPU_HOST_PROPS).replace(NIC_PLACEHOLDER, nic) == recorded


def test_facts_name_the_gpus_and_driver_nvml_names() -> None:
    """parse_facts reads NVML's GPU UUIDs and driver version from the real output."""
    facts = parse_facts(_out())
    assert facts["gpu_uuids"] == sorted(g["uuid"] for g in _nvml()["gpus"])
    assert facts["driver_version"] == _nvml()["driver"]
    assert facts["docker_version"] == "" and "toolkit_version" not in facts


def test_health_reads_nvmls_counts_and_flags() -> None:
    """parse_health's ECC count and flags per GPU are NVML's (N/A as not pending)."""
    gpus = parse_health(_out())["gpus"]
    for g in _nvml()["gpus"]:
        pending = bool(g["retired_pages_pending"]) or bool(g["remapped_rows_pending"])
        assert gpus[g["uuid"]] == {
            "ecc": g["ecc_uncorrected_volatile"],
            "pending": pending,
            "remap_failed": g["remapped_rows_failure"],
        }


def test_healthy_h200_is_healthy() -> None:
    """The recorded healthy GPU gives no health fact ('[N/A]' retired pages is no fault)."""
    assert "[N/A]" in (RECORD / "nvidia-smi-ecc.txt").read_text()
    assert set(map(bool, seen_health(parse_health(_out()), None).values())) == {False}


def test_nic_and_dcgm_lines_parse_without_the_tools() -> None:
    """A NIC that reports no speed reads as -1; no dcgmi reads as a missing tool."""
    assert parse_nic(_out())["speed_Mbps"] == -1
    assert parse_dcgm(_out())["tool"] is False


def _fake_smi(tmp_path: Path) -> Path:
    hp = c.HostPaths(tmp_path, 1)
    hp.dir.mkdir()
    hp.gpu_list.write_text("".join(g["uuid"] + "\n" for g in _nvml()["gpus"]))
    hp.driver_version.write_text(_nvml()["driver"] + "\n")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(hf.render_fake_nvidia_smi(hp))
    return smi


def _run(smi: Path, *args: str) -> str:
    return subprocess.run(
        ["sh", str(smi), *args], capture_output=True, text=True, check=True
    ).stdout


def test_fake_facts_query_prints_what_the_h200_printed(tmp_path: Path) -> None:
    """The lab's fake, given the H200's GPU and driver, prints its facts query byte for byte."""
    got = _run(_fake_smi(tmp_path), "--query-gpu=uuid,driver_version", CSV)
    assert got == (RECORD / "nvidia-smi-uuid-driver.txt").read_text()


def test_fake_health_queries_parse_as_the_h200s(tmp_path: Path) -> None:
    """The fake's healthy answers ('No' where Hopper prints '[N/A]') parse as the real ones."""
    smi = _fake_smi(tmp_path)
    fake = "".join(
        f"{tag}|{line}\n"
        for tag, query in (
            ("ecc", "uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending"),
            ("remap", "uuid,remapped_rows.pending,remapped_rows.failure"),
        )
        for line in _run(smi, f"--query-gpu={query}", CSV).splitlines()
    )
    real = "".join(
        f"{tag}|{line}\n"
        for tag in ("ecc", "remap")
        for line in (RECORD / f"nvidia-smi-{tag}.txt").read_text().splitlines()
    )
    assert parse_health(fake)["gpus"] == parse_health(real)["gpus"]
