"""infra.providers.peers: the host's reverse lookups of its peers, parsed and judged."""

from __future__ import annotations

import subprocess

import pytest

from infra.providers import peers

pytestmark = pytest.mark.unit

PEERS = {"10.0.0.2": "gpu-02", "10.0.0.3": "gpu-03"}


def test_parse_reads_only_its_own_lines() -> None:
    """Each `peer_lookup=` line gives the address, whether it came in time and its name."""
    text = "hostname=gpu-01\npeer_lookup=10.0.0.2 3 gpu-02\npeer_lookup=10.0.0.3 2004 ?\njunk\n"
    assert peers.parse_peers(text) == {
        "10.0.0.2": {"in_time": True, "name": "gpu-02"},
        "10.0.0.3": {"in_time": False, "name": ""},
    }


def test_a_quick_no_such_name_is_healthy() -> None:
    """A lookup that fails fast costs the rendezvous nothing: only slowness is judged."""
    lookups = peers.parse_peers("peer_lookup=10.0.0.2 12 ?\npeer_lookup=10.0.0.3 1 gpu-03\n")
    assert peers.seen_peers({"peer_lookups": lookups}, PEERS) == {"slow_peer_lookups": []}


def test_a_peer_without_a_line_counts_as_slow() -> None:
    """A peer the script did not report (cut short) is not taken as answered."""
    lookups = peers.parse_peers("peer_lookup=10.0.0.2 3 gpu-02\n")
    assert peers.slow_lookups(lookups, PEERS) == ["10.0.0.3"]


def test_problem_names_host_peer_deadline_and_remedy() -> None:
    """The refusal names the host, each slow peer with its name, the deadline and the fix."""
    observed = {"peer_lookups": peers.parse_peers("peer_lookup=10.0.0.3 2001 ?\n")}
    text = peers.peers_problem("gpu-01", observed, PEERS)
    named = "10.0.0.2 (gpu-02), 10.0.0.3 (gpu-03)"
    assert text.startswith(f"host gpu-01: the reverse lookup of {named}")
    assert f"within {peers.LOOKUP_DEADLINE_S} s" in text and "/etc/hosts" in text


def test_script_runs_in_sh_and_reports_every_peer() -> None:
    """The rendered script, run by sh, prints one line a peer: loopback is named from the
    hosts file, and a peer given by name is looked up, then its address reversed."""
    script = peers.peers_script({"127.0.0.1": "self", "localhost": "me", "192.0.2.7": "none"})
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    got = peers.parse_peers(out.stdout)
    assert sorted(got) == ["127.0.0.1", "192.0.2.7", "localhost"]
    assert got["127.0.0.1"] == {"in_time": True, "name": "localhost"}
    assert got["localhost"]["name"] == "localhost"
