"""The collective-ring check across every node of a hostfile (the deployment
guides' "all-reduce across all nodes works" check), with its bus bandwidth.

Run on every node at once, from the master, over the SSH the image already has:

    pdsh -w <addresses> python -m dss_train.collective --hostfile H --me %h

(pdsh puts each target's address in place of `%h`). Each process takes its rank
from its address's line in the hostfile (rank 0 = the first line, the master),
joins a gloo group at the first address, all-reduces a float32 tensor of
`rank + 1` at each size, and checks that every element is n(n+1)/2. Rank 0
prints one JSON line per size: bytes, seconds per all-reduce, bus bandwidth
(2(n-1)/n x bytes / time, the figure nccl-tests report) and whether the sum was
right. Exit status 1 if any sum was wrong. Rank parsing and the bandwidth
formula are pure (unit-tested on the host); the run needs torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import DssError

DEFAULT_SIZES = (1 << 10, 1 << 20, 16 << 20)


def hostfile_addresses(text: str) -> list[str]:
    """The addresses of a DeepSpeed hostfile (`addr slots=N` lines), in order."""
    return [
        line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]


def rank_of(addresses: list[str], me: str) -> int:
    """This node's rank: the index of its address in the hostfile."""
    try:
        return addresses.index(me)
    except ValueError:
        raise DssError(f"{me!r} is not in the hostfile {addresses}") from None


def expected_sum(world: int) -> float:
    """Every element after all-reducing `rank + 1` over `world` ranks."""
    return world * (world + 1) / 2


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """All-reduce bus bandwidth in bytes/s: what each link carries, 2(n-1)/n x size."""
    if world < 2 or seconds <= 0:
        return 0.0
    return 2 * (world - 1) / world * nbytes / seconds


def run(
    addresses: list[str], rank: int, port: int, sizes: list[int], iters: int
) -> list[dict[str, Any]]:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    world = len(addresses)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{addresses[0]}:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    try:
        rows = []
        for nbytes in sizes:
            t = torch.full((max(nbytes // 4, 1),), float(rank + 1))
            dist.all_reduce(t)  # warm-up (connections, buffers)
            ok = bool(torch.all(t == expected_sum(world)))
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                t.fill_(float(rank + 1))
                dist.all_reduce(t)
                ok = ok and bool(torch.all(t == expected_sum(world)))
            seconds = (time.perf_counter() - start) / iters
            rows.append(
                {
                    "bytes": nbytes,
                    "ranks": world,
                    "seconds": seconds,
                    "busbw_MBps": bus_bandwidth(nbytes, seconds, world) / 1e6,
                    "sum_ok": ok,
                }
            )
        return rows
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dss_train.collective", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--hostfile", required=True, help="DeepSpeed hostfile; rank 0 is its first line")
    p.add_argument("--me", required=True, help="this node's address in the hostfile (pdsh: %%h)")
    p.add_argument(
        "--port", type=int, default=29600, help="rendezvous port on rank 0 (default 29600)"
    )
    p.add_argument(
        "--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="message sizes in bytes"
    )
    p.add_argument("--iters", type=int, default=3, help="timed all-reduces per size (default 3)")
    p.add_argument(
        "--ifname",
        default=os.environ.get("GLOO_SOCKET_IFNAME", "eth0"),
        help="interface gloo uses (default: $GLOO_SOCKET_IFNAME or eth0, the overlay)",
    )
    a = p.parse_args(argv)
    try:
        addresses = hostfile_addresses(Path(a.hostfile).read_text())
        rank = rank_of(addresses, a.me)
    except (OSError, DssError) as e:
        print(f"collective: {e}", file=sys.stderr)
        return 2
    os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    rows = run(addresses, rank, a.port, a.sizes, a.iters)
    if rank == 0:
        for row in rows:
            print(json.dumps(row), flush=True)
    return 0 if all(r["sum_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
