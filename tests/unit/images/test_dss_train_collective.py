"""dss_train.collective: ranks from the hostfile, the expected sum, bus bandwidth."""

from __future__ import annotations

import pytest
from dss_train import DssError
from dss_train.collective import bus_bandwidth, expected_sum, hostfile_addresses, rank_of

pytestmark = pytest.mark.unit

HOSTFILE = "10.0.1.20 slots=1\n10.0.1.25 slots=1\n\n# a comment\n10.0.1.21 slots=1\n"


def test_hostfile_addresses_in_order() -> None:
    """Addresses come in the hostfile's order; blank and comment lines are skipped."""
    assert hostfile_addresses(HOSTFILE) == ["10.0.1.20", "10.0.1.25", "10.0.1.21"]


def test_rank_is_the_line_of_the_address() -> None:
    """A node's rank is its address's line: the master's first line is rank 0."""
    addrs = hostfile_addresses(HOSTFILE)
    assert [rank_of(addrs, a) for a in addrs] == [0, 1, 2]


def test_unknown_address_is_refused() -> None:
    """An address not in the hostfile is an error naming it."""
    with pytest.raises(DssError, match=r"'10.0.1.99' is not in the hostfile"):
        rank_of(hostfile_addresses(HOSTFILE), "10.0.1.99")


def test_expected_sum_of_rank_plus_one() -> None:
    """All-reducing rank + 1 over 8 ranks gives 36 in every element."""
    assert expected_sum(8) == 36


def test_bus_bandwidth_is_the_ring_factor_times_algbw() -> None:
    """Bus bandwidth = 2(n-1)/n x bytes / seconds (nccl-tests' definition)."""
    assert bus_bandwidth(8_000_000, 1.0, 8) == pytest.approx(14_000_000)
    assert bus_bandwidth(1024, 0.5, 1) == 0.0, "one rank moves nothing"
