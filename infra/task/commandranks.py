"""The ranks of a training.command among a node's processes, for its stop.

A command's target is a script (its absolute path in the code dir, as ranks.py finds
it) or a module (`python -m mypkg.train`, `deepspeed --module`, `torchrun -m`): a rank
of a module is a process whose interpreter runs `-m <module>` as its program. Its
launchers name the module too, but later on their lines (`python <bin>/deepspeed ...
--module <module>`, `torchrun ... -m <module>`) or run another module first
(`python -u -m deepspeed.launcher.launch ...`), so they are not ranks.

A file of its own beside ranks.py (the launch of a command writes both beside the
hostfile, on the shared data dir): ranks.py's text is part of every launch's stop
script, which must not change for runs without a command. Under pdsh the master's stop
runs this program on every hostfile host, through the same pdsh and sshd port the
launcher uses, so every rank gets its SIGTERM at once (a script that saves with a
collective on SIGTERM needs its peers to save too).

    commandranks.py count|term|kill      (the script in $DSS_STOP_SCRIPT, or the module
                                          in $DSS_STOP_MODULE)

prints how many ranks there are (`term`, `kill`: after sending each SIGTERM, SIGKILL;
under pdsh the stop's SIGKILL after the grace reaches the other hosts' ranks so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence

if __package__:
    from infra.task import ranks
else:  # run as a script in the task: ranks.py is beside it, on sys.path[0]
    import ranks  # type: ignore[import-not-found,no-redef]  # the task's copy, same module

MODULE_ENV = "DSS_STOP_MODULE"
SIGNALS: dict[str, signal.Signals | None] = {
    "count": None,
    "term": signal.SIGTERM,
    "kill": signal.SIGKILL,
}
"""The operations, and the signal each sends to the ranks."""


def is_module_rank(argv: Sequence[str], module: str) -> bool:
    """Whether a process with command line `argv` runs `module` as its program: after
    the interpreter and its options (and a fork server's client named `python*`, as in
    ranks.py), `-m <module>` or `-m<module>`; `-m` ends the interpreter's options."""
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if arg.startswith("-m"):
            return (arg[2:] or (rest[0] if rest else "")) == module
        if arg.startswith("-") or os.path.basename(arg).startswith("python"):
            continue
        return False
    return False


def module_pids(module: str, proc: str = "/proc") -> list[int]:
    """The pids of the ranks of `module` under `proc`, this process excluded."""
    out = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "cmdline"), "rb") as f:
                raw = f.read()
        except OSError:  # it ended while read
            continue
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if is_module_rank(argv, module):
            out.append(int(entry))
    return sorted(out)


def find(env: Mapping[str, str], proc: str = "/proc") -> list[int] | None:
    """The ranks named by the environment (a module, else a script); None: neither."""
    if env.get(MODULE_ENV):
        return module_pids(env[MODULE_ENV], proc)
    if env.get(ranks.SCRIPT_ENV):
        return ranks.rank_pids(env[ranks.SCRIPT_ENV], proc)
    return None


def main(argv: Sequence[str], proc: str = "/proc") -> int:
    pids = find(os.environ, proc)
    if len(argv) != 1 or argv[0] not in SIGNALS or pids is None:
        usage = f"{ranks.SCRIPT_ENV}=<script> | {MODULE_ENV}=<module> commandranks.py"
        print(f"usage: {usage} {'|'.join(SIGNALS)}", file=sys.stderr)
        return 2
    signum = SIGNALS[argv[0]]
    if signum is not None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(pid, signum)
    print(len(pids))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
