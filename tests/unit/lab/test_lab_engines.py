"""Pure parts of the lab's engines: the pinned table, the archive URI, per-engine config."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infra.layout import MIN_DOCKER_ENGINE
from infra.versions import release_key
from lab import config as c
from lab import engine_install as ei
from lab import engines as e
from lab import hostfiles as hf

pytestmark = pytest.mark.unit

ROOT = Path("/lab-root")
NEEDED = {"dockerd", "containerd", "containerd-shim-runc-v2", "runc", "docker-init", "docker-proxy"}

DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_default_engine_is_a_current_one() -> None:
    """Without --engine or DSS_LAB_ENGINE the lab runs engine 28, an installed pin."""
    assert e.default_engine({}) == "28"
    eng = e.get(e.default_engine({}))
    assert eng.version == "28.5.2" and eng.installable and eng.debs


def test_engine_env_names_another_engine() -> None:
    """DSS_LAB_ENGINE picks the engine of every `lab up` that does not name one."""
    assert e.default_engine({"DSS_LAB_ENGINE": "20.10"}) == "20.10"
    assert e.default_engine({"DSS_LAB_ENGINE": ""}) == "28"


def test_system_engine_needs_no_install() -> None:
    """Engine 20.10 is the machine's docker.io: nothing to fetch, the system PATH."""
    eng = e.get(e.SYSTEM)
    assert eng.name == "20.10" and not eng.installable and not eng.debs
    assert e.bin_dir(eng) is None


def test_engine_28_pins_exact_versions_and_checksums() -> None:
    """Engine 28 pins docker.io 28.5.2 and its runtime by exact version and sha256."""
    eng = e.get("28")
    pins = {d.package: d.version for d in eng.debs}
    assert pins["docker.io"].startswith("28.5.2+")
    assert {"containerd", "runc", "tini-static"} <= set(pins)
    assert all(re.fullmatch(r"[0-9a-f]{64}", d.sha256) for d in eng.debs)
    assert all(re.fullmatch(r"[0-9a-f]{64}", s) for s in eng.glibc_compat.values())


def test_every_installable_engine_provides_the_daemon_binaries() -> None:
    """Each installed engine's bin/ holds every binary dockerd looks up on its PATH."""
    for eng in e.ENGINES.values():
        if eng.installable:
            assert set(eng.binaries) >= NEEDED, eng.name
            assert set(eng.glibc_compat) <= set(eng.binaries.values()), eng.name


def test_unknown_engine_names_the_known_ones() -> None:
    """An unknown engine name is refused with the list of known engines."""
    with pytest.raises(ValueError, match=r"'27' is unknown; known engines: 20\.10, 28"):
        e.get("27")


def test_cache_dir_is_keyed_by_engine_and_version() -> None:
    """An engine unpacks into $DSS_CACHE/engines/<name>-<docker.io version>/."""
    eng = e.get("28")
    d = e.engine_dir(eng, {"DSS_CACHE": "/cache"})
    assert d == Path(f"/cache/engines/28-{eng.debs[0].version}")
    assert e.bin_dir(eng, {"DSS_CACHE": "/cache"}) == d / "bin"


def test_manifest_changes_with_any_pin() -> None:
    """A changed sha256 gives another manifest, so a stale cache is installed afresh."""
    eng = e.get("28")
    d0 = eng.debs[0]
    other = e.Engine(**{**eng.__dict__, "debs": (e.Deb(d0.package, d0.version, "0" * 64),)})
    assert e.manifest(other) != e.manifest(eng)


def test_deb_filename_escapes_an_epoch() -> None:
    """apt-get download names an epoch's colon %3a."""
    assert e.Deb("x", "1:2.0-1", "0" * 64).filename == "x_1%3a2.0-1_amd64.deb"


def test_archive_uri_from_deb822_skips_security() -> None:
    """The main archive's URI is taken from a .sources file, not the security one."""
    assert e.archive_uri(e.parse_deb822(DEB822)) == "http://mirror.invalid/debian"


def test_archive_uri_skips_third_party_and_disabled_sources() -> None:
    """A source signed by another key, or disabled, is not the Debian archive."""
    text = (
        "Types: deb\nURIs: http://vendor.invalid/node\nSuites: nodistro\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/vendor.gpg\n\n"
        "Types: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\nComponents: main\n"
        "Enabled: no\n\n" + DEB822
    )
    assert e.archive_uri(e.parse_deb822(text)) == "http://mirror.invalid/debian"


