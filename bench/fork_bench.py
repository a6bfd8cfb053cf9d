#!/usr/bin/env python3
"""Benchmark of a rank's start from a warm parent (issue 22's zygote): the time from
asking for a rank to its first tensor operation done, for a new process (as every
rank starts today: `import torch, deepspeed`, the training module, the accelerator)
beside a `fork` of a parent that has already done those imports. Each child does one
1024x1024 matmul on the accelerator (DS_ACCELERATOR, cpu when unset). Prints a
markdown table with the command that produced it.

    python3 -m bench.fork_bench [--starts 5] [--python CMD]

--python is the interpreter that has torch and DeepSpeed, split like a shell line: on
a GPU host, the host's python (scripts/gpu-check runs this there with DS_ACCELERATOR
=cuda); here, the training image, e.g.
`--python "docker run --rm -i --entrypoint python -w /opt/dss dss-train:cpu"`.

Fork safety is what decides whether a zygote can work on a GPU host: CUDA cannot be
used in a child forked after the parent initialised it. The probe reports, for the
parent, `torch.cuda.is_initialized()` after the warm imports, and for each child
whether its operation ran; tests/gpu/test_fork.py asserts both ways on a real GPU.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from typing import Any

# Runs in the interpreter with torch (stdin). argv: mode ("bench" N | "fork" WARM).
# WARM, what the parent does before it forks: "torch" (torch and torch._dynamo, which
# DeepSpeed imports) or "deepspeed" (everything a rank imports, and the accelerator).
# The child imports what it lacks, then runs its first operation.
PROBE = r"""
import json, os, subprocess, sys, time
DEV = "cuda" if os.environ.get("DS_ACCELERATOR") == "cuda" else "cpu"
WARM = {"torch": "import torch, torch._dynamo\n",
        "deepspeed": ("import torch, deepspeed, dss_train.main\n"
                      "from deepspeed.accelerator import get_accelerator\n"
                      "get_accelerator().device_name()\n")}
FIRST = WARM["deepspeed"] + (
    f"x = torch.randn(1024, 1024, device={DEV!r})\n"
    "float((x @ x).sum().item())\n")

def child(t0):
    out = {}
    try:
        exec(FIRST, {})
        out["ok"] = True
    except Exception as e:
        out["ok"], out["error"] = False, f"{type(e).__name__}: {e}"[:300]
    out["seconds"] = time.perf_counter() - t0
    return out

def forked():
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(child(t0)).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)

def fresh():
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", FIRST], capture_output=True, text=True)
    return {"ok": p.returncode == 0, "seconds": time.perf_counter() - t0,
            "error": p.stderr.strip().splitlines()[-1][:300] if p.returncode else ""}

def warm(level):
    t0 = time.perf_counter()
    exec(WARM[level], {})
    import torch
    return {"seconds": time.perf_counter() - t0,
            "parent_cuda_initialized": torch.cuda.is_initialized()}

mode, arg = sys.argv[1], sys.argv[2]
if mode == "bench":
    n = int(arg)
    rows = {"fresh": [fresh() for _ in range(n)], "device": DEV}
    for level in ("torch", "deepspeed"):  # torch first: the deepspeed level includes it
        rows[level] = {**warm(level), "forks": [forked() for _ in range(n)]}
    import torch, deepspeed
    rows["torch_version"], rows["deepspeed_version"] = torch.__version__, deepspeed.__version__
    print(json.dumps(rows))
else:
    print(json.dumps({**warm(arg), "child": forked(), "device": DEV}))
"""


def run_probe(python: list[str], *args: str, timeout: float = 900) -> dict[str, Any]:
    """PROBE's JSON, run by `python` (`-` reads the program from stdin)."""
    proc = subprocess.run(
        [*python, "-", *args],
        input=PROBE,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"fork probe exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def table(rows: dict[str, Any], command: str) -> str:
    """The bench's markdown table: median and spread of each way, failures counted."""

    def cells(runs: list[dict[str, Any]]) -> str:
        ok = [r["seconds"] for r in runs if r["ok"]]
        failed = len(runs) - len(ok)
        if not ok:
            return f"all {failed} failed: {runs[0].get('error', '')[:100]}"
        spread = f"{min(ok):.2f}-{max(ok):.2f}"
        return f"{statistics.median(ok):.2f} s ({spread})" + (
            f", {failed} failed" if failed else ""
        )

    def warm(level: str) -> str:
        w = rows[level]
        init = "yes" if w["parent_cuda_initialized"] else "no"
        return f"{w['seconds']:.2f} s, CUDA initialised: {init}"

    return "\n".join(
        [
            f"`{command}` (torch {rows['torch_version']}, DeepSpeed {rows['deepspeed_version']}, "
            f"device {rows['device']}, median of {len(rows['fresh'])})",
            "",
            "| a rank's start, to its first 1024x1024 matmul on the device | time |",
            "| --- | --- |",
            "| new process (every import, the accelerator, the op): today "
            f"| {cells(rows['fresh'])} |",
            f"| fork of a parent that imported torch (child imports DeepSpeed) "
            f"| {cells(rows['torch']['forks'])} |",
            "| fork of a parent that imported DeepSpeed too "
            f"| {cells(rows['deepspeed']['forks'])} |",
            f"| the parent's imports: torch (then DeepSpeed on top) "
            f"| {warm('torch')} ({warm('deepspeed')}) |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", type=int, default=5, help="starts of each way (default 5)")
    p.add_argument("--python", default="python3", help="interpreter with torch (shell words)")
    a = p.parse_args(argv)
    rows = run_probe(shlex.split(a.python), "bench", str(a.starts))
    cmd = " ".join(
        ["python3 -m bench.fork_bench", shlex.join(sys.argv[1:] if argv is None else argv)]
    )
    print(table(rows, cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
