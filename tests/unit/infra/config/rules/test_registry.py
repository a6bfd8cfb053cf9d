"""infra.config.rules: the registry runs every rule function, each once."""

from __future__ import annotations

import inspect

import pytest

from infra.config import RULES
from infra.config.rules import (
    code,
    command,
    deepspeed,
    hosts,
    image,
    kinds,
    monitoring,
    mounts,
    network,
    placement,
    ports,
    ssh,
    training,
)

pytestmark = pytest.mark.unit

# Public functions of the rule modules that are helpers, not rules.
HELPERS = {
    "ds_config",
    "zero_stage",
    "dockerfile_args",
    "declared_args",
    "network_env",
    "task_ifname",
    "code_dir",
    "inline",
    # infra/config/rules/ssh.py: the two halves of its one registered rule.
    "ssh_settings",
    "ssh_hosts_known",
    # infra/config/rules/placement.py: the stack as the planner sees it.
    "host_slots",
    "job_ask",
    "never_placed",
    "judged_by_placement",
    # infra/config/rules/command.py: the file a command names, read by resume.py too.
    "command_ds_file",
}


def test_every_rule_function_is_registered() -> None:
    """Each public rule function of a rule module is in RULES exactly once."""
    modules = (
        code,
        command,
        deepspeed,
        hosts,
        image,
        kinds,
        monitoring,
        mounts,
        network,
        placement,
        ports,
        ssh,
        training,
    )
    defined = {
        f
        for m in modules
        for name, f in vars(m).items()
        if inspect.isfunction(f)
        and f.__module__ == m.__name__
        and not name.startswith("_")
        and name not in HELPERS
    }
    registered = [r.check for r in RULES]
    assert len(registered) == len(set(registered)), "a rule is registered twice"
    assert defined == set(registered), {f.__name__ for f in defined ^ set(registered)}
