"""Loss continuity across a world-size change (issue 20, item 3): one checkpoint of a
run at world size F, resumed three ways side by side in one run,

  (a) at world size F again: the run as if nothing had changed (the baseline);
  (b) at world size T with DeepSpeed's universal checkpoint (`--on-resize universal`,
      the default): the optimizer state re-sharded;
  (c) at world size T with the weights only (`--on-resize reset`, the path before
      the universal checkpoint): Adam's moments restart;

and prints a markdown table with the command that produced it.

    python -m bench.resize_bench [--from-world 4] [--to-world 3] [--steps 20] [--after 10]

Each run is one container of the CPU training image (images/build, cached) with
torchrun's standalone rendezvous and one rank per process (gloo); every rank of a run
shares the checkpoint folder, a copy of the same checkpoint per path. The first
resumed step's loss is taken before any update with the loaded state, so the means
are over the steps after it. Universal conversion time is rank 0's
(`universal checkpoint of ... ready in`, from its log).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from bench.image_bench import build, sh
from harness import ROOT

LR = "1e-3"  # as the image tests: the default 1e-4 learns too slowly in a few dozen CPU steps
RUN = "resize"


def train(image: str, data: Path, world: int, steps: int, *extra: str) -> float:
    """One torchrun of `world` ranks on `data` to `steps`; returns its wall seconds."""
    t0 = time.monotonic()
    sh(
        "docker", "run", "--rm", "-v", f"{data}:/data", image,
        "torchrun", "--standalone", "--nproc_per_node", str(world),
        "train.py", "--run", RUN, "--steps", str(steps), "--ckpt-every", str(steps),
        "--lr", LR, "--threads", "1", *extra,
    )  # fmt: skip
    return time.monotonic() - t0


def losses(data: Path) -> dict[int, float]:
    rows = (data / "logs" / RUN / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, rows) if r}


def conversion_s(data: Path) -> str:
    m = re.search(r"universal checkpoint of \S+ ready in ([\d.]+)s",
                  (data / "logs" / RUN / "rank0.log").read_text())  # fmt: skip
    return f"{float(m.group(1)):.1f}" if m else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="dss-train:cpu")
    ap.add_argument("--from-world", type=int, default=4)
    ap.add_argument("--to-world", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="steps before the checkpoint")
    ap.add_argument("--after", type=int, default=10, help="steps trained after it")
    a = ap.parse_args()
    build(ROOT / "images", a.image)
    end = a.steps + a.after
    with tempfile.TemporaryDirectory(prefix="dss-resize-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir(mode=0o777)
        base.chmod(0o777)  # the image trains as its own uid
        train(a.image, base, a.from_world, a.steps)
        paths = [
            ("(a) same world size (baseline)", a.from_world, []),
            ("(b) universal checkpoint", a.to_world, ["--on-resize", "universal"]),
            ("(c) weights only, Adam reset", a.to_world, ["--on-resize", "reset"]),
        ]
        rows = []
        for label, world, extra in paths:
            data = Path(tmp) / label[1]
            sh("cp", "-a", str(base), str(data))
            secs = train(a.image, data, world, end, *extra)
            loss = losses(data)
            after = [loss[s] for s in range(a.steps + 2, end + 1)]
            rows.append((label, world, loss[a.steps], statistics.fmean(after), after[-1],
                         conversion_s(data), secs))  # fmt: skip
    base_mean = rows[0][3]
    print(f"Checkpoint at step {a.steps} of world size {a.from_world}, resumed to step {end}"
          f" ({a.after} steps; means over steps {a.steps + 2}-{end}).\n")  # fmt: skip
    print(f"| path | world | loss at step {a.steps} | mean loss after | vs baseline "
          f"| loss at step {end} | conversion s | run s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, world, before, mean, last, conv, secs in rows:
        print(f"| {label} | {world} | {before:.3f} | {mean:.3f} | {mean - base_mean:+.3f} "
              f"| {last:.3f} | {conv} | {secs:.0f} |")  # fmt: skip
    print(
        "\nCommand: `python -m bench.resize_bench "
        f"--from-world {a.from_world} --to-world {a.to_world} --steps {a.steps} --after {a.after}`"
    )


if __name__ == "__main__":
    main()
