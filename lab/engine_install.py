"""`python -m lab engine install <name>`: fetch, verify and unpack a pinned engine.

apt runs with a private sources list of one suite (lab/engines.py renders it), its own
lists and cache under `$DSS_CACHE/engines/apt/<suite>/`, and neither the machine's
sources, preferences nor dpkg status, so nothing of the machine's apt setup changes.
Downloaded .debs stay in `$DSS_CACHE/engines/debs/` (checked again on every install).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from lab import elfcompat
from lab import engines as e
from lab.sysops import LabError


def _log(msg: str) -> None:
    print(f"lab engine: {msg}", flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_installed(engine: e.Engine, env: dict[str, str] | None = None) -> bool:
    """The cache holds this engine exactly as the table pins it."""
    if not engine.installable:
        return shutil.which("dockerd") is not None
    d = e.engine_dir(engine, env)
    try:
        recorded = json.loads((d / "engine.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    bins = d / "bin"
    return recorded == e.manifest(engine) and all((bins / b).exists() for b in engine.binaries)


def apt_options(apt_dir: Path) -> list[str]:
    """apt-get options that confine apt to apt_dir (its sources.list, lists and cache)."""
    opts = {
        "Dir::Etc::SourceList": str(apt_dir / "sources.list"),
        "Dir::Etc::SourceParts": "/dev/null",
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": "/dev/null",
        "Dir::State::Lists": str(apt_dir / "lists"),
        "Dir::State::Status": "/dev/null",
        "Dir::Cache": str(apt_dir / "cache"),
        "Acquire::Languages": "none",
        # only the Packages index is needed, not AppStream metadata
        "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled": "false",
        "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled": "false",
        "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled": "false",
    }
    if os.geteuid() == 0:
        # apt drops to _apt for downloads, which cannot write into the invoker's cache.
        opts["APT::Sandbox::User"] = "root"
    return [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]


def _apt(args: list[str], apt_dir: Path, cwd: Path | None = None) -> None:
    argv = ["apt-get", "-q", *apt_options(apt_dir), *args]
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-8:])
        raise LabError(f"`apt-get {' '.join(args)}` failed ({p.returncode}):\n{tail}")


def _archive(env: dict[str, str]) -> tuple[str, bool]:
    """(archive URI, whether it is an override that may be a dated snapshot)."""
    if env.get(e.ARCHIVE_ENV):
        return env[e.ARCHIVE_ENV].rstrip("/"), True
    try:
        return e.archive_uri(e.machine_sources()), False
    except ValueError as err:
        raise LabError(str(err)) from None


def _fetch(engine: e.Engine, debs_dir: Path, env: dict[str, str]) -> None:
    """Every pinned .deb in debs_dir with its pinned sha256 (downloading what is missing)."""
    missing = [
        d
        for d in engine.debs
        if not (debs_dir / d.filename).exists() or sha256(debs_dir / d.filename) != d.sha256
    ]
    if not missing:
        return
    assert engine.suite is not None
    uri, dated = _archive(env)
    apt_dir = e.cache_dir(env) / "apt" / engine.suite
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    (apt_dir / "sources.list").write_text(e.render_sources_list(uri, engine.suite, dated=dated))
    _log(f"apt-get update ({engine.suite})")
    _apt(["update"], apt_dir)
    for d in missing:
        (debs_dir / d.filename).unlink(missing_ok=True)
    _log("apt-get download " + " ".join(f"{d.package}={d.version}" for d in missing))
    _apt(["download", *(f"{d.package}={d.version}" for d in missing)], apt_dir, cwd=debs_dir)
    for d in missing:
        got = sha256(debs_dir / d.filename)
        if got != d.sha256:
            (debs_dir / d.filename).unlink()
            raise LabError(
                f"{d.filename}: sha256 {got} is not the pinned {d.sha256} (lab/engines.py); "
                "the file was removed"
            )


def _unpack(engine: e.Engine, debs_dir: Path, dest: Path) -> None:
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    root = tmp / "root"
    root.mkdir(parents=True)
    for d in engine.debs:
        subprocess.run(["dpkg-deb", "-x", str(debs_dir / d.filename), str(root)], check=True)
    for rel, want in engine.glibc_compat.items():
        f = root / rel
        f.write_bytes(elfcompat.patch(f.read_bytes()))
        got = sha256(f)
        if got != want:
            shutil.rmtree(tmp)
            raise LabError(f"{rel} after the glibc patch hashes {got}, not the pinned {want}")
    bins = tmp / "bin"
    bins.mkdir()
    for name, rel in engine.binaries.items():
        if not (root / rel).exists():
            shutil.rmtree(tmp)
            raise LabError(f"engine {engine.name}: {rel} is in none of its packages")
        (bins / name).symlink_to(Path("..") / "root" / rel)
    (tmp / "engine.json").write_text(json.dumps(e.manifest(engine), indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def install(name: str, env: dict[str, str] | None = None) -> Path | None:
    """Install engine `name` into the cache (a no-op when it is there); its bin dir."""
    environ = dict(os.environ if env is None else env)
    try:
        engine = e.get(name)
    except ValueError as err:
        raise LabError(str(err)) from None
    if not engine.installable:
        if shutil.which("dockerd") is None:
            raise LabError(f"engine {name} is the system's docker.io; install it with apt")
        _log(f"{name}: the system's dockerd, nothing to install")
        return None
    dest = e.engine_dir(engine, environ)
    if is_installed(engine, environ):
        _log(f"{name}: {dest} is installed")
        return dest / "bin"
    debs_dir = e.cache_dir(environ) / "debs"
    debs_dir.mkdir(parents=True, exist_ok=True)
    _fetch(engine, debs_dir, environ)
    _unpack(engine, debs_dir, dest)
    _log(f"{name}: installed {dest}")
    return dest / "bin"
