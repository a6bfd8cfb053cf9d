"""A tiny image for lab tests and benches: busybox (Debian busybox-static) plus iputils ping
(for `ping -M do`), imported into a lab host and pushed to the lab registry. No public
registry is needed."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

from lab import config as c
from lab.sysops import LabError

IMAGE = f"{c.REGISTRY_ADDR}/dsslab/busybox:1"
BUSYBOX = Path("/bin/busybox")
PING = Path("/usr/bin/ping")
# procps' pgrep/pkill (Debian's busybox-static has no such applets): the project's
# launch and stop scripts use them, as the training image has them.
EXTRA_BINARIES = (PING, Path("/usr/bin/pgrep"), Path("/usr/bin/pkill"))
APPLETS = [
    "sh",
    "ls",
    "cat",
    "sleep",
    "hostname",
    "echo",
    "nslookup",
    "mkdir",
    "touch",
    "env",
    "ip",
    "ifconfig",
    "wget",
    "grep",
    "true",
    "false",
    "test",
    "[",
    "rm",
    "dirname",
    "id",
    "ps",
    "tail",
]


def shared_libs(binary: Path) -> list[Path]:
    """The shared libraries `binary` loads, from ldd (absolute paths)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    return [Path(m) for m in re.findall(r"(/\S+\.so[.\d]*)", out)]


def rootfs_tar() -> bytes:
    if not BUSYBOX.exists() or not all(b.exists() for b in EXTRA_BINARIES):
        raise LabError(
            "need Debian's busybox-static, iputils-ping and procps (scripts/bootstrap-system)"
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "etc", "tmp", "lib", "lib64", "usr", "usr/bin", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(str(BUSYBOX), "bin/busybox")
        for a in APPLETS:
            link = tarfile.TarInfo(f"bin/{a}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        seen: set[str] = set()
        for binary in EXTRA_BINARIES:
            tar.add(str(binary), f"bin/{binary.name}")
            for lib in shared_libs(binary):
                for path in {str(lib), str(lib.resolve())}:
                    if path not in seen:
                        seen.add(path)
                        tar.add(str(lib.resolve()), path.lstrip("/"))
    return buf.getvalue()


def build_and_push(sock: Path, image: str = IMAGE) -> str:
    """docker import the rootfs on the host at `sock`, push it to the lab registry."""
    env = {"DOCKER_HOST": f"unix://{sock}", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    p = subprocess.run(
        ["docker", "import", "-c", 'CMD ["/bin/sh"]', "-c", "ENV PATH=/bin", "-", image],
        input=rootfs_tar(),
        capture_output=True,
        env=env,
        check=False,
    )
    if p.returncode != 0:
        raise LabError(f"docker import failed: {p.stderr.decode()}")
    p = subprocess.run(["docker", "push", image], capture_output=True, env=env, check=False)
    if p.returncode != 0:
        raise LabError(f"docker push {image} failed: {p.stderr.decode()}")
    return image