def test_archive_uri_from_one_line_sources_list() -> None:
    """One-line `deb [opts] uri suite main` entries are understood too."""
    text = (
        "# comment\n"
        "deb-src http://src.invalid/debian bookworm main\n"
        "deb http://security.invalid/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://one.invalid/debian/ bookworm main contrib\n"
    )
    assert e.archive_uri(e.parse_one_line(text)) == "http://one.invalid/debian"


def test_no_archive_in_sources_says_how_to_override() -> None:
    """With no Debian archive among the sources the error names DSS_ENGINE_ARCHIVE."""
    with pytest.raises(ValueError, match="DSS_ENGINE_ARCHIVE"):
        e.archive_uri(e.parse_one_line("deb http://x.invalid/debian-security s-security main\n"))


def test_machine_sources_reads_sources_d_and_sources_list(tmp_path: Path) -> None:
    """Both a sources.list.d/*.sources file and sources.list are read."""
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list").write_text("deb http://legacy.invalid/debian bookworm main\n")
    uris = [u for s in e.machine_sources(tmp_path) for u in s.uris]
    assert "http://mirror.invalid/debian" in uris and "http://legacy.invalid/debian" in uris


def test_private_sources_list_names_one_suite_and_the_keyring() -> None:
    """The private list is one `deb` line of the suite, signed by the Debian keyring."""
    line = e.render_sources_list("http://m.invalid/debian", "sid")
    assert line == (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://m.invalid/debian sid main\n"
    )
    assert "check-valid-until=no" in e.render_sources_list("http://s.invalid/x", "sid", dated=True)


def test_apt_is_confined_to_its_own_dirs() -> None:
    """apt-get reads only the private list and keeps lists and cache in the engine cache."""
    opts = ei.apt_options(Path("/cache/apt/sid"))
    pairs = dict(o.split("=", 1) for o in opts[1::2])
    assert pairs["Dir::Etc::SourceList"] == "/cache/apt/sid/sources.list"
    assert pairs["Dir::Etc::SourceParts"] == "/dev/null"
    assert pairs["Dir::State::Lists"] == "/cache/apt/sid/lists"
    assert pairs["Dir::Cache"] == "/cache/apt/sid/cache"


def test_data_root_differs_per_engine() -> None:
    """Each engine keeps its own data-root, so switching never reads the other's state."""
    hp = c.LabPaths(ROOT).host(1)
    roots = {
        json.loads(hf.render_daemon_json(hp, 2, eng))["data-root"] for eng in e.ENGINES.values()
    }
    assert len(roots) == len(e.ENGINES)


def test_daemon_overrides_are_applied() -> None:
    """An engine's daemon_overrides land in its daemon.json over the lab's defaults."""
    eng = e.Engine(name="x", version="0", daemon_overrides={"storage-driver": "vfs"})
    cfg = hf.daemon_config(c.LabPaths(ROOT).host(1), 2, eng)
    assert cfg["storage-driver"] == "vfs"


def test_installed_engine_runs_its_own_dockerd_first_on_path() -> None:
    """With an engine's bin dir, the host script puts it first on PATH and execs its dockerd."""
    hp = c.LabPaths(ROOT).host(1)
    bins = Path("/cache/engines/28-x/bin")
    text = hf.render_host_script(hp, [], {}, bins)
    assert "export PATH=/cache/engines/28-x/bin:$PATH\n" in text
    assert text.endswith(
        "exec /cache/engines/28-x/bin/dockerd --config-file /lab-root/h1/daemon.json\n"
    )


def test_system_engine_keeps_plain_dockerd() -> None:
    """Without a bin dir the host script runs `dockerd` from the system PATH, as before."""
    text = hf.render_host_script(c.LabPaths(ROOT).host(1), [], {})
    assert "export PATH" not in text
    assert text.endswith("exec dockerd --config-file /lab-root/h1/daemon.json\n")


def test_every_lab_engine_meets_the_preflight_minimum() -> None:
    """Each engine the lab runs is one the preflight accepts (infra/layout.py MIN_DOCKER_ENGINE)."""
    floor = release_key(MIN_DOCKER_ENGINE)[0]
    assert all(release_key(eng.version)[0] >= floor for eng in e.ENGINES.values())
