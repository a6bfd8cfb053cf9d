set -eu
svc=ds-master
health_fmt='{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}'
ctr=""
for i in $(seq 1 300); do
  ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=$svc" | head -n1)
  if [ -n "$ctr" ]; then
    health=$(docker inspect -f "$health_fmt" "$ctr")
    [ "$health" = healthy ] || [ "$health" = none ] && break
  fi
  sleep 1
done
if [ -z "$ctr" ]; then
  echo "no running task of $svc on $(hostname) after 300s" >&2
  exit 1
fi
printf %s '10.0.1.3 slots=8
10.0.1.4 slots=8
10.0.1.5 slots=8
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/hostfile) && cat > /data/.dss/run/hostfile.new.$(hostname).$$ && mv /data/.dss/run/hostfile.new.$(hostname).$$ /data/.dss/run/hostfile'
printf %s 'FROM_DS_ENV=1
A=b c
DSS_CODE_DIR=/data/code/run/0123456789ab
DSS_CHECKPOINT_DIR=/data/checkpoints/run
DSS_LOG_DIR=/data/logs/run
DSS_OUTPUT_DIR=/data/outputs/run
DSS_METRICS_FILE=/data/logs/run/metrics.jsonl
DSS_NODES=10.0.1.3,10.0.1.4,10.0.1.5
DSS_HOSTFILE=/data/.dss/run/hostfile
DSS_STEPS=1000
DSS_CKPT_EVERY=50
DSS_DS_CONFIG=/opt/dss/ds_config.json
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/env) && cat > /data/.dss/run/env.new.$(hostname).$$ && mv /data/.dss/run/env.new.$(hostname).$$ /data/.dss/run/env'
printf %s '"""A launch attempt'"'"'s exit record: what the run'"'"'s supervisor writes after each attempt of
a `training.command` launch, and the probe reads (infra/render/probe.py), so the run'"'"'s
state comes from the processes'"'"' exit codes and not from a metrics file the user'"'"'s
script may never write.

    exitrecord.py record LOG START RC NODE OUT

