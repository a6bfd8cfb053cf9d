#!/usr/bin/env python3
"""Benchmark of the training image: size, rebuild time after a one-line change to
the training script, a training process's start (`import torch, deepspeed`) beside the
same image without byte-code, and 2-rank CPU training throughput; with --cuda the same for
the CUDA variant (images-cuda/build) next to it, plus its wheel download and cold
build times. Prints a markdown table with the command that produced it.

    python3 -m bench.image_bench [--steps 12] [--image dss-train:cpu] [--no-train]
                                 [--starts 5] [--cuda] [--cuda-image dss-train:cuda] [--compressed]

Builds the image first with images/build (cached). The rebuild is measured on a
copy of images/ (the work tree is not touched). Throughput: two containers on one
docker network, torchrun with one rank each (gloo), median samples/s of the steps
after the first two, with the default ds_config (micro batch 1, accumulation 8).

--cuda (~3 GB of wheels, ~6 GB of images, minutes of build): downloads the locked
wheels once more into an empty folder (timed, then removed; the cache is kept),
builds the CUDA image with everything cached, then again with `--no-cache` from the
cached wheels and bases (the cold build: the venv base and the image), and after a
one-line change to train.py on a copy of images/. Its training is not measured:
there is no GPU here. --compressed adds the gzip size of each image's layers (as
`docker push` sends them; slow: every layer is compressed here).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import zlib
from pathlib import Path

from harness import ROOT

IMAGES = ROOT / "images"
IMAGES_CUDA = ROOT / "images-cuda"


def sh(
    *cmd: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 3600
) -> subprocess.CompletedProcess[str]:
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


def built_on(log: str) -> list[str]:
    """The bases of the image a build script built: its last `building IMAGE on BASE
    (build stage BUILD) ...` line, as [BASE, BUILD]."""
    lines = [line for line in log.splitlines() if line.startswith("building ")]
    words = lines[-1].replace("(", " ").replace(")", " ").split() if lines else []
    return [w for w in words if w.startswith("dss-base:")]


def image_id(tag: str) -> str | None:
    r = sh("docker", "image", "inspect", "-f", "{{.Id}}", tag, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def gzip_layers_mb(tag: str) -> float:
    """Sum of the image's layers gzip-compressed (level 6, Go's and so docker push's default)."""
    total = 0
    with subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE) as p:
        assert p.stdout is not None
        with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
            for m in tar:
                layer = m.name.endswith("layer.tar") or m.name.startswith("blobs/")
                if not m.isfile() or not layer:
                    continue
                f = tar.extractfile(m)
                assert f is not None
                z = zlib.compressobj(6, zlib.DEFLATED, 31)
                while chunk := f.read(1 << 20):
                    total += len(z.compress(chunk))
                total += len(z.flush())
    return total / 1e6


def in_image(tag: str, code: str) -> tuple[float, str]:
    """Seconds and output of `python -c CODE` in a fresh container of the image."""
    t0 = time.perf_counter()
    out = sh("docker", "run", "--rm", "--network", "none", tag, "python", "-c", code).stdout
    return time.perf_counter() - t0, out.strip().splitlines()[-1]


VERSIONS = (
    "import torch, deepspeed; print('torch', torch.__version__, 'CUDA', torch.version.cuda,"
    " 'cuda available', torch.cuda.is_available(), 'deepspeed', deepspeed.__version__)"
)


REGISTRY_NOTE = "what a registry stores and hosts pull"

# What every training process does first (the launcher, each node's launch.py, each
# rank): its own CPU seconds, which is what 17 such processes share on lab8's 2 cores.
START = (
    "import resource, time; t = time.perf_counter(); import torch, deepspeed; "
    "u = resource.getrusage(resource.RUSAGE_SELF); "
    "print(u.ru_utime + u.ru_stime, time.perf_counter() - t)"
)
UNCOMPILED = "find /opt/venv -name __pycache__ -prune -exec rm -rf {} +"
"""The image before 2026-12-04: its venv had no byte-code, and uid 1000 cannot write it."""


