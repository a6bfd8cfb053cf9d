"""A user's DeepSpeed script at another world size, in the image's DeepSpeed: the
tutorial (examples/deepspeed-tutorial, ZeRO stage 2) saves at world size 2 and starts
again at 1, as after `scripts/job resize`. Without universal checkpoints DeepSpeed
refuses its own checkpoint (what `world_size_problems` refuses a resize for); with
`checkpoint.load_universal` and infra/task/universal.py run before the start, as the
run's supervisor does, the script resumes, unchanged, from the step it saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import ROOT, Docker, docker

pytestmark = [pytest.mark.image, pytest.mark.timeout(600)]

TUTORIAL = ROOT / "examples" / "deepspeed-tutorial"
UNIVERSAL = ROOT / "infra" / "task" / "universal.py"
RANKS = """
set -u
# ranks N STEPS: N local CPU ranks of the tutorial (gloo), as a launcher starts them.
ranks() {
  pids=""
  for r in $(seq 0 $(($1 - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$1 LOCAL_WORLD_SIZE=$1 MASTER_ADDR=127.0.0.1 \\
      MASTER_PORT=29531 DSS_CHECKPOINT_DIR=/data/ck python /code/train.py --deepspeed \\
      --deepspeed_config /code/ds_config.json --steps "$2" --save_interval 10 \\
      >/data/rank.$1.$r 2>&1 &
    pids="$pids $!"
  done
  rc=0
  for p in $pids; do wait "$p" || rc=$?; done
  cat /data/rank.$1.0
  return $rc
}
"""


def code(tmp_path: Path, **ds: object) -> Path:
    """The tutorial's code dir with `ds` merged into its ds_config.json."""
    out = tmp_path / "code"
    out.mkdir()
    (out / "train.py").write_text((TUTORIAL / "train.py").read_text())
    config = json.loads((TUTORIAL / "ds_config.json").read_text())
    (out / "ds_config.json").write_text(json.dumps({**config, **ds}))
    return out


def run(dk: Docker, code_dir: Path, script: str) -> tuple[int, str]:
    """`script` (after RANKS) in a throwaway container of the image: the code at /code,
    universal.py at /universal.py, a fresh volume at /data, no network."""
    vol = dk.volume()
    mounts = ["-v", f"{vol}:/data", "-v", f"{code_dir}:/code:ro",
              "-v", f"{UNIVERSAL}:/universal.py:ro"]  # fmt: skip
    r = docker("run", "--rm", "--network", "none", *mounts, "--entrypoint", "bash",
               dk.image, "-c", RANKS + script, check=False, timeout=540)  # fmt: skip
    return r.returncode, r.stdout + r.stderr


def test_a_zero_checkpoint_does_not_load_at_another_world_size(dk: Docker, tmp_path: Path) -> None:
    """Saved at 2, started at 1 as it is: DeepSpeed raises on its own checkpoint."""
    rc, out = run(dk, code(tmp_path), "ranks 2 20 && ranks 1 30")
    assert rc != 0, out[-3000:]
    assert "The checkpoint being loaded used a DP world size of 2 but the current world " \
        "size is 1" in out, out[-3000:]  # fmt: skip


def test_made_universal_the_script_resumes_at_another_world_size(
    dk: Docker, tmp_path: Path
) -> None:
    """With load_universal, the converter between the two starts (as the supervisor
    runs it): the script resumes at world size 1 from step 20, in its universal form,
    and trains on to 30; a start after a new save converts again."""
    ck = {"checkpoint": {"load_universal": True}}
    script = (
        "ranks 2 20 && python /universal.py /data/ck && ranks 1 30 && "
        "python /universal.py /data/ck && ranks 2 40"
    )
    rc, out = run(dk, code(tmp_path, **ck), script)
    assert rc == 0, out[-3000:]
    assert "universal: global_step20 converted to /data/ck/global_step20_universal" in out
    assert "resumed at step 20 from /data/ck/global_step20_universal/" in out, out[-3000:]
    assert "done: 30 steps, world size 1" in out, out[-3000:]
    assert "older conversions removed: global_step20_universal" in out, out[-3000:]
    assert "resumed at step 30 from /data/ck/global_step30_universal/" in out, out[-3000:]
    assert "done: 40 steps, world size 2" in out, out[-3000:]
