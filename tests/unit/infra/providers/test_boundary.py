"""infra.providers.boundary: what crosses the engine boundary into a dynamic provider."""

from __future__ import annotations

from typing import Any

import pytest

from infra.providers import hostfacts, roster, secrets, swarm
from infra.providers.boundary import BoundaryProvider, normalize

pytestmark = pytest.mark.unit


def test_normalize_integral_floats() -> None:
    """Integral doubles become ints at any depth; other values stay as they are."""
    wire = {"port": 22.0, "ssh": {"port": 2222.0}, "mtus": [9000.0, 1.5], "name": "h1", "on": True}
    assert normalize(wire) == {
        "port": 22,
        "ssh": {"port": 2222},
        "mtus": [9000, 1.5],
        "name": "h1",
        "on": True,
    }
    assert isinstance(normalize(wire)["port"], int)


def test_provider_methods_receive_ints() -> None:
    """A provider's create sees ints although the engine sent doubles."""
    seen: list[Any] = []

    class Probe(BoundaryProvider):
        def create(self, props: dict[str, Any]) -> Any:
            seen.append(props)

    Probe().create({"port": 22.0})
    assert seen == [{"port": 22}] and isinstance(seen[0]["port"], int)


@pytest.mark.parametrize(
    "provider",
    [
        hostfacts.HostFactsProvider,
        swarm.SwarmInitProvider,
        swarm.SwarmNodeProvider,
        roster.TaskRosterProvider,
        secrets.SshKeyPairProvider,
        secrets.GeneratedTokenProvider,
    ],
)
def test_every_provider_is_at_the_boundary(provider: type) -> None:
    """Each dynamic provider of the program normalises every method the engine calls."""
    assert issubclass(provider, BoundaryProvider), f"{provider.__name__}: not a BoundaryProvider"
    for name in ("create", "read", "update", "diff", "delete"):
        method = provider.__dict__.get(name)
        if method is not None:
            assert getattr(method, "__dss_normalizing__", False), f"{provider.__name__}.{name}"


def test_host_facts_ssh_port_from_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    """HostFacts runs `ssh -p 22`, not `-p 22.0`, when the engine sends the port as a double."""
    argv: list[list[str]] = []

    class Done:
        returncode = 0
        stdout = "hostname=h1\nnic_mtu=9100\n"
        stderr = ""

    def fake_run(args: list[str], **_: Any) -> Done:
        argv.append(args)
        return Done()

    monkeypatch.setattr("infra.providers.hostops.subprocess.run", fake_run)
    props = {
        "host": "h1",
        "ssh": {"user": "root", "address": "10.0.0.1", "port": 22.0},
        "nic": "eth0",
        "min_driver": "535.0",
        "needed_mtu": 9050.0,
        "expected": {"hostname": "h1", "gpu_count": 0.0, "nic_mtu": 9100.0},
    }
    hostfacts.HostFactsProvider().create(props)
    port = argv[0][argv[0].index("-p") + 1]
    assert port == "22", f"ssh -p {port}"