def process_start(image: str, uid: str, uncompiled: bool) -> tuple[float, float]:
    """CPU and wall seconds of `import torch, deepspeed` as the training user `uid` in a
    new container (the container's own start not counted); `uncompiled`: with the venv's
    `__pycache__` removed first, as root, then run as `uid` like the tasks."""
    run = ["docker", "run", "--rm", "--network", "none", "--entrypoint"]
    if uncompiled:
        drop = f"setpriv --reuid={uid} --regid={uid} --clear-groups"
        script = f"{UNCOMPILED} && exec {drop} python -c {shlex.quote(START)}"
        out = sh(*run, "sh", "-u", "0", image, "-c", script)
    else:
        out = sh(*run, "python", image, "-c", START)
    cpu, wall = out.stdout.split()[-2:]
    return float(cpu), float(wall)


def start_rows(image: str, runs: int) -> list[tuple[str, str, str]]:
    """This image's process start beside the same image without byte-code, alternating
    runs so both see the same machine; medians."""
    uid = sh("docker", "run", "--rm", "--entrypoint", "id", image, "-u").stdout.strip()
    got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(runs):
        for uncompiled in (True, False):
            got[uncompiled].append(process_start(image, uid, uncompiled))
    rows = []
    for uncompiled, label in ((True, "venv without byte-code (before)"), (False, "this image")):
        cpu = statistics.median(c for c, _ in got[uncompiled])
        wall = statistics.median(w for _, w in got[uncompiled])
        rows.append(
            (
                f"`import torch, deepspeed` as uid 1000: {label}",
                f"{cpu:.2f} s CPU, {wall:.2f} s wall",
                f"median of {runs} new containers",
            )
        )
    return rows


def docker_build(ctx: Path, tag: str, build_args: list[str]) -> list[str]:
    """`docker build -q` of the image's Dockerfile in `ctx` with `--build-arg`s."""
    args = [x for arg in build_args for x in ("--build-arg", arg)]
    return ["docker", "build", "-q", "-f", str(ctx / "Dockerfile"), *args, "-t", tag, str(ctx)]


def one_line_change(ctx: Path) -> None:
    with (ctx / "train.py").open("a") as f:
        f.write(f"# bench {uuid.uuid4().hex}\n")


