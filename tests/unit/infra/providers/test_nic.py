"""infra.providers.nic: the NIC's speed and error counters as host facts."""

from __future__ import annotations

import pytest

from infra.providers import nic

pytestmark = pytest.mark.unit

TEXT = """hostname=h1
nic|boot_id=b1
nic|speed=100000
nic|rx_errors=7
nic|rx_crc_errors=5
nic|tx_errors=
nic|carrier_changes=2
speed=1
"""
BASE = {"boot_id": "b1", "counters": {"rx_errors": 7, "rx_crc_errors": 5, "carrier_changes": 2}}


def test_parse_reads_only_its_own_lines() -> None:
    """Speed and counters come from `nic|` lines; an empty counter is left out."""
    parsed = nic.parse_nic(TEXT)
    assert parsed == {"boot_id": "b1", "speed_Mbps": 100000, "counters": BASE["counters"]}


@pytest.mark.parametrize("said", ["-1", "", "Invalid argument"])
def test_a_link_without_speed_reads_as_minus_one(said: str) -> None:
    """A down link (-1) or an unreadable speed is no speed."""
    assert nic.parse_nic(f"nic|speed={said}\n")["speed_Mbps"] == -1


def test_counters_count_from_the_baseline() -> None:
    """Only what a counter grew by since the baseline counts."""
    now = {"boot_id": "b1", "counters": {"rx_errors": 9, "rx_crc_errors": 5, "carrier_changes": 4}}
    assert nic.grown(now, BASE) == {"rx_errors": 2, "carrier_changes": 2}


def test_a_first_check_or_a_reboot_only_takes_the_baseline() -> None:
    """Without a baseline of this boot nothing counts (the link coming up at boot is a
    carrier change); a counter below its baseline counts from zero."""
    assert nic.grown(nic.parse_nic(TEXT), None) == {}
    assert nic.grown({"boot_id": "b2", "counters": {"rx_errors": 3}}, BASE) == {}
    reset = {"boot_id": "b1", "counters": {"rx_errors": 1, "rx_crc_errors": 5}}
    assert nic.grown(reset, BASE) == {"rx_errors": 1}


def test_crc_errors_inside_rx_errors_count_once() -> None:
    """rx errors count as the larger of rx_errors and rx_crc_errors, plus tx and carrier."""
    increase = {"rx_errors": 4, "rx_crc_errors": 4, "tx_errors": 1, "carrier_changes": 2}
    assert nic.error_count(increase) == 7
    assert nic.error_count({"rx_crc_errors": 3}) == 3


def test_seen_has_only_the_limits_set() -> None:
    """No limit, no fact; a limit is met or not."""
    parsed = nic.parse_nic(TEXT)
    assert nic.seen_nic(parsed, {}, BASE) == {}
    assert nic.seen_nic(parsed, {"min_speed_Mbps": 100000}, BASE) == {
        "nic_speed_meets_minimum": True
    }
    assert nic.seen_nic(parsed, {"min_speed_Mbps": 200000}, BASE) == {
        "nic_speed_meets_minimum": False
    }


def test_errors_within_the_limit_are_healthy() -> None:
    """Errors up to max_errors read as none; over it, the counters that grew."""
    now = nic.parse_nic(TEXT.replace("rx_crc_errors=5", "rx_crc_errors=8"))
    assert nic.seen_nic(now, {"max_errors": 3}, BASE) == {"nic_link_errors": {}}
    assert nic.seen_nic(now, {"max_errors": 2}, BASE) == {"nic_link_errors": {"rx_crc_errors": 3}}


def test_a_first_check_passes_with_errors_counted_before_it() -> None:
    """Errors counted before the first check are its baseline, not a fault."""
    seen = nic.seen_nic(nic.parse_nic(TEXT), {"max_errors": 0}, None)
    assert seen == {"nic_link_errors": {}}


def test_problem_names_host_nic_figures_and_remedy() -> None:
    """The refusal names host, NIC, the speed or the counters, the limit and the remedy."""
    slow = nic.parse_nic("nic|speed=25000\n")
    said = nic.nic_problem(
        "h1", "ens1", "nic_speed_meets_minimum", slow, {"min_speed_Mbps": 100000}, None, "drain it"
    )
    assert said == (
        "host h1: NIC ens1 negotiated 25000 Mb/s, under preflight.nic.min_speed_Mbps 100000: a "
        "cable, transceiver or switch port that came up slow; the job would run at this "
        "host's pace; remedy: drain it"
    )
    down = nic.nic_problem(
        "h1", "ens1", "nic_speed_meets_minimum", nic.parse_nic(""), {"min_speed_Mbps": 1}, None, ""
    )
    assert "no speed (link down or not reported)" in down and "remedy" not in down
    base = {"boot_id": "b1", "counters": {}}
    errs = nic.nic_problem(
        "h1", "ens1", "nic_link_errors", nic.parse_nic(TEXT), {"max_errors": 0}, base, ""
    )
    # rx: the larger of rx_errors 7 and rx_crc_errors 5; with 2 carrier changes, 9.
    assert "counted 9 link error(s) since the last check" in errs
    assert "(carrier_changes +2, rx_crc_errors +5, rx_errors +7)" in errs


def test_baseline_is_this_boot_and_the_counters_now() -> None:
    """After a check the baseline holds the boot id and every counter."""
    assert nic.nic_baseline_of(nic.parse_nic(TEXT)) == BASE


@pytest.mark.parametrize(
    "limits", [{}, {"min_speed_Mbps": 1}, {"max_errors": 0}, {"min_speed_Mbps": 1, "max_errors": 0}]
)
def test_expected_names_the_facts_seen_for_the_same_limits(limits: dict[str, int]) -> None:
    """The expected facts and the seen ones have the same keys; healthy, the same values."""
    seen = nic.seen_nic(nic.parse_nic(TEXT), limits, BASE)
    assert nic.nic_expected(limits) == seen
