set -u
ctr=$(docker ps -q --filter "label=com.docker.swarm.service.name=ds-master" | head -n1)
[ -n "$ctr" ] || { echo "stop: no task of ds-master here; nothing to stop"; exit 0; }
docker exec -u 1000 "$ctr" touch /data/.dss/run/stop || true
ranks() {
  docker exec -i -e DSS_STOP_SCRIPT=/opt/dss/train.py "$ctr" /opt/venv/bin/python -I -S - "$1" <<'DSS_RANKS' 2>/dev/null || echo "?"
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
DSS_RANKS
}
n=$(ranks term)
case "$n" in
  ''|*[!0-9]*)
    echo "stop: cannot tell the ranks apart ($n); SIGTERM to all of the training" >&2
    docker exec "$ctr" pkill -TERM -f /opt/dss/train.py || true ;;
  *) echo "stop: SIGTERM to $n rank(s)" ;;
esac
idle=0
end=$(($(date +%s) + 120))
while [ "$(date +%s)" -lt "$end" ]; do
  if ! docker exec "$ctr" pgrep -f /opt/dss/train.py >/dev/null 2>&1; then
    echo "stop: training exited"
    exit 0
  fi
  if [ "$(ranks count)" = 0 ]; then idle=$((idle + 1)); else idle=0; fi
  if [ "$idle" -eq 5 ]; then  # about that many seconds: one round each
    echo "stop: no rank left; SIGTERM to the launchers"
    docker exec "$ctr" pkill -TERM -f /opt/dss/train.py || true
  fi
  sleep 1
done
echo "stop: still running after 120s (blocked: a peer is gone?); SIGKILL" >&2
docker exec "$ctr" pkill -KILL -f /opt/dss/train.py || true
