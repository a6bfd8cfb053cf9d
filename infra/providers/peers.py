"""How fast a host names its peers: what the host facts read on the host data plane
(infra/providers/hostfacts.py appends PEERS_SCRIPT for a host with `peers`).

Why: a training task on Swarm's `host` network uses its host's /etc/hosts and resolver,
not Docker's embedded DNS, and rank 0's c10d store looks up the name of every peer it
accepts (torch `socket.cpp`, `getnameinfo`), one after another. Where the resolver does
not answer, glibc waits out its timeout (5 s, two tries: 10 s) for each peer, so 63 peers
of an 8 x 8 job wait about ten minutes before the rendezvous ends, and the launch times
out; on the 8-host lab the collective gate hit its 90 s limit (docs/dataplane.md,
"Reverse DNS on the host network"). A quick "no such name" costs nothing: only an
answer that does not come in time is refused.

`getent hosts <address>` asks as glibc's getnameinfo does (nsswitch: files, then DNS),
under coreutils' `timeout`; a peer given by name (`hosts[].address` may be one) is looked
up, then its address reversed, as rank 0 sees it connect, both within the deadline. The
lookups run at once, so a host with slow peers answers the facts in about
LOOKUP_DEADLINE_S, not that times the peers.
"""

from __future__ import annotations

import shlex
from typing import Any

# The longest a reverse lookup of a peer may take. A hosts file answers in
# milliseconds, a DNS server in tens; glibc's first retry comes at 5 s.
LOOKUP_DEADLINE_S = 2

# Appended to the facts script and str.format()ed with {peers} (shell-quoted
# addresses): one `peer_lookup=<address> <ms> <name or ?>` line a peer (`set --`
# splits getent's line: the address, then the canonical name).
PEERS_SCRIPT = (
    r"""for a in {peers}; do
  (
    s=$(date +%s%N)
    set -- $(timeout """
    + str(LOOKUP_DEADLINE_S)
    + r""" getent hosts "$a" 2>/dev/null | head -n1)
    ip=${{1:-}} n=${{2:-}}
    if [ -n "$ip" ] && [ "$ip" != "$a" ]; then
      set -- $(timeout """
    + str(LOOKUP_DEADLINE_S)
    + r""" getent hosts "$ip" 2>/dev/null | head -n1)
      n=${{2:-}}
    fi
    e=$(date +%s%N)
    echo "peer_lookup=$a $(( (e - s) / 1000000 )) ${{n:-?}}"
  ) &
done
wait
"""
)

PEER_KEYS = ("slow_peer_lookups",)


def peers_script(peers: dict[str, str]) -> str:
    """PEERS_SCRIPT for these peers (address -> host name)."""
    return PEERS_SCRIPT.format(peers=" ".join(shlex.quote(a) for a in sorted(peers)))


def parse_peers(text: str) -> dict[str, dict[str, Any]]:
    """PEERS_SCRIPT's lines: per peer address, whether the lookup answered within
    LOOKUP_DEADLINE_S and the name it gave ("" for none). Not the milliseconds: the
    facts' outputs must not change from one refresh to the next on a healthy host."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith("peer_lookup="):
            continue
        parts = line.removeprefix("peer_lookup=").split()
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        addr, ms, name = parts
        in_time = int(ms) < LOOKUP_DEADLINE_S * 1000
        out[addr] = {"in_time": in_time, "name": "" if name == "?" else name}
    return out


def slow_lookups(lookups: dict[str, dict[str, Any]], peers: dict[str, str]) -> list[str]:
    """The peer addresses whose lookup did not answer within LOOKUP_DEADLINE_S (a peer
    with no line at all counts as slow: the script did not get to say)."""
    return sorted(a for a in peers if not (lookups.get(a) or {}).get("in_time"))


def seen_peers(observed: dict[str, Any], peers: dict[str, str]) -> dict[str, Any]:
    """The fact in the shape of `expected`: the slow peers' addresses (none is healthy)."""
    return {"slow_peer_lookups": slow_lookups(observed.get("peer_lookups") or {}, peers)}


def peers_problem(host: str, observed: dict[str, Any], peers: dict[str, str]) -> str:
    """The preflight's sentence for a host whose peer lookups do not answer in time."""
    slow = slow_lookups(observed.get("peer_lookups") or {}, peers)
    named = ", ".join(f"{a} ({peers[a]})" for a in slow)
    return (
        f"host {host}: the reverse lookup of {named} did not answer within "
        f"{LOOKUP_DEADLINE_S} s (`getent hosts <address>` on the host); on the host data plane "
        "rank 0's rendezvous looks up every peer and waits out the resolver (10 s a peer "
        "with glibc's defaults), so the launch times out: give the hosts each other's names "
        "in DNS or in /etc/hosts on every host (docs/dataplane.md, runbook step 0)"
    )
