"""Read the environment, write one file per rank: no torch, no training.

Every rank writes `out/rank-<RANK>.txt`, relative to the job's output dir
(DSS_OUTPUT_DIR on a deepspeed-swarm cluster, else the current directory), with what
it sees: its rank, the world size, its host, its working directory, GREETING (set it
in `training.env`) and FROM_DEEPSPEED_ENV (set by `.deepspeed_env` beside this file,
which DeepSpeed's launcher exports on every node).

    python train.py
"""

import os
import socket
from pathlib import Path

SEEN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GREETING", "FROM_DEEPSPEED_ENV")


def main():
    rank = os.environ.get("RANK", "0")
    out_dir = Path(os.environ.get("DSS_OUTPUT_DIR", ".")) / "out"
    out_dir.mkdir(parents=True, exist_ok=True)

    lines = [f"{name}={os.environ.get(name, '')}" for name in SEEN]
    lines += [f"HOST={socket.gethostname()}", f"CWD={os.getcwd()}"]

    # Written aside and renamed: a reader never sees half a file.
    path = out_dir / f"rank-{rank}.txt"
    tmp = out_dir / f".rank-{rank}.txt.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    print(f"rank {rank}: GREETING={os.environ.get('GREETING', '')!r}, wrote {path}", flush=True)


if __name__ == "__main__":
    main()