reads LOG (the launcher log) after line START (this attempt'"'"'s lines), and writes OUT
(`exit.<node>.json` in the run'"'"'s log dir, replaced whole) as one JSON object: `rc` (the
launcher'"'"'s exit code), `time`, `node` (the supervisor'"'"'s: `master` under pdsh, else the
node rank), `rank` (the global rank torchrun'"'"'s failure summary names as the root
cause, or a `[rankN]:` prefix of the traceback'"'"'s lines, else null), `host` (the pdsh
prefix of those lines: the node the traceback came from, else null), `error` (the last
lines of the attempt'"'"'s first Python traceback) and `exception` (its last line).

The first traceback, not the last: the rank that raised prints first, and what follows
is its consequence (its peers'"'"' broken collectives, `Connection closed by peer`, and
torchrun'"'"'s own `ChildFailedError` traceback before its summary).

What the launchers print (DeepSpeed 0.17.6, torch.distributed.elastic):
- under pdsh every remote line is prefixed `<host>: `; DeepSpeed'"'"'s per-node launcher
  logs `... exits with return code = N` naming the last rank it spawned, not the one
  that failed, so no rank is read from it;
- torchrun ends a failure with a summary whose `Root Cause (first observed failure)`
  section holds `rank      : N (local_rank: M)` and `exitcode  : N (pid: P)`; newer
  torch prefixes a rank'"'"'s lines with `[rankN]: `.

Stdlib only: the supervisor runs it with the task'"'"'s python3, beside the hostfile.
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
"""How many of the traceback'"'"'s last lines a record keeps (the exception last)."""
_ROOT_CAUSE = "Root Cause (first observed failure):"
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:\s*$")


def first_traceback(lines: Sequence[str]) -> tuple[str, list[str]]:
    """The first Python traceback in `lines`: the prefix its lines carry (pdsh'"'"'s
    `host: `, torch'"'"'s `[rankN]: `; '"'"''"'"' without one) and its lines, prefix removed,
    through the exception line (the first unindented line after the header)."""
    start = next((i for i, line in enumerate(lines) if TRACEBACK in line), None)
    if start is None:
        return "", []
    prefix = lines[start][: lines[start].index(TRACEBACK)]
    block = [TRACEBACK]
    for line in lines[start + 1 :]:
        if not line.startswith(prefix):
            continue  # another node'"'"'s or rank'"'"'s line, interleaved
        text = line[len(prefix) :]
        block.append(text)
        if text and not text[0].isspace():
            break  # the exception line ends the traceback
    return prefix, block


def split_prefix(prefix: str) -> tuple[str | None, int | None]:
    """A traceback'"'"'s line prefix as (pdsh host, torch rank): `10.0.1.3: [rank1]: `."""
    rank = None
    if m := _RANK_PREFIX.search(prefix):
        rank = int(m.group(1))
        prefix = prefix[: m.start()]
    host = prefix.strip().removesuffix(":").strip() or None
    return host, rank


def root_cause_rank(lines: Sequence[str]) -> int | None:
    """The global rank torchrun'"'"'s failure summary names as the first failure, or None."""
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
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/exitrecord.py) && cat > /data/.dss/run/exitrecord.py.new.$(hostname).$$ && mv /data/.dss/run/exitrecord.py.new.$(hostname).$$ /data/.dss/run/exitrecord.py'
printf %s '"""The training'"'"'s ranks among a task'"'"'s processes, for a stop that lets them checkpoint.

A stop (a launch replaced or destroyed, or follow_master'"'"'s stop from another host)
must reach the ranks first: each finishes its step, they agree through the step'"'"'s
all-reduce to stop, save a last checkpoint together and exit 0, and the launchers then
end by themselves. Signalled too, a launcher tears down what the ranks write to:
DeepSpeed'"'"'s runner kills pdsh and with it the SSH sessions every rank'"'"'s stdout goes
through, so a rank'"'"'s next `print` fails on the closed pipe before it saves (the
relaunch then resumed from the periodic checkpoint before). Only what is left when
the ranks are gone is signalled (infra/render/launch.py `stop_script`).

A rank is a process whose first argument that is not an option (nor an interpreter) is
the training script itself: `python -u <script> --local_rank=N ...` (DeepSpeed'"'"'s
per-node launcher), `python -S <client> -u <script> ...` (the fork server'"'"'s client in
python'"'"'s place, run through its `#!` line), `python -u <script> ...` (torchrun'"'"'s workers).
A launcher names the script later, after its own program or module: the runner
(`python .../bin/deepspeed ... <script>`), `-m deepspeed.launcher.launch`, torchrun,
pdsh, its ssh sessions and their remote shells (`bash -c "... <script> ..."`).

Stdlib only, no state: the stop script runs it with `python -` (the source on stdin,
the script in the environment, so no command line but the ranks'"'"' own names it), and
follow_master'"'"'s takeover program imports it from beside itself.

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
end by themselves within about a second of their ranks: DeepSpeed'"'"'s polls each 1 s)."""


def is_rank(argv: Sequence[str], script: str) -> bool:
    """Whether a process with command line `argv` runs `script` as its program (after
    the interpreter and its options), not as a later argument of a launcher. A program
    named `python*` before it stands in for the interpreter and is passed over: the
    fork server'"'"'s client, which the kernel runs through its `#!` line, so its command
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
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/ranks.py) && cat > /data/.dss/run/ranks.py.new.$(hostname).$$ && mv /data/.dss/run/ranks.py.new.$(hostname).$$ /data/.dss/run/ranks.py'
printf %s '"""The ranks of a training.command among a node'"'"'s processes, for its stop.

A command'"'"'s target is a script (its absolute path in the code dir, as ranks.py finds
it) or a module (`python -m mypkg.train`, `deepspeed --module`, `torchrun -m`): a rank
of a module is a process whose interpreter runs `-m <module>` as its program. Its
launchers name the module too, but later on their lines (`python <bin>/deepspeed ...
--module <module>`, `torchrun ... -m <module>`) or run another module first
(`python -u -m deepspeed.launcher.launch ...`), so they are not ranks.

A file of its own beside ranks.py (the launch of a command writes both beside the
hostfile, on the shared data dir): ranks.py'"'"'s text is part of every launch'"'"'s stop
script, which must not change for runs without a command. Under pdsh the master'"'"'s stop
runs this program on every hostfile host, through the same pdsh and sshd port the
launcher uses, so every rank gets its SIGTERM at once (a script that saves with a
collective on SIGTERM needs its peers to save too).

    commandranks.py count|term|kill      (the script in $DSS_STOP_SCRIPT, or the module
                                          in $DSS_STOP_MODULE)

prints how many ranks there are (`term`, `kill`: after sending each SIGTERM, SIGKILL;
under pdsh the stop'"'"'s SIGKILL after the grace reaches the other hosts'"'"' ranks so).
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
    import ranks  # type: ignore[import-not-found,no-redef]  # the task'"'"'s copy, same module

MODULE_ENV = "DSS_STOP_MODULE"
SIGNALS: dict[str, signal.Signals | None] = {
    "count": None,
    "term": signal.SIGTERM,
    "kill": signal.SIGKILL,
}
"""The operations, and the signal each sends to the ranks."""


def is_module_rank(argv: Sequence[str], module: str) -> bool:
    """Whether a process with command line `argv` runs `module` as its program: after
    the interpreter and its options (and a fork server'"'"'s client named `python*`, as in
    ranks.py), `-m <module>` or `-m<module>`; `-m` ends the interpreter'"'"'s options."""
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
        print(f"usage: {usage} {'"'"'|'"'"'.join(SIGNALS)}", file=sys.stderr)
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
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/commandranks.py) && cat > /data/.dss/run/commandranks.py.new.$(hostname).$$ && mv /data/.dss/run/commandranks.py.new.$(hostname).$$ /data/.dss/run/commandranks.py'
printf %s '# deepspeed-swarm: the supervisor of run run (infra/render/run.py)
set -u
mkdir -p /data/logs/run
cd /data/code/run/0123456789ab
rm -f /data/logs/run/exit.master.json
mkdir -p /data/checkpoints/run /data/outputs/run
export DS_ENV_FILE=/data/.dss/run/env
set +u
while IFS= read -r dss_line || [ -n "$dss_line" ]; do
  eval "export ${dss_line%%=*}=\"${dss_line#*=}\""
done </data/.dss/run/env
set -u
restarts=0
while :; do
  rc=0
  start=$(grep -c "" /data/logs/run/launcher.log 2>/dev/null || true)
  deepspeed --hostfile=/data/.dss/run/hostfile --master_addr=10.0.1.3 --master_port=29500 --launcher=pdsh --ssh_port=2222 --num_nodes=3 /data/code/run/0123456789ab/train.py --deepspeed --deepspeed_config ds_config.json >>/data/logs/run/launcher.log 2>&1 || rc=$?
  python3 /data/.dss/run/exitrecord.py record /data/logs/run/launcher.log "${start:-0}" "$rc" master /data/logs/run/exit.master.json 2>/dev/null || true
  if [ "$rc" -eq 0 ] || [ -e /data/.dss/run/stop ]; then exit "$rc"; fi
  if [ "$restarts" -ge 3 ]; then
    echo "supervisor: the launcher exited $rc; restart budget (3) spent" >>/data/logs/run/launcher.log
    printf '"'"'{"event":"budget_spent","exit_code":%s,"time":%s}\n'"'"' "$rc" "$(date +%s)" \
      >>/data/logs/run/restarts.jsonl
    exit "$rc"
  fi
  restarts=$((restarts + 1))
  printf '"'"'{"event":"restart","restart":%s,"exit_code":%s,"time":%s}\n'"'"' \
    "$restarts" "$rc" "$(date +%s)" >>/data/logs/run/restarts.jsonl
  echo "supervisor: the launcher exited $rc; restart $restarts of 3 in 10s, from the newest complete checkpoint" >>/data/logs/run/launcher.log
  pkill -KILL -f /data/code/run/0123456789ab/train.py 2>/dev/null || true
  sleep 10
  if [ -e /data/.dss/run/stop ]; then exit "$rc"; fi
done
' | docker exec -i -u 1000 "$ctr" sh -c 'mkdir -p $(dirname /data/.dss/run/supervise.sh) && cat > /data/.dss/run/supervise.sh.new.$(hostname).$$ && mv /data/.dss/run/supervise.sh.new.$(hostname).$$ /data/.dss/run/supervise.sh'
if docker exec "$ctr" pgrep -f deepspeed >/dev/null 2>&1 || docker exec "$ctr" pgrep -f /data/.dss/run/supervise.sh >/dev/null 2>&1; then  # idempotent
  echo "launch: $svc on $(hostname) already running; kept"
  exit 0
fi
docker exec -u 1000 "$ctr" rm -f /data/.dss/run/stop
docker exec -d -u 1000 "$ctr" sh -c 'exec sh /data/.dss/run/supervise.sh'
echo "launch: started on $(hostname) in $ctr"
