"""Training processes start from byte-code: nothing the image ships is compiled at start.

Every training process (the deepspeed runner, each node's launch.py, every rank) runs as
uid 1000, which cannot write `__pycache__` into the root-owned venv; without byte-code
built into the image each of them compiled DeepSpeed's modules again at every start.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import docker

pytestmark = [pytest.mark.image, pytest.mark.timeout(600)]

# Python raises the `compile` audit event for every source the import system compiles
# (importlib's source_to_code calls compile()); a hook set before the imports hears each.
# Then each venv module's .pyc header: its flags word (PEP 552) is 1 for unchecked-hash.
PROBE = """
import importlib.util, json, os, sys
compiled = []
sys.addaudithook(lambda ev, a: ev == "compile" and isinstance(a[1], str) and compiled.append(a[1]))
import deepspeed.launcher.runner, deepspeed.launcher.launch
sys.path.insert(0, "/opt/dss")
import dss_train.main
specs = [getattr(m, "__spec__", None) for m in list(sys.modules.values())]
origins = [o for o in (getattr(s, "origin", None) for s in specs) if isinstance(o, str)]
venv = [o for o in origins if o.startswith("/opt/venv/") and o.endswith(".py")]
flags = {}
for o in venv:
    with open(importlib.util.cache_from_source(o), "rb") as f:
        flags[o] = int.from_bytes(f.read(8)[4:8], "little")
image = [f for f in compiled if f.startswith(("/opt/venv/", "/usr/lib/python3"))]
print(json.dumps({"uid": os.getuid(), "compiled": image, "flags": flags}))
"""


@pytest.fixture(scope="module")
def probe(image: str) -> dict[str, Any]:
    """What a process importing the launchers' and a rank's modules did, as the image's user."""
    out = docker(
        "run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c", PROBE
    ).stdout
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert got["uid"] == 1000, got["uid"]
    # It must have loaded DeepSpeed from the venv, or neither test below proves anything.
    assert len(got["flags"]) > 100, sorted(got["flags"])
    return got


def test_a_training_process_compiles_nothing_the_image_ships(probe: dict[str, Any]) -> None:
    """A rank's and the launchers' imports compile no source of the venv or of Debian's."""
    assert probe["compiled"] == [], f"compiled at start: {probe['compiled'][:20]}"


def test_the_venv_byte_code_is_unchecked_hash(probe: dict[str, Any]) -> None:
    """Every venv module they load has hash-based, unchecked byte-code (no mtime in it)."""
    other = {o: f for o, f in probe["flags"].items() if f != 0b01}
    assert other == {}, f"not unchecked-hash: {sorted(other)[:20]}"
