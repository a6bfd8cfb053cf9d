"""One harness for tests, benchmarks and ops: the lab client (`harness.lab`), the
Pulumi CLI driver (`harness.stack`), stack-config builders (`harness.configs`) and
polling waits (`harness.waits`).

Nothing here runs at import: the modules only name paths and define helpers, so
unit tests import them without a lab, a docker engine or the Pulumi CLI.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The project root (Pulumi.yaml, `__main__.py`, the committed stack files)."""


def image_code(dest: Path) -> Path:
    """A code dir at `dest` as a user starts one: the image's own `train.py` and its
    package (`training.code.dir` for the engine tests and the edit bench)."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "images" / "train.py", dest / "train.py")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "images" / "dss_train", dest / "dss_train", ignore=skip)
    return dest
