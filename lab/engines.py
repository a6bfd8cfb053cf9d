"""Docker engines the lab can run, and their version-keyed install under DSS_CACHE.

`20.10` is the machine's own `docker.io` (bookworm), used from the system PATH as it
always was. Every other engine is a set of Debian packages pinned by exact version and
sha256 below, fetched with apt from a private sources list (own lists and cache dirs,
the machine's Debian archive keyring, the archive URI taken from the machine's own apt
sources), unpacked with `dpkg-deb -x` into `$DSS_CACHE/engines/<name>-<version>/`,
with a `bin/` of the daemon's binaries that goes first on the daemon's PATH.

The pure parts (table, URI derivation, paths) are here; lab/engine_install.py runs apt.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYSTEM = "20.10"
# What `lab up` runs when not told: a current engine, as GPU servers run (Docker 27-29).
# 20.10 stays a tested legacy row (python -m bench.engine_matrix). DSS_LAB_ENGINE names another
# engine for every `lab up` of a shell or a CI run without touching the commands.
CURRENT = "28"
DEFAULT_ENGINE = CURRENT
ENGINE_ENV = "DSS_LAB_ENGINE"
# Override for the archive the pinned packages come from (a local mirror, or a dated
# snapshot once sid has moved past a pin): a URI like the machine's own sources carry.
ARCHIVE_ENV = "DSS_ENGINE_ARCHIVE"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def default_engine(env: dict[str, str] | None = None) -> str:
    """The engine `lab up` runs when not told: $DSS_LAB_ENGINE, else DEFAULT_ENGINE."""
    return (os.environ if env is None else env).get(ENGINE_ENV) or DEFAULT_ENGINE


@dataclass(frozen=True)
class Deb:
    """One pinned package: apt fetches `package=version`, the file must hash to sha256."""

    package: str
    version: str
    sha256: str
    arch: str = "amd64"

    @property
    def filename(self) -> str:
        """The name apt-get download gives the file (an epoch's `:` becomes `%3a`)."""
        return f"{self.package}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


@dataclass(frozen=True)
class Engine:
    name: str
    version: str  # what the daemon reports as its version (`docker version`), e.g. 28.5.2
    suite: str | None = None  # None: the machine's own packages, nothing to install
    debs: tuple[Deb, ...] = ()
    # bin/<name> -> path inside the unpacked packages
    binaries: dict[str, str] = field(default_factory=dict)
    # binaries rebound to the machine's older glibc (lab/elfcompat.py) -> sha256 after it
    glibc_compat: dict[str, str] = field(default_factory=dict)
    # daemon.json keys this engine needs on top of (or instead of) the lab's defaults
    daemon_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Folder name in the cache: engine name and the daemon package's exact version."""
        main = self.debs[0].version if self.debs else self.version
        return f"{self.name}-{main}"

    @property
    def installable(self) -> bool:
        return self.suite is not None


_DAEMON_BINARIES = {
    "dockerd": "usr/sbin/dockerd",
    "docker-proxy": "usr/sbin/docker-proxy",
    "docker-init": "usr/bin/tini-static",
    "containerd": "usr/bin/containerd",
    "containerd-shim-runc-v2": "usr/bin/containerd-shim-runc-v2",
    "ctr": "usr/bin/ctr",
    "runc": "usr/sbin/runc",
}

ENGINES: dict[str, Engine] = {
    SYSTEM: Engine(name=SYSTEM, version="20.10.24"),
    # Debian sid's docker.io 28.5.2 with the containerd and runc sid pairs it with
    # (docker.io Depends: containerd (>= 1.4~), runc (>= 1.0.0~rc8~), tini-static).
    "28": Engine(
        name="28",
        version="28.5.2",
        suite="sid",
        debs=(
            Deb(
                "docker.io",
                "28.5.2+dfsg4-5",
                "69a59cc77a1fb8ee9ad6859abc2e6de5d76b70887405595c2b1307818fecf682",
            ),
            Deb(
                "containerd",
                "2.1.9+ds1-5",
                "2dda86ce7033fd612fc50e136679d8174ccad680eb29cd4611e0d2a1b84cf591",
            ),
            Deb(
                "runc",
                "1.3.6+ds1-1",
                "8e95d7bdfd22242ae4d48d58e3c277ba2b69dffc4ed8e573b837e6e93925d911",
            ),
            Deb(
                "tini-static",
                "0.19.0-6+b2",
                "89628212b143d90a965b15d5dc47bc593da3b45cf98eda7a81b10c7b953fb07f",
            ),
        ),
        binaries=_DAEMON_BINARIES,
        # sid's runc needs glibc 2.38 for __isoc23_strtol only; bookworm has 2.36.
        glibc_compat={
            "usr/sbin/runc": "ec1cc761efe65b592be96c94d372457dd2ad30dbcfe9fe6dfa3046db261b5058",
        },
    ),
}


def get(name: str) -> Engine:
    """The engine called `name`; the error lists the known ones."""
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise ValueError(f"engine {name!r} is unknown; known engines: {known}") from None


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """$DSS_CACHE/engines (DSS_CACHE defaults as scripts/env.sh sets it)."""
    e = os.environ if env is None else env
    home = e.get("HOME") or str(Path.home())
    return Path(e.get("DSS_CACHE") or str(Path(home) / ".cache/deepspeed-swarm")) / "engines"


def engine_dir(engine: Engine, env: dict[str, str] | None = None) -> Path:
    return cache_dir(env) / engine.key


def bin_dir(engine: Engine, env: dict[str, str] | None = None) -> Path | None:
    """The folder that goes first on the daemon's PATH; None for the system engine."""
    return engine_dir(engine, env) / "bin" if engine.installable else None


def manifest(engine: Engine) -> dict[str, Any]:
    """What an install records; a cache whose record differs is installed afresh."""
    return {
        "engine": engine.name,
        "version": engine.version,
        "suite": engine.suite,
        "debs": [[d.package, d.version, d.sha256] for d in engine.debs],
        "binaries": dict(sorted(engine.binaries.items())),
        "glibc_compat": dict(sorted(engine.glibc_compat.items())),
    }


# --- the archive URI, from the machine's own apt sources -----------------------------


@dataclass(frozen=True)
class Source:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str = ""
    enabled: bool = True


def parse_deb822(text: str) -> list[Source]:
    """The stanzas of a deb822 `.sources` file (comments and continuation lines handled)."""
    out: list[Source] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        last = ""
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and last:
                fields[last] += "\n" + raw.strip()
                continue
            k, sep, v = raw.partition(":")
            if sep:
                last = k.strip().lower()
                fields[last] = v.strip()
        if "uris" not in fields:
            continue
        out.append(
            Source(
                types=tuple(fields.get("types", "").split()),
                uris=tuple(fields["uris"].split()),
                suites=tuple(fields.get("suites", "").split()),
                components=tuple(fields.get("components", "").split()),
                signed_by=fields.get("signed-by", ""),
                enabled=fields.get("enabled", "yes").lower() not in ("no", "false", "0"),
            )
        )
    return out


def parse_one_line(text: str) -> list[Source]:
    """The `deb ...` lines of a one-line-style sources.list."""
    out: list[Source] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        opts = ""
        m = re.match(r"^(\S+)\s+\[([^\]]*)\]\s+(.*)$", line)
        if m:
            typ, opts, rest = m.groups()
        else:
            typ, _, rest = line.partition(" ")
        parts = rest.split()
        if len(parts) < 2:
            continue
        signed = ""
        for o in opts.split():
            k, _, v = o.partition("=")
            if k == "signed-by":
                signed = v
        out.append(Source((typ,), (parts[0],), (parts[1],), tuple(parts[2:]), signed))
    return out


def is_debian_archive(src: Source) -> bool:
    """A Debian main archive entry: binary packages, `main`, no security or updates suite."""
    if not src.enabled or "deb" not in src.types or "main" not in src.components:
        return False
    if src.signed_by and "debian-archive-keyring" not in src.signed_by:
        return False  # a third-party repository with its own key
    return any(not re.search(r"-(security|updates|backports)$|/updates$", s) for s in src.suites)


def archive_uri(sources: list[Source]) -> str:
    """The first Debian main archive URI of the machine's sources."""
    for src in sources:
        if is_debian_archive(src):
            for uri in src.uris:
                if not uri.rstrip("/").endswith("-security"):
                    return uri.rstrip("/")
    raise ValueError(
        "no Debian archive (Types: deb, Components: main, a suite that is not -security, "
        "-updates or -backports) in the machine's apt sources; set "
        f"{ARCHIVE_ENV} to an archive URI"
    )


def machine_sources(etc_apt: Path = Path("/etc/apt")) -> list[Source]:
    """Every entry of sources.list.d/*.sources, sources.list.d/*.list and sources.list."""
    out: list[Source] = []
    d = etc_apt / "sources.list.d"
    if d.is_dir():
        for p in sorted(d.glob("*.sources")):
            out += parse_deb822(p.read_text())
    files = [etc_apt / "sources.list", *(sorted(d.glob("*.list")) if d.is_dir() else [])]
    for p in files:
        if p.is_file():
            out += parse_one_line(p.read_text())
    return out


def render_sources_list(uri: str, suite: str, keyring: str = KEYRING, dated: bool = False) -> str:
    """The private sources list: one suite of one archive, signed by the Debian keyring.

    dated: the archive is a snapshot whose Release has expired (Valid-Until in the past).
    """
    opts = f"signed-by={keyring}" + (" check-valid-until=no" if dated else "")
    return f"deb [{opts}] {uri} {suite} main\n"