def cpu_training(image: str, steps: int) -> list[tuple[str, str, str]]:
    """2-rank CPU throughput: two containers, torchrun with one rank each (gloo)."""
    pre = f"dss-bench-{uuid.uuid4().hex[:6]}"
    net, vol = f"{pre}-net", f"{pre}-vol"
    names = [f"{pre}-n{r}" for r in (0, 1)]
    try:
        sh("docker", "network", "create", net)
        sh("docker", "volume", "create", vol)
        for r, n in enumerate(names):
            where = [
                "--name",
                n,
                "--hostname",
                f"n{r}",
                "--network",
                net,
                "--network-alias",
                f"n{r}",
            ]
            ranks = ["--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(r)]
            master = ["--master_addr", "n0", "--master_port", "29500"]
            train = ["train.py", "--run", "bench", "--steps", str(steps), "--ckpt-every", "100000"]
            run = [*where, "-v", f"{vol}:/data", image, "torchrun", *ranks, *master, *train]
            sh("docker", "run", "-d", *run)
        codes = [sh("docker", "wait", n).stdout.strip() for n in names]
        if codes != ["0", "0"]:
            logs = sh("docker", "logs", names[0], check=False).stderr[-3000:]
            sys.exit("training failed:\n" + logs)
        reader = ["--rm", "--network", "none", "-v", f"{vol}:/data", "--entrypoint", "cat", image]
        text = sh("docker", "run", *reader, "/data/logs/bench/metrics.jsonl").stdout
        recs = [json.loads(x) for x in text.splitlines() if x.strip()][2:]
    finally:
        for n in names:
            sh("docker", "rm", "-f", n, check=False)
        sh("docker", "network", "rm", net, check=False)
        sh("docker", "volume", "rm", "-f", vol, check=False)
    sps = statistics.median(r["samples_per_s"] for r in recs)
    tps = statistics.median(r["tokens_per_s"] for r in recs)
    cpus = os.cpu_count()
    return [
        (
            "2-rank CPU training, samples/s (median)",
            f"{sps:.2f}",
            f"torchrun, 2 containers, gloo, {cpus} host CPUs, steps 3-{steps}",
        ),
        ("2-rank CPU training, tokens/s (median)", f"{tps:.0f}", "seq len 64"),
    ]


def cuda_rows(image: str, compressed: bool) -> list[tuple[str, str, str]]:
    """Builds and measures the CUDA variant (images-cuda/build)."""
    build_cuda = str(IMAGES_CUDA / "build")
    cache = Path(os.environ.get("DSS_CACHE", Path.home() / ".cache" / "deepspeed-swarm"))
    rows = []

    # The wheels, once more from the index into an empty folder (the cache stays).
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        t0 = time.perf_counter()
        sh(sys.executable, str(IMAGES_CUDA / "wheels.py"), "fetch", tmp)
        download_s = time.perf_counter() - t0
        wheels_gb = sum(f.stat().st_size for f in Path(tmp).iterdir()) / 1e9
    fetch = "CUDA: download the locked wheels (`wheels.py fetch`, empty folder)"
    rows.append((fetch, f"{download_s:.1f} s", f"{wheels_gb:.2f} GB; network-bound"))

    t0 = time.perf_counter()
    log = sh(build_cuda, env=os.environ | {"DSS_IMAGE": image}).stderr
    warm_s = time.perf_counter() - t0
    base, venv = built_on(log)
    builder = "BuildKit" if "buildkit builder" in log else "legacy builder"

    # Cold: the venv base and the image without the build cache, from the cached
    # wheels and bases. The images it replaces are removed once nothing tags them.
    old = [image_id(venv), image_id(image)]
    t0 = time.perf_counter()
    sh(build_cuda, "--no-cache", env=os.environ | {"DSS_IMAGE": image})
    cold_s = time.perf_counter() - t0
    for prev in old:
        if prev and prev not in (image_id(venv), image_id(image)):
            sh("docker", "rmi", prev, check=False)

    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp) / "images"
        shutil.copytree(IMAGES, ctx, ignore=shutil.ignore_patterns(".wheelhouse", "__pycache__"))
        one_line_change(ctx)
        tag = f"dss-train:bench-cuda-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        sh(build_cuda, env=os.environ | {"DSS_IMAGE": tag, "DSS_IMAGES": str(ctx)})
        rebuild_s = time.perf_counter() - t0
        first = image_id(tag)
        one_line_change(ctx)
        env = os.environ | {"DOCKER_BUILDKIT": "1" if builder == "BuildKit" else "0"}
        t0 = time.perf_counter()
        build_args = [f"BASE_IMAGE={base}", f"BUILD_IMAGE={venv}", "DS_ACCELERATOR=cuda"]
        sh(*docker_build(ctx, tag, build_args), env=env)
        docker_rebuild_s = time.perf_counter() - t0
        sh("docker", "rmi", "-f", tag, *filter(None, [first]), check=False)

    import_s, versions = in_image(image, VERSIONS)
    rows += [
        ("CUDA: images-cuda/build, everything cached", f"{warm_s:.1f} s", builder),
        (
            "CUDA: images-cuda/build --no-cache (wheels and bases cached)",
            f"{cold_s:.1f} s",
            "venv base (pip install of the wheels) + image",
        ),
        (
            "CUDA: images-cuda/build after a one-line change to train.py",
            f"{rebuild_s:.1f} s",
            "incl. wheelhouse/base/venv checks",
        ),
        (
            "CUDA: docker build after a one-line change to train.py",
            f"{docker_rebuild_s:.1f} s",
            builder,
        ),
        ("CUDA image size (`docker image inspect .Size`)", f"{size_mb(image):.0f} MB", image),
    ]
    if compressed:
        gzip_mb = f"{gzip_layers_mb(image):.0f} MB"
        rows.append(("CUDA image, layers gzip-compressed", gzip_mb, REGISTRY_NOTE))
    rows += [
        ("CUDA runtime base size", f"{size_mb(base):.0f} MB", base),
        ("CUDA venv base size (build stage, not shipped)", f"{size_mb(venv):.0f} MB", venv),
        ("CUDA: `import torch, deepspeed` in a new container", f"{import_s:.1f} s", versions),
        ("CUDA training", "not measured", "no GPU on this machine"),
    ]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--image", default="dss-train:cpu")
    ap.add_argument("--no-train", action="store_true", help="skip the CPU training throughput")
    ap.add_argument("--starts", type=int, default=5, help="process starts measured per variant")
    ap.add_argument("--cuda", action="store_true", help="also build and measure the CUDA variant")
    ap.add_argument("--cuda-image", default="dss-train:cuda")
    ap.add_argument("--compressed", action="store_true", help="gzip size of the images' layers")
    a = ap.parse_args()
    cmd = "python3 -m bench.image_bench " + " ".join(sys.argv[1:])

    full_s, log = build(IMAGES, a.image)
    builder = "BuildKit" if "buildkit builder" in log else "legacy builder"
    bases = built_on(log)

    # Rebuild after a one-line change to the training script, on a copy of images/.
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp) / "images"
        shutil.copytree(IMAGES, ctx, ignore=shutil.ignore_patterns(".wheelhouse", "__pycache__"))
        with (ctx / "train.py").open("a") as f:
            f.write(f"# bench {uuid.uuid4().hex}\n")
        tag = f"dss-train:bench-{uuid.uuid4().hex[:8]}"
        rebuild_s, _ = build(ctx, tag)
        first = image_id(tag)
        t0 = time.perf_counter()
        with (ctx / "train.py").open("a") as f:
            f.write(f"# bench {uuid.uuid4().hex}\n")
        env = os.environ | {"DOCKER_BUILDKIT": "1" if builder == "BuildKit" else "0"}
        sh(*docker_build(ctx, tag, [f"BASE_IMAGE={bases[0]}", f"BUILD_IMAGE={bases[1]}"]), env=env)
        docker_rebuild_s = time.perf_counter() - t0
        # Both builds' images: the second took the tag from the first.
        sh("docker", "rmi", "-f", tag, *filter(None, [first]), check=False)

    rows = [
        ("CPU image size (`docker image inspect .Size`)", f"{size_mb(a.image):.0f} MB", a.image),
    ]
    if a.compressed:
        gzip_mb = f"{gzip_layers_mb(a.image):.0f} MB"
        rows.append(("CPU image, layers gzip-compressed", gzip_mb, REGISTRY_NOTE))
    rows += [
        ("runtime base size", f"{size_mb(bases[0]):.0f} MB", bases[0]),
        ("build-stage base size (not shipped)", f"{size_mb(bases[1]):.0f} MB", bases[1]),
        ("images/build, everything cached", f"{full_s:.1f} s", builder),
        (
            "images/build after a one-line change to train.py",
            f"{rebuild_s:.1f} s",
            "incl. wheelhouse/base checks",
        ),
        ("docker build after a one-line change to train.py", f"{docker_rebuild_s:.1f} s", builder),
    ]
    rows += start_rows(a.image, a.starts)
    if a.no_train:
        rows.append(("2-rank CPU training", "not measured", "--no-train"))
    else:
        rows += cpu_training(a.image, a.steps)
    if a.cuda:
        rows += cuda_rows(a.cuda_image, a.compressed)
    else:
        rows.append(("CUDA image", "not measured", "run with --cuda (images-cuda/build)"))
    print(f"Command: `{cmd.strip()}`\n")
    print("| what | value | notes |\n| --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
