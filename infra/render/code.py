"""The training code as a content-addressed bundle (`training.code.dir`): the pure half
of infra/providers/code.py.

A directory on the machine that runs Pulumi becomes a manifest (one `sha256  path`
line per file, sorted: the format `sha256sum -c` checks), a digest (the manifest's
own hash) and a tar of the files with the manifest beside them. The tasks run the
code from `/data/code/<run>/<digest>/` on the shared data dir, so a one-line change
to `train.py` is a new digest and a relaunch, never a new image or a rolled service.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Which files of a code dir are code: below the config rules and this module alike
# (infra/codedir.py); the names stay importable from here.
from infra.codedir import MAX_CODE_BYTES as MAX_CODE_BYTES
from infra.codedir import MAX_CODE_FILES as MAX_CODE_FILES
from infra.codedir import excluded as excluded
from infra.codedir import listing as listing
from infra.layout import CODE_DIR, CODE_MANIFEST, TRAIN_UID


@dataclass(frozen=True)
class CodeFile:
    """One file of the bundle: its path under the code dir, bytes' hash, size, mode."""

    path: str
    sha256: str
    size: int
    executable: bool


@dataclass(frozen=True)
class Bundle:
    """The files of a code dir (excludes applied), in path order."""

    root: Path
    files: tuple[CodeFile, ...]

    @property
    def manifest(self) -> str:
        """`sha256  path` per file, sorted by path: what `sha256sum -c` reads."""
        return "".join(f"{f.sha256}  {f.path}\n" for f in self.files)

    @property
    def digest(self) -> str:
        """The code's version: the manifest's hash (paths and contents, nothing else)."""
        return hashlib.sha256(self.manifest.encode()).hexdigest()[:12]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def paths(self) -> set[str]:
        return {f.path for f in self.files}

    def tar(self, top: str) -> bytes:
        """The files and the manifest under `top/` (see `tar_bytes`)."""
        members = [
            (f"{top}/{f.path}", (self.root / f.path).read_bytes(), 0o755 if f.executable else 0o644)
            for f in self.files
        ]
        return tar_bytes([*members, (f"{top}/{CODE_MANIFEST}", self.manifest.encode(), 0o644)])


def tar_bytes(members: Sequence[tuple[str, bytes, int]]) -> bytes:
    """A tar of (name, bytes, mode) members owned by the training uid, with fixed times:
    the same members give the same bytes on every machine."""
    buf = io.BytesIO()
    uid = int(TRAIN_UID)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = uid
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bundle(root: Path, exclude: Sequence[str]) -> Bundle:
    """The bundle of the code dir `root`: the files of its `listing`, read and hashed."""
    files = []
    for rel, path in listing(root, exclude).items():
        data = path.read_bytes()
        files.append(
            CodeFile(
                rel,
                hashlib.sha256(data).hexdigest(),
                len(data),
                bool(path.stat().st_mode & 0o111),
            )
        )
    return Bundle(root, tuple(files))


def code_root(run_name: str, base: str = CODE_DIR) -> str:
    """Where a run's code versions live in the tasks: one directory per digest."""
    return f"{base}/{run_name}"


def code_path(run_name: str, digest: str, base: str = CODE_DIR) -> str:
    """The directory of one version of a run's code in the tasks."""
    return f"{code_root(run_name, base)}/{digest}"


def install_script(
    run_name: str, digest: str, archive: str, keep: Sequence[str], base: str = CODE_DIR
) -> str:
    """Shell, run as the training uid in a task: unpack the bundle at `archive` (in the
    task's own file system) into the shared data dir under a temporary name, check it
    against its manifest, rename it into place (a half-copied version is never seen
    under its digest), then remove the run's other versions except `keep`."""
    root = code_root(run_name, base)
    final = code_path(run_name, digest, base)
    keep_names = " ".join([digest, *keep])
    return f"""set -eu
umask 022
mkdir -p {root}
part={root}/.partial-{digest}-$$
trap 'rm -rf "$part" {archive}' EXIT
intact() {{ (cd "$1" && sha256sum -c --quiet --strict {CODE_MANIFEST}) >/dev/null 2>&1; }}
if [ -f {final}/{CODE_MANIFEST} ] && intact {final}; then
  echo "code {digest}: already in place"
else
  mkdir -p "$part"
  tar -x -f {archive} -C "$part" --no-same-owner
  (cd "$part/{digest}" && sha256sum -c --quiet --strict {CODE_MANIFEST})
  rm -rf {final}
  mv "$part/{digest}" {final}
  echo "code {digest}: installed"
fi
for d in {root}/*; do
  [ -d "$d" ] || continue
  case " {keep_names} " in *" ${{d##*/}} "*) ;; *) rm -rf "$d" ;; esac
done
"""


def verify_script(run_name: str, digest: str, base: str = CODE_DIR) -> str:
    """Shell, run in a task: exit 0 when the version `digest` is there and intact,
    else print what is wrong and exit 3 (missing) or 4 (files `sha256sum -c` names)."""
    final = code_path(run_name, digest, base)
    return f"""if [ ! -f {final}/{CODE_MANIFEST} ]; then echo "missing: {final}"; exit 3; fi
out=$(cd {final} && sha256sum -c --quiet --strict {CODE_MANIFEST} 2>&1) || {{
  echo "$out" | head -5; exit 4; }}
"""
