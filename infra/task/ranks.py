"""The training's ranks among a task's processes, for a stop that lets them checkpoint.

A stop (a launch replaced or destroyed, or follow_master's stop from another host)
must reach the ranks first: each finishes its step, they agree through the step's
all-reduce to stop, save a last checkpoint together and exit 0, and the launchers then
end by themselves. Signalled too, a launcher tears down what the ranks write to:
DeepSpeed's runner kills pdsh and with it the SSH sessions every rank's stdout goes
through, so a rank's next `print` fails on the closed pipe before it saves (the
relaunch then resumed from the periodic checkpoint before). Only what is left when
the ranks are gone is signalled (infra/render/launch.py `stop_script`).

A rank is a process whose first argument that is not an option (nor an interpreter) is
the training script itself: `python -u <script> --local_rank=N ...` (DeepSpeed's
per-node launcher), `python -S <client> -u <script> ...` (the fork server's client in
python's place, run through its `#!` line), `python -u <script> ...` (torchrun's workers).
A launcher names the script later, after its own program or module: the runner
(`python .../bin/deepspeed ... <script>`), `-m deepspeed.launcher.launch`, torchrun,
pdsh, its ssh sessions and their remote shells (`bash -c "... <script> ..."`).

Stdlib only, no state: the stop script runs it with `python -` (the source on stdin,
the script in the environment, so no command line but the ranks' own names it), and
follow_master's takeover program imports it from beside itself.

    ranks.py count|term      (the script in $DSS_STOP_SCRIPT)

prints how many ranks there are (`term`: after sending each SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence

SCRIPT_ENV = "DSS_STOP_SCRIPT"
LAUNCHERS_AFTER_S = 5
"""A stop signals the launchers left once no rank has been there for this long (they
end by themselves within about a second of their ranks: DeepSpeed's polls each 1 s)."""


def is_rank(argv: Sequence[str], script: str) -> bool:
    """Whether a process with command line `argv` runs `script` as its program (after
    the interpreter and its options), not as a later argument of a launcher. A program
    named `python*` before it stands in for the interpreter and is passed over: the
    fork server's client, which the kernel runs through its `#!` line, so its command
    line is `<python> -S <client> -u <script> ...`."""
    for arg in argv[1:]:
        if arg == script:
            return True
        if arg.startswith("-") or os.path.basename(arg).startswith("python"):
            continue
        return False
    return False


def rank_pids(script: str, proc: str = "/proc") -> list[int]:
    """The pids of the ranks of `script` in the process table under `proc`, this
    process excluded; processes that end while read are skipped."""
    out = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "cmdline"), "rb") as f:
                raw = f.read()
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if is_rank(argv, script):
            out.append(int(entry))
    return sorted(out)


def signal_ranks(script: str, signum: int = signal.SIGTERM, proc: str = "/proc") -> int:
    """Send `signum` to every rank of `script`; how many there were."""
    pids = rank_pids(script, proc)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(pid, signum)
    return len(pids)


def main(argv: Sequence[str]) -> int:
    script = os.environ.get(SCRIPT_ENV, "")
    if len(argv) != 1 or argv[0] not in ("count", "term") or not script:
        print(f"usage: {SCRIPT_ENV}=<script> ranks.py count|term", file=sys.stderr)
        return 2
    print(signal_ranks(script) if argv[0] == "term" else len(rank_pids(script)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
