"""The lab's non-root SSH user: `dss`, in the `docker` group, logging in with the lab
key on every host, as a prod team that does not hand root to its CI would set its hosts
up (docs/operations.md, "SSH"): Docker through the group, nothing else privileged.

The lab's hosts share the machine's /etc/passwd (only /run, /etc/docker and the network
are their own), so the user is the machine's: `lab up` adds it when missing, with its
home under the lab root, and `lab down` removes it only when its home is there (a `dss`
user the lab did not make is never touched).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from lab import config as c
from lab import sysops as s
from lab.sysops import LabError

USER = "dss"
GROUP = "docker"
"""The group dockerd gives its socket (mode 0660): Docker without root."""


def home(lab: c.LabPaths, user: str = USER) -> Path:
    """A lab user's home, under the lab root."""
    return lab.root / "users" / user


def authorized_keys(lab: c.LabPaths, user: str = USER) -> Path:
    """Where sshd finds a user's keys (with `user="%u"`, the `AuthorizedKeysFile` entry
    sshd expands per login): sshd reads it as the user, who cannot read root's lab ssh
    folder."""
    return home(lab, user) / ".ssh" / "authorized_keys"


def useradd_argv(lab: c.LabPaths) -> list[str]:
    """A system user, home under the lab root, a login shell, in GROUP."""
    return [
        "useradd", "--system", "--home-dir", str(home(lab)), "--no-create-home",
        "--shell", "/bin/bash", "--groups", GROUP, USER,
    ]  # fmt: skip


def ensure(lab: c.LabPaths) -> None:
    """The user, its home and the lab key in its authorized_keys (owned by it, 0600).
    Its password field is `*` (no password, not locked): sshd without PAM refuses a
    locked account (`!`) even for a key."""
    if s.run(["getent", "group", GROUP], check=False).returncode != 0:
        raise LabError(f"no group {GROUP!r}: the lab's non-root user needs Docker's group")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        s.run(useradd_argv(lab))
    s.run(["usermod", "-p", "*", USER])
    keys = authorized_keys(lab)
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_text(lab.authorized_keys.read_text())
    user = pwd.getpwnam(USER)
    for path, mode in ((home(lab), 0o755), (keys.parent, 0o700), (keys, 0o600)):
        path.chmod(mode)
        os.chown(path, user.pw_uid, user.pw_gid)


def remove(lab: c.LabPaths) -> list[str]:
    """Remove the user if the lab made it (its home under the lab root); problems left."""
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        return []
    if Path(user.pw_dir) != home(lab):
        return []
    p = s.run(["userdel", USER], check=False)
    return [] if p.returncode == 0 else [f"user {USER}: {p.stderr.strip()}"]
