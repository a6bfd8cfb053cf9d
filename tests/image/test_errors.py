"""Launch mistakes are named in one line, not a deep traceback."""

from __future__ import annotations

import pytest

from .conftest import Docker

pytestmark = [pytest.mark.image, pytest.mark.timeout(600)]


def run_train(
    dk: Docker, name: str, script: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    c = dk.run(name, "bash", "-c", script, env=env)
    rc = dk.wait(c, timeout=300)
    out = "\n".join(line for line in dk.logs(c).splitlines() if not line.startswith("[entrypoint]"))
    return rc, out


def assert_named(out: str, message: str) -> None:
    assert message in out, out
    assert "Traceback" not in out, out
    assert len([line for line in out.splitlines() if line.strip()]) <= 5, out


def test_missing_ds_config_is_named(dk: Docker) -> None:
    """A missing ds_config exits 2 naming the path."""
    rc, out = run_train(dk, "nocfg", "python train.py --ds-config /nope/ds.json")
    assert rc == 2
    assert_named(out, "dss-train: error: ds_config not found: /nope/ds.json")


def test_malformed_ds_config_is_named(dk: Docker) -> None:
    """A malformed ds_config exits 2 naming file, line and column."""
    rc, out = run_train(
        dk,
        "badcfg",
        "printf '{\\n  \"a\": ,\\n}' > /tmp/ds.json; python train.py --ds-config /tmp/ds.json",
    )
    assert rc == 2
    assert_named(out, "ds_config /tmp/ds.json is not valid JSON: Expecting value at line 2")


def test_world_size_not_matching_hostfile_is_named(dk: Docker) -> None:
    """WORLD_SIZE that differs from the hostfile's slots exits 2 naming both."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    rc, out = run_train(
        dk,
        "hf",
        "printf 'n0 slots=1\\nn1 slots=1\\nn2 slots=1\\n' > /tmp/h; "
        "python train.py --hostfile /tmp/h",
        env,
    )
    assert rc == 2
    assert_named(out, "world size 2 does not match /tmp/h: 3 hosts with 3 slots in all")


def test_unreachable_master_is_named(dk: Docker) -> None:
    """A master nobody listens on exits 2 naming address and port."""
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    rc, out = run_train(dk, "nomaster", "python train.py --master-timeout 3", env)
    assert rc == 2
    assert_named(out, "master 127.0.0.1:29999 unreachable after 3s")


def test_unresolvable_master_is_named(dk: Docker) -> None:
    """A master host name that does not resolve exits 2 saying so."""
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "no-such-master", "MASTER_PORT": "29500"}
    rc, out = run_train(dk, "nodns", "python train.py --master-timeout 3", env)
    assert rc == 2
    assert_named(out, "master address 'no-such-master' does not resolve")
