"""One harness for tests and benchmarks: the lab client (`harness.lab`), throwaway
stacks on the product's Pulumi CLI driver (`harness.stack`, on `ops.project`),
stack-config builders (`harness.configs`) and polling waits (`harness.waits`). The
harness may import product code; product code never imports the harness
(tests/unit/test_imports.py).

Nothing here runs at import: the modules only name paths and define helpers, so
unit tests import them without a lab, a docker engine or the Pulumi CLI.
"""

from pathlib import Path

from ops.project import ROOT

__all__ = ["ROOT", "image_code"]


def image_code(dest: Path) -> Path:
    """A code dir at `dest` as a user starts one: the image's own `train.py` and its
    package (`training.code.dir` for the engine tests and the edit bench)."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "images" / "train.py", dest / "train.py")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "images" / "dss_train", dest / "dss_train", ignore=skip)
    return dest
