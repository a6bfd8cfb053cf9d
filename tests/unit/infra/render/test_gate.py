"""The collective gate's pure half (infra/render/gate.py): the task command, the
figures, the pair rounds, the localisation on synthetic figures, the messages."""

from __future__ import annotations

import json
import shlex

import pytest

from infra.render.gate import (
    GATE_HOSTFILE,
    Figure,
    GateResult,
    Localisation,
    collective_script,
    failure_message,
    localise,
    pair_rounds,
    parse_figures,
    ring_verdict,
    run_failure,
)

pytestmark = pytest.mark.unit

H = [f"h{i}" for i in range(1, 9)]


def row(nbytes: int, busbw: float, ok: bool = True) -> str:
    return json.dumps(
        {"bytes": nbytes, "ranks": 2, "seconds": 0.01, "busbw_MBps": busbw, "sum_ok": ok}
    )


def test_script_writes_the_groups_hostfile_and_runs_the_collective_as_me() -> None:
    """The task writes the group's hostfile (rank 0 first) and runs as its own address."""
    s = collective_script(["10.0.1.3", "10.0.1.2"], "10.0.1.2", 29600, [1024, 2048], 3)
    assert (
        f"printf %s {shlex.quote('10.0.1.3 slots=1' + chr(10) + '10.0.1.2 slots=1' + chr(10))}" in s
    )
    assert "exec timeout -s KILL 90 /opt/venv/bin/python -m dss_train.collective" in s
    assert f"--hostfile {GATE_HOSTFILE} --me 10.0.1.2 --port 29600 --iters 3 --sizes 1024 2048" in s


def test_figures_are_the_json_lines_only() -> None:
    """torch's warnings between the JSON lines are ignored; each row is read."""
    text = f"UserWarning: something\n{row(1024, 1.5)}\nnoise {{\n{row(2048, 3.0, ok=False)}\n"
    assert parse_figures(text) == [
        Figure(1024, 0.01, 1.5, True),
        Figure(2048, 0.01, 3.0, False),
    ]


def test_ring_passes_at_or_over_the_floor_at_the_largest_size() -> None:
    """Only the largest size counts: a slow small size does not fail the gate."""
    assert ring_verdict([Figure(1024, 1, 1.0, True), Figure(1 << 24, 1, 50.0, True)], 50) == ""


def test_ring_under_the_floor_names_figure_size_and_key() -> None:
    """Under the floor: the figure, the size and the key that sets the floor."""
    why = ring_verdict([Figure(1 << 24, 1, 2.5, True)], 20)
    assert why == (
        "bus bandwidth 2.5 MB/s at 16777216 bytes is under preflight.gate.min_busbw_MBps 20"
    )


def test_a_wrong_sum_fails_whatever_the_bandwidth() -> None:
    """A wrong all-reduce sum fails even at full speed."""
    assert "wrong sum" in ring_verdict([Figure(1 << 24, 1, 1e6, False)], 1)


def test_no_figures_fails() -> None:
    """No figure printed is a failure, not a pass."""
    assert ring_verdict([], 1) == "the all-reduce printed no figures"


def test_two_hosts_make_one_pair() -> None:
    """Two hosts: one round of one pair."""
    assert pair_rounds(["a", "b"]) == [[("a", "b")]]


def test_one_host_makes_no_pair() -> None:
    """One host: nothing to pair."""
    assert pair_rounds(["a"]) == []


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_every_host_meets_two_partners_in_rounds_of_disjoint_pairs(n: int) -> None:
    """Each round's pairs share no host; every host is in exactly two pairs."""
    rounds = pair_rounds(H[:n])
    for r in rounds:
        flat = [h for p in r for h in p]
        assert len(flat) == len(set(flat))
    for h in H[:n]:
        assert sum(h in p for r in rounds for p in r) == 2
    assert len(rounds) == (2 if n % 2 == 0 else 3)


