"""The lab's known_hosts, bootstrapped as docs/operations.md ("Host keys") tells an
operator to do it for prod: `ssh-keyscan` each host's ed25519 key over the network,
then check its fingerprint against the host's own key, read over a channel already
trusted (here the host key file `lab up` generated; on prod a console or a provisioning
record). A scanned key that differs refuses the lab by the host's name.

Why not copy the `.pub` files straight into known_hosts (as the lab did before): the
stacks reach the lab's hosts over ssh:// with strict host keys, and the steps that fill
their known_hosts should be the ones a prod operator runs, so that a mistake in those
steps shows on the lab first.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lab import config as c
from lab import hostfiles as hf
from lab.sysops import LabError

KEY_TYPE = "ed25519"
"""The key scanned: the one the program pins for pulumi-command (an ed25519 key first)."""
SCAN_TIMEOUT_S = 5


def keyscan_argv(address: str) -> list[str]:
    """`ssh-keyscan` of one host's ed25519 key on port 22, as docs/operations.md has it."""
    return ["ssh-keyscan", "-p", "22", "-T", str(SCAN_TIMEOUT_S), "-t", KEY_TYPE, address]


def fingerprint(key_line: str) -> str:
    """The SHA256 fingerprint `ssh-keygen -l` prints for one key (`<kind> <blob>`, with
    or without a known_hosts host field)."""
    proc = subprocess.run(
        ["ssh-keygen", "-l", "-f", "-"], input=key_line, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise LabError(f"ssh-keygen -l refused a key: {proc.stderr.strip()}")
    return proc.stdout.split()[1]


def scanned_key(i: int, scan_output: str) -> str:
    """The `<kind> <blob>` that host i's keyscan printed (comment lines skipped); a
    LabError naming the host when it printed none of KEY_TYPE."""
    for line in scan_output.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#") and parts[1] == f"ssh-{KEY_TYPE}":
            return f"{parts[1]} {parts[2]}"
    raise LabError(
        f"{c.host_name(i)} ({c.host_addr(i)}): ssh-keyscan returned no ssh-{KEY_TYPE} key"
    )


def checked_line(i: int, scan_output: str, host_pub: str) -> str:
    """Host i's known_hosts line from its scan, once its fingerprint equals that of the
    host's own key (`host_pub`, the `.pub` file's text); else a LabError naming both."""
    key = scanned_key(i, scan_output)
    seen, own = fingerprint(key), fingerprint(host_pub)
    if seen != own:
        raise LabError(
            f"{c.host_name(i)} ({c.host_addr(i)}): the key scanned ({seen}) is not the "
            f"host's own ({own}); refusing to trust it"
        )
    return hf.known_hosts_line(i, key)


def _scan(i: int) -> str:
    proc = subprocess.run(keyscan_argv(c.host_addr(i)), capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(
            f"{c.host_name(i)}: ssh-keyscan failed ({proc.returncode}): {proc.stderr.strip()}"
        )
    return proc.stdout


def write_known_hosts(lab: c.LabPaths, hosts: int) -> None:
    """Scan every host's key, check each, write the lab's known_hosts (mode 0600)."""
    with ThreadPoolExecutor(max_workers=8) as ex:
        scans = list(ex.map(_scan, range(1, hosts + 1)))
    lines = [
        checked_line(i, out, Path(f"{lab.host(i).host_key}.pub").read_text())
        for i, out in enumerate(scans, start=1)
    ]
    lab.known_hosts.write_text("".join(lines))
    lab.known_hosts.chmod(0o600)
