"""A launch attempt's exit record: what the run's supervisor writes after each attempt of
a `training.command` launch, and the probe reads (infra/render/probe.py), so the run's
state comes from the processes' exit codes and not from a metrics file the user's
script may never write.

    exitrecord.py record LOG START RC NODE OUT

reads LOG (the launcher log) after line START (this attempt's lines), and writes OUT
(`exit.<node>.json` in the run's log dir, replaced whole) as one JSON object: `rc` (the
launcher's exit code), `time`, `node` (the supervisor's: `master` under pdsh, else the
node rank), `rank` (the global rank torchrun's failure summary names as the root
cause, or a `[rankN]:` prefix of the traceback's lines, else null), `host` (the pdsh
prefix of those lines: the node the traceback came from, else null), `error` (the last
lines of the attempt's first Python traceback) and `exception` (its last line).

The first traceback, not the last: the rank that raised prints first, and what follows
is its consequence (its peers' broken collectives, `Connection closed by peer`, and
torchrun's own `ChildFailedError` traceback before its summary).

What the launchers print (DeepSpeed 0.17.6, torch.distributed.elastic):
- under pdsh every remote line is prefixed `<host>: `; DeepSpeed's per-node launcher
  logs `... exits with return code = N` naming the last rank it spawned, not the one
  that failed, so no rank is read from it;
- torchrun ends a failure with a summary whose `Root Cause (first observed failure)`
  section holds `rank      : N (local_rank: M)` and `exitcode  : N (pid: P)`; newer
  torch prefixes a rank's lines with `[rankN]: `.

Stdlib only: the supervisor runs it with the task's python3, beside the hostfile.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

TRACEBACK = "Traceback (most recent call last):"
ERROR_LINES = 6
"""How many of the traceback's last lines a record keeps (the exception last)."""
_ROOT_CAUSE = "Root Cause (first observed failure):"
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:\s*$")


def first_traceback(lines: Sequence[str]) -> tuple[str, list[str]]:
    """The first Python traceback in `lines`: the prefix its lines carry (pdsh's
    `host: `, torch's `[rankN]: `; '' without one) and its lines, prefix removed,
    through the exception line (the first unindented line after the header)."""
    start = next((i for i, line in enumerate(lines) if TRACEBACK in line), None)
    if start is None:
        return "", []
    prefix = lines[start][: lines[start].index(TRACEBACK)]
    block = [TRACEBACK]
    for line in lines[start + 1 :]:
        if not line.startswith(prefix):
            continue  # another node's or rank's line, interleaved
        text = line[len(prefix) :]
        block.append(text)
        if text and not text[0].isspace():
            break  # the exception line ends the traceback
    return prefix, block


def split_prefix(prefix: str) -> tuple[str | None, int | None]:
    """A traceback's line prefix as (pdsh host, torch rank): `10.0.1.3: [rank1]: `."""
    rank = None
    if m := _RANK_PREFIX.search(prefix):
        rank = int(m.group(1))
        prefix = prefix[: m.start()]
    host = prefix.strip().removesuffix(":").strip() or None
    return host, rank


def root_cause_rank(lines: Sequence[str]) -> int | None:
    """The global rank torchrun's failure summary names as the first failure, or None."""
    for i in range(len(lines) - 1, -1, -1):
        if _ROOT_CAUSE in lines[i]:
            for line in lines[i + 1 : i + 12]:
                if m := _RANK.match(line):
                    return int(m.group(1))
            return None
    return None


def record(lines: Sequence[str], rc: int, node: str, now: float) -> dict[str, Any]:
    """The exit record of an attempt whose launcher log lines are `lines`."""
    prefix, block = first_traceback(lines) if rc != 0 else ("", [])
    host, prefix_rank = split_prefix(prefix)
    error = block[-ERROR_LINES:]
    rank = root_cause_rank(lines) if rc != 0 else None
    return {
        "rc": rc,
        "time": int(now),
        "node": node,
        "rank": prefix_rank if rank is None else rank,
        "host": host,
        "error": error,
        "exception": error[-1].strip() if len(error) > 1 else "",
    }


def main(argv: Sequence[str]) -> int:
    if len(argv) != 6 or argv[0] != "record":
        print("usage: exitrecord.py record LOG START RC NODE OUT", file=sys.stderr)
        return 2
    _, log, start, rc, node, out = argv
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()[int(start or 0) :]
    except OSError:
        lines = []
    data = record(lines, int(rc), node, time.time())
    with open(out + ".new", "w") as f:
        json.dump(data, f, sort_keys=True)
    os.replace(out + ".new", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
