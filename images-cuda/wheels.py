#!/usr/bin/env python3
"""The CUDA variant's pinned wheels: resolve the lock, fetch it into the cache, stage it.

    python3 images-cuda/wheels.py lock CACHE            # requirements.in -> requirements.txt
    python3 images-cuda/wheels.py fetch CACHE [STAGE]   # the locked wheels into CACHE,
                                                        # hard-linked into STAGE

The wheels are for the image's Python, not the host's: Debian trixie's CPython 3.13 on
x86_64 with glibc 2.41, so pip gets --python-version, --abi and every manylinux tag up
to that glibc (pip does not widen `manylinux_2_28` to the older tags itself, and
torch 2.6.0's wheel is tagged `manylinux1`). Build containers have no network, so this
runs on the host. Every file is checked against the lock's sha256 before it is staged,
and pip checks it again in the build (`--require-hashes`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "requirements.txt"
LOCK_INPUT = HERE / "requirements.in"

# The image's interpreter and C library (Debian trixie, images-cuda/packages-*.txt).
TARGET_PYTHON = (3, 13)
TARGET_GLIBC = (2, 41)
TARGET_ARCH = "x86_64"

LOCK_HEADER = """\
# The CUDA variant's Python packages, every one pinned with the sha256 of the one
# file the image installs (CPython 3.13, manylinux x86_64). Generated from
# requirements.in by `python3 images-cuda/wheels.py lock`; do not edit by hand.
# images-cuda/build installs them offline with `pip install --require-hashes`.
"""


@dataclass(frozen=True)
class Pin:
    """One locked requirement: `name==version` and the sha256 digests it accepts."""

    name: str
    version: str
    hashes: tuple[str, ...]

    def line(self) -> str:
        """The pin as a requirements line pip accepts with --require-hashes."""
        hashes = "".join(f" --hash=sha256:{h}" for h in self.hashes)
        return f"{self.name}=={self.version}{hashes}"


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[Pin]:
    """The pins of a hash-locked requirements file (continuation lines joined)."""
    pins = []
    joined = re.sub(r"\\\s*\n", " ", text)
    for raw in joined.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(
            r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line
        )
        if not m:
            raise ValueError(f"not a pinned requirement with sha256 hashes: {line!r}")
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", m.group(3)))
        pins.append(Pin(normalize(m.group(1)), m.group(2), hashes))
    return pins


def dist_key(filename: str) -> tuple[str, str] | None:
    """(normalized name, version) of a wheel or sdist file name; None for anything else."""
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        if len(parts) in (5, 6):
            return normalize(parts[0]), parts[1]
        return None
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            name, sep, version = filename[: -len(ext)].rpartition("-")
            return (normalize(name), version) if sep else None
    return None


def pip_target_args(
    python: tuple[int, int] = TARGET_PYTHON,
    glibc: tuple[int, int] = TARGET_GLIBC,
    arch: str = TARGET_ARCH,
) -> list[str]:
    """pip download options for binaries that run on the target, newest tag first."""
    py = f"{python[0]}{python[1]}"
    args = [
        "--only-binary",
        ":all:",
        "--python-version",
        f"{python[0]}.{python[1]}",
        "--implementation",
        "cp",
        "--abi",
        f"cp{py}",
    ]
    tags = [f"manylinux_{glibc[0]}_{minor}_{arch}" for minor in range(glibc[1], 4, -1)]
    # The legacy aliases: manylinux2014 = 2_17, manylinux2010 = 2_12, manylinux1 = 2_5.
    tags += [
        f"manylinux{alias}_{arch}"
        for alias, minor in (("2014", 17), ("2010", 12), ("1", 5))
        if glibc >= (2, minor)
    ]
    for tag in tags:
        args += ["--platform", tag]
    return args


def match(pins: Iterable[Pin], digests: Mapping[str, str]) -> tuple[dict[Pin, str], list[Pin]]:
    """Which file satisfies each pin (its name, version and sha256), and the pins none does.

    `digests` maps file names to their sha256; a file whose digest the lock does not
    list (another platform's wheel, a corrupted download) satisfies nothing.
    """
    found: dict[Pin, str] = {}
    missing: list[Pin] = []
    for pin in pins:
        for filename, digest in sorted(digests.items()):
            if dist_key(filename) == (pin.name, pin.version) and digest in pin.hashes:
                found[pin] = filename
                break
        else:
            missing.append(pin)
    return found, missing


def render_lock(digests: Mapping[str, str]) -> str:
    """The lock file for a set of downloaded files (one pin per file, sorted by name)."""
    pins = []
    for filename, digest in digests.items():
        key = dist_key(filename)
        if key is None:
            raise ValueError(f"not a wheel or sdist: {filename}")
        pins.append(Pin(key[0], key[1], (digest,)))
    names = [p.name for p in pins]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"more than one file for {', '.join(dupes)}")
    body = "".join(
        f"{p.name}=={p.version} \\\n    --hash=sha256:{p.hashes[0]}\n"
        for p in sorted(pins, key=lambda p: p.name)
    )
    return LOCK_HEADER + body


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def pip_download(args: list[str], dest: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        *pip_target_args(),
        *args,
    ]
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def cached_digests(cache: Path, pins: Iterable[Pin]) -> dict[str, str]:
    """sha256 of the cached files that have the name and version of a pin."""
    keys = {(p.name, p.version) for p in pins}
    return {
        f.name: sha256(f)
        for f in sorted(cache.iterdir())
        if f.is_file() and dist_key(f.name) in keys
    }


def fetch(cache: Path, stage: Path | None) -> None:
    """The locked files into `cache` (downloading only what is missing), linked into `stage`."""
    pins = parse_lock(LOCK.read_text())
    cache.mkdir(parents=True, exist_ok=True)
    found, missing = match(pins, cached_digests(cache, pins))
    if missing:
        print(f"wheels: downloading {len(missing)} of {len(pins)} locked files", file=sys.stderr)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", dir=cache) as req:
            req.write("".join(p.line() + "\n" for p in missing))
            req.flush()
            pip_download(["--no-deps", "--require-hashes", "-r", req.name], cache)
        found, missing = match(pins, cached_digests(cache, pins))
        if missing:
            sys.exit("wheels: pip saved no file matching " + ", ".join(p.line() for p in missing))
    size = sum((cache / f).stat().st_size for f in found.values())
    print(f"wheels: {len(found)} locked files in the cache ({size / 1e9:.2f} GB)", file=sys.stderr)
    if stage is not None:
        stage.mkdir(parents=True, exist_ok=True)
        for filename in found.values():
            src, dst = cache / filename, stage / filename
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)


def lock(cache: Path) -> None:
    """Re-resolve requirements.in for the target, rewrite requirements.txt, keep the files."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        pip_download(["-r", str(LOCK_INPUT)], Path(tmp))
        digests = {f.name: sha256(f) for f in sorted(Path(tmp).iterdir())}
        for name in digests:
            os.replace(Path(tmp) / name, cache / name)
    LOCK.write_text(render_lock(digests))
    print(f"wheels: {len(digests)} files locked in {LOCK.name}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lk = sub.add_parser("lock", help="re-resolve requirements.in into requirements.txt")
    lk.add_argument("cache", type=Path, help="where the resolved files are kept")
    f = sub.add_parser("fetch", help="the locked files into CACHE, linked into STAGE")
    f.add_argument("cache", type=Path)
    f.add_argument("stage", type=Path, nargs="?")
    a = ap.parse_args(argv)
    if a.cmd == "lock":
        lock(a.cache)
    else:
        fetch(a.cache, a.stage)


if __name__ == "__main__":
    main()
