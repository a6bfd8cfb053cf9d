"""The container contract in infra/layout.py agrees with the image that implements it."""

from __future__ import annotations

import re
from pathlib import Path

from infra import layout

DOCKERFILE = Path(__file__).resolve().parents[3] / "images" / "Dockerfile"


def test_training_uid_is_the_images_user() -> None:
    """The uid secrets are mounted for is the uid images/Dockerfile creates."""
    match = re.search(r"^ARG DSS_UID=(\d+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert match, "images/Dockerfile declares no ARG DSS_UID"
    assert match.group(1) == layout.TRAIN_UID


def test_image_home_is_where_the_image_keeps_its_code() -> None:
    """The image's WORKDIR is layout.IMAGE_HOME, where the default script lives."""
    assert f"WORKDIR {layout.IMAGE_HOME}\n" in DOCKERFILE.read_text()
    assert layout.DEFAULT_SCRIPT.startswith(layout.IMAGE_HOME + "/")


def test_image_python_is_the_venv_the_dockerfile_makes() -> None:
    """layout.IMAGE_PYTHON is the venv's interpreter, first on the image's PATH."""
    text = DOCKERFILE.read_text()
    venv = layout.IMAGE_PYTHON.removesuffix("/bin/python")
    assert f"python3 -m venv --system-site-packages {venv};" in text
    assert f"ENV PATH={venv}/bin:" in text
