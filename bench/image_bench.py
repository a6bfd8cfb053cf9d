#!/usr/bin/env python3
"""Benchmark of the CPU training image: size, rebuild time after a one-line change to
the training script, and 2-rank CPU training throughput. Prints a markdown table
with the command that produced it.

    python3 bench/image_bench.py [--steps 12] [--image dss-train:cpu]

Builds the image first with images/build (cached). The rebuild is measured on a
copy of images/ (the work tree is not touched). Throughput: two containers on one
docker network, torchrun with one rank each (gloo), median samples/s of the steps
after the first two, with the default ds_config (micro batch 1, accumulation 8).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"


def sh(*cmd: str, env: dict[str, str] | None = None, check: bool = True,
       timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


def size_mb(tag: str) -> float:
    return int(sh("docker", "image", "inspect", "-f", "{{.Size}}", tag).stdout) / 1e6


def build(images_dir: Path, tag: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = sh(str(images_dir / "build"), env=os.environ | {"DSS_IMAGE": tag})
    return time.perf_counter() - t0, r.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--image", default="dss-train:cpu")
    a = ap.parse_args()
    cmd = "python3 bench/image_bench.py " + " ".join(sys.argv[1:])

    full_s, log = build(IMAGES, a.image)
    builder = "BuildKit" if "buildkit builder" in log else "legacy builder"
    bases = [w for line in log.splitlines() if line.startswith("building ")
             for w in line.replace("(", " ").replace(")", " ").split() if w.startswith("dss-base:")]

    # Rebuild after a one-line change to the training script, on a copy of images/.
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp) / "images"
        shutil.copytree(IMAGES, ctx, ignore=shutil.ignore_patterns(".wheelhouse", "__pycache__"))
        with (ctx / "train.py").open("a") as f:
            f.write(f"# bench {uuid.uuid4().hex}\n")
        tag = f"dss-train:bench-{uuid.uuid4().hex[:8]}"
        rebuild_s, _ = build(ctx, tag)
        t0 = time.perf_counter()
        with (ctx / "train.py").open("a") as f:
            f.write(f"# bench {uuid.uuid4().hex}\n")
        env = os.environ | {"DOCKER_BUILDKIT": "1" if builder == "BuildKit" else "0"}
        sh("docker", "build", "-q", "-f", str(ctx / "Dockerfile"), "--build-arg",
           f"BASE_IMAGE={bases[0]}", "--build-arg", f"BUILD_IMAGE={bases[1]}", "-t", tag,
           str(ctx), env=env)
        docker_rebuild_s = time.perf_counter() - t0
        sh("docker", "rmi", "-f", tag, check=False)

    # 2-rank CPU throughput.
    pre = f"dss-bench-{uuid.uuid4().hex[:6]}"
    net, vol = f"{pre}-net", f"{pre}-vol"
    names = [f"{pre}-n{r}" for r in (0, 1)]
    try:
        sh("docker", "network", "create", net)
        sh("docker", "volume", "create", vol)
        for r, n in enumerate(names):
            sh("docker", "run", "-d", "--name", n, "--hostname", f"n{r}", "--network", net,
               "--network-alias", f"n{r}", "-v", f"{vol}:/data", a.image,
               "torchrun", "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(r),
               "--master_addr", "n0", "--master_port", "29500", "train.py", "--run", "bench",
               "--steps", str(a.steps), "--ckpt-every", "100000")
        codes = [sh("docker", "wait", n).stdout.strip() for n in names]
        if codes != ["0", "0"]:
            logs = sh("docker", "logs", names[0], check=False).stderr[-3000:]
            sys.exit("training failed:\n" + logs)
        text = sh("docker", "run", "--rm", "--network", "none", "-v", f"{vol}:/data",
                  "--entrypoint", "cat", a.image, "/data/logs/bench/metrics.jsonl").stdout
        recs = [json.loads(x) for x in text.splitlines() if x.strip()][2:]
    finally:
        for n in names:
            sh("docker", "rm", "-f", n, check=False)
        sh("docker", "network", "rm", net, check=False)
        sh("docker", "volume", "rm", "-f", vol, check=False)
    sps = statistics.median(r["samples_per_s"] for r in recs)
    tps = statistics.median(r["tokens_per_s"] for r in recs)
    cpus = os.cpu_count()

    rows = [
        ("CPU image size (`docker image inspect .Size`)", f"{size_mb(a.image):.0f} MB", a.image),
        ("runtime base size", f"{size_mb(bases[0]):.0f} MB", bases[0]),
        ("build-stage base size (not shipped)", f"{size_mb(bases[1]):.0f} MB", bases[1]),
        ("images/build, everything cached", f"{full_s:.1f} s", builder),
        ("images/build after a one-line change to train.py", f"{rebuild_s:.1f} s",
         "incl. wheelhouse/base checks"),
        ("docker build after a one-line change to train.py", f"{docker_rebuild_s:.1f} s", builder),
        ("2-rank CPU training, samples/s (median)", f"{sps:.2f}",
         f"torchrun, 2 containers, gloo, {cpus} host CPUs, steps 3-{a.steps}"),
        ("2-rank CPU training, tokens/s (median)", f"{tps:.0f}", "seq len 64"),
        ("CUDA image", "not built", "needs an NVIDIA CUDA base from a registry; none reachable"),
    ]
    print(f"Command: `{cmd.strip()}`\n")
    print("| what | value | notes |\n| --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