def test_a_slow_host_is_the_one_whose_every_pair_is_slow() -> None:
    """8 hosts, h5 slow: its two pairs are under the floor, every other pair is fine."""
    pairs = {p: (2.0 if "h5" in p else 300.0) for r in pair_rounds(H) for p in r}
    loc = localise(H, pairs, 20)
    assert (loc.slow, loc.links) == (["h5"], [])


def test_a_slow_link_between_two_healthy_hosts_is_named_as_a_link() -> None:
    """One slow pair whose hosts are fine with their other partner: the link."""
    pairs = {p: 300.0 for r in pair_rounds(H) for p in r}
    pairs[("h3", "h4")] = 1.0
    loc = localise(H, pairs, 20)
    assert (loc.slow, loc.links) == ([], [("h3", "h4")])


def test_two_hosts_name_both() -> None:
    """With two hosts the one slow pair blames both (no third host to tell them apart)."""
    assert localise(["a", "b"], {("a", "b"): 1.0}, 20).slow == ["a", "b"]


def test_three_hosts_localise_the_slow_one() -> None:
    """Three hosts (the engine test's lab): the slow host is named alone."""
    pairs = {p: (3.0 if "c" in p else 400.0) for r in pair_rounds(["a", "b", "c"]) for p in r}
    assert localise(["a", "b", "c"], pairs, 20).slow == ["c"]


def test_a_pair_that_failed_to_run_counts_as_slow() -> None:
    """A pair whose all-reduce failed is recorded as 0 and blames like a slow one."""
    pairs = {("a", "b"): 400.0, ("b", "c"): 0.0, ("c", "a"): 0.0}
    assert localise(["a", "b", "c"], pairs, 20).slow == ["c"]


def test_failure_message_names_host_figures_and_remedy() -> None:
    """The refusal names the reason, every pair's figure, the slow host and its remedy."""
    loc = Localisation(["c"], [], {("a", "b"): 400.0, ("b", "c"): 3.0, ("c", "a"): 2.5})
    msg = failure_message("bus bandwidth 2.5 MB/s ...", loc, {"c": "set hosts[2]..."}, 20)
    assert msg.splitlines() == [
        "collective gate failed: bus bandwidth 2.5 MB/s ...; the launch did not start",
        "  pair a <-> b: 400.0 MB/s (at or over the floor 20)",
        "  pair b <-> c: 3.0 MB/s (under the floor 20)",
        "  pair c <-> a: 2.5 MB/s (under the floor 20)",
        "  slow host(s): c (every pair of theirs was slow)",
        "  remedy for c: set hosts[2]...",
    ]


def test_a_failed_pair_is_shown_failed_with_its_reason() -> None:
    """A pair whose run failed says so and why, not a figure of 0."""
    loc = localise(["a", "b"], {("a", "b"): 0.0}, 20, {("a", "b"): "timed out after 90s"})
    assert "  pair a <-> b: failed (timed out after 90s)" in failure_message("x", loc, {}, 20)


def test_a_killed_run_reads_as_timed_out() -> None:
    """Exit 137 (timeout's KILL) is a timeout; another failure gives the last line."""
    assert run_failure(137, "").startswith("timed out after 90s")
    assert run_failure(1, "Traceback\nRuntimeError: Connection closed\n") == (
        "RuntimeError: Connection closed"
    )


def test_result_outputs_hold_the_largest_sizes_bandwidth() -> None:
    """The record's busbw is the largest size's, rounded; the figures are kept."""
    r = GateResult(
        "passed", figures=[Figure(1024, 0.1, 1.234, True), Figure(4096, 0.1, 9.876, True)]
    )
    out = r.outputs()
    assert out["busbw_MBps"] == 9.88
    assert [f["bytes"] for f in out["figures"]] == [1024, 4096]


def test_failure_message_says_how_long_the_gate_took() -> None:
    """Given the gate's time, the first line says it."""
    first = failure_message("x", None, {}, 20, 12.34).splitlines()[0]
    assert first == "collective gate failed: x; the launch did not start (the gate took 12.3 s)"
