"""What the job command reads on a job's master host over SSH, with the cluster's own
settings (`preflight.ssh_private_key_file`, `ssh_known_hosts_file`): the job's newest
metrics line and its launcher log (every rank's lines, or one task's). jobs/command.py
keeps these names importable, as the CLI and the tests use them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from infra.components.hostfacts import ssh_target
from infra.config import ConfigError, StackConfig
from infra.providers.hostops import ssh_argv
from infra.render.launch import metrics_path
from infra.render.runfiles import launcher_log


def on_master(cfg: StackConfig, script: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run shell `script` on the cluster's master host over SSH, as the preflight
    reaches it (the cluster's key file and known_hosts); its output goes where `kw`
    says (the terminal unless captured)."""
    argv = ssh_argv(ssh_target(cfg, cfg.master))
    return subprocess.run(argv, input=script, text=True, check=False, **kw)


def host_path(cfg: StackConfig, task_path: str) -> str:
    """A path under the tasks' /data as the hosts see it (training.data_dir)."""
    return cfg.training.data_dir + task_path.removeprefix("/data")


def metrics_script(cfg: StackConfig) -> str:
    """Shell, on the master host, for the job's newest metrics line (nothing if none)."""
    return f"tail -n1 {shlex.quote(metrics_path(cfg))} 2>/dev/null"


def last_metrics(cfg: StackConfig) -> dict[str, Any]:
    """The job's newest metrics line (step, loss), read on the master host; {} if none."""
    proc = on_master(cfg, metrics_script(cfg), capture_output=True)
    try:
        return dict(json.loads(proc.stdout.strip() or "{}"))
    except ValueError:
        return {}


def task_address(
    rank_map: Sequence[Mapping[str, Any]], node: str | None = None, rank: int | None = None
) -> str:
    """The address of the task that runs global rank `rank`, or the task on swarm node
    `node` (the job's `rankMap` output): what pdsh prefixes that task's lines with."""
    for entry in rank_map:
        if entry["node"] == node or (rank is not None and rank in entry["ranks"]):
            return str(entry["address"])
    nodes = ", ".join(str(e["node"]) for e in rank_map)
    ranks = sum(len(e["ranks"]) for e in rank_map)
    key, value = ("--node", node) if node is not None else ("--rank", rank)
    raise ConfigError(
        [f"{key}: {value!r} is not in the job; allowed: nodes {nodes}, ranks 0-{ranks - 1}"]
    )


def logs_command(cfg: StackConfig, address: str | None, lines: int, follow: bool) -> str:
    """Shell, on the master host, for the job's launcher log: every rank's lines, or
    one task's (pdsh prefixes each of its lines with the task's address)."""
    path = host_path(cfg, launcher_log(cfg.training.run_name))
    tail = f"tail -n {lines} {'-F ' if follow else ''}{shlex.quote(path)}"
    if address is None:
        return tail
    return f"{tail} | grep --line-buffered -F -- {shlex.quote(address + ': ')}"
