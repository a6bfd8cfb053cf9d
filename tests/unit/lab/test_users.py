"""The lab's non-root user (lab/users.py): where its keys live, how it is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import config as c
from lab import hostfiles as hf
from lab import users

pytestmark = pytest.mark.unit

LAB = c.LabPaths(Path("/lab-root"))


def test_its_keys_are_where_sshd_looks_for_a_users_own() -> None:
    """sshd_config's `%u` entry, expanded for the user, is the file `ensure` writes."""
    text = hf.render_sshd_config(LAB.host(1), LAB)
    (line,) = [x for x in text.splitlines() if x.startswith("AuthorizedKeysFile ")]
    per_user = line.split()[2].replace("%u", users.USER)
    assert Path(per_user) == users.authorized_keys(LAB)


def test_it_is_a_system_user_in_dockers_group_with_its_home_under_the_lab() -> None:
    argv = users.useradd_argv(LAB)
    assert argv[0] == "useradd" and argv[-1] == "dss"
    assert argv[argv.index("--groups") + 1] == "docker"
    assert argv[argv.index("--home-dir") + 1] == "/lab-root/users/dss"
    assert "--system" in argv and "--no-create-home" in argv
