"""infra.providers.legacy: the providers pickled in old states unpickle with this code.

The fixtures are `serialize_provider(<Provider>())`, what the program stored in
`__provider` before the providers moved to infra/providers/ (recorded with that
code, tests/unit/infra/fixtures/provider_pickles.json). The engine's provider
process unpickles the state's copy for `read` and `delete`.
"""

from __future__ import annotations

import base64
import importlib
import json
import pickletools
import subprocess
import sys
from pathlib import Path
from typing import Any

import dill
import pytest
from pulumi.dynamic import ResourceProvider

from infra.providers import hostfacts, legacy, roster, secrets, swarm
from tests.unit.infra.samples import ROOT

pytestmark = pytest.mark.unit

FIXTURES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "provider_pickles.json").read_text()
)
# What each old reference must resolve to now.
CLASSES: dict[str, type] = {
    "infra.hostfacts.HostFactsProvider": hostfacts.HostFactsProvider,
    "infra.swarm.SwarmInitProvider": swarm.SwarmInitProvider,
    "infra.swarm.SwarmNodeProvider": swarm.SwarmNodeProvider,
    "infra.launch.TaskRosterProvider": roster.TaskRosterProvider,
    "infra.secrets.SshKeyPairProvider": secrets.SshKeyPairProvider,
    "infra.secrets.GeneratedTokenProvider": secrets.GeneratedTokenProvider,
}


def unpickle(name: str) -> ResourceProvider:
    """The provider as the engine's provider process gets it from an old state."""
    provider = dill.loads(base64.b64decode(FIXTURES[name]))
    assert isinstance(provider, ResourceProvider), name
    return provider


def test_fixtures_name_the_old_paths() -> None:
    """Each fixture is a by-reference pickle of the old module path (what states hold)."""
    assert set(FIXTURES) == set(CLASSES)
    for name, text in FIXTURES.items():
        module, _, qualname = name.rpartition(".")
        ops = [arg for _op, arg, _pos in pickletools.genops(base64.b64decode(text))]
        assert module in ops and qualname in ops, f"{name}: not pickled by reference"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_old_pickle_loads_the_new_class(name: str) -> None:
    """An old state's provider unpickles to the class where it lives now."""
    assert type(unpickle(name)) is CLASSES[name], name


@pytest.mark.parametrize("old", sorted(legacy.ALIASES))
def test_old_path_is_the_new_module(old: str) -> None:
    """Importing an old path gives the very module object of its new path."""
    assert importlib.import_module(old) is importlib.import_module(legacy.ALIASES[old]), old


@pytest.mark.parametrize("old", sorted(legacy.ALIASES))
def test_no_file_at_an_old_path(old: str) -> None:
    """No module file is back at an old path: the alias, not stale code, answers it."""
    path = ROOT / (old.replace(".", "/") + ".py")
    assert not path.exists(), f"{path.relative_to(ROOT)} shadows the alias for {old}"


def test_fresh_process_loads_every_old_pickle() -> None:
    """A fresh interpreter that imports nothing first (as the provider process) loads
    every fixture to its new class."""
    script = (
        "import base64, json, sys, dill\n"
        "for text in json.loads(sys.stdin.read()).values():\n"
        "    p = dill.loads(base64.b64decode(text))\n"
        "    print(f'{type(p).__module__}.{type(p).__qualname__}')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(FIXTURES),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.split()
    want = [CLASSES[name] for name in FIXTURES]
    assert got == [f"{c.__module__}.{c.__qualname__}" for c in want], got


@pytest.mark.parametrize(
    ("name", "props"),
    [
        (
            "infra.hostfacts.HostFactsProvider",
            {"expected": {"gpu_count": 2}, "nic": "eth0", "min_driver": "535.0"},
        ),
        (
            "infra.swarm.SwarmInitProvider",
            {"endpoint": {"url": "unix:///x"}, "advertise_addr": "10.0.0.1", "host": "h1"},
        ),
        (
            "infra.swarm.SwarmNodeProvider",
            {"labels": {"dss.role": "master"}, "role": "manager", "availability": "active"},
        ),
        ("infra.secrets.SshKeyPairProvider", {"rotation": "1", "comment": "c"}),
        ("infra.secrets.GeneratedTokenProvider", {"rotation": "1"}),
    ],
)
def test_old_pickle_diffs_unchanged_inputs_as_no_change(name: str, props: dict[str, Any]) -> None:
    """The unpickled provider's diff runs and finds equal inputs unchanged."""
    result = unpickle(name).diff("id", props, dict(props))
    assert not result.changes and not result.replaces, f"{name}: {result.__dict__}"


def test_old_roster_pickle_diffs_a_short_roster_as_a_change() -> None:
    """The unpickled roster provider re-reads when fewer tasks ran than expected."""
    olds = {"entries": [], "expected_tasks": 2, "leader_endpoint": {"url": "unix:///x"}}
    result = unpickle("infra.launch.TaskRosterProvider").diff("id", olds, dict(olds))
    assert result.changes, "a short roster must be re-read"


def test_old_key_pair_pickle_creates_a_key() -> None:
    """The unpickled key-pair provider still generates an ed25519 key pair."""
    result = unpickle("infra.secrets.SshKeyPairProvider").create({"rotation": "1", "comment": "c"})
    assert result.outs is not None and result.outs["public_key"].startswith("ssh-ed25519 ")


def test_old_token_pickle_creates_a_token() -> None:
    """The unpickled token provider still generates a token."""
    result = unpickle("infra.secrets.GeneratedTokenProvider").create({"rotation": "1"})
    assert result.outs is not None and len(result.outs["value"]) >= 32, "token too short"
