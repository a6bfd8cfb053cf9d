"""The shell the program renders in Python and runs on hosts or in tasks, rendered for
representative inputs into golden files (tests/unit/infra/golden/hostscripts/,
`DSS_UPDATE_GOLDEN=1` rewrites them), so that scripts/lint runs shellcheck on them
beside the templates' goldens. Every one of them runs under `sh`: `sh -s` over SSH
(the host facts, the job command's metrics and log reads on the master host), `sh -c`
in a task (the probe, the gate and its check for a running job, the code sync, a file
replaced, a run's relaunch), a command's create or delete in the SSH user's login shell
(the scrape config, as the launch), `/bin/sh -c` as a service's command (JupyterLab).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.components.jupyter import COMMAND as JUPYTER_COMMAND
from infra.config import StackConfig, parse_stack_config
from infra.providers.code import ARCHIVE_DIR
from infra.providers.gate import TRAINING_RUNNING_SCRIPT
from infra.providers.hostfacts import host_script
from infra.providers.peers import peers_script
from infra.providers.run import KILL_SCRIPT, clear_stop_script
from infra.render.code import install_script, verify_script
from infra.render.gate import collective_script
from infra.render.probe import probe_script
from infra.render.prometheus import (
    job_scrape_script,
    job_unscrape_script,
    prometheus_reload_script,
)
from infra.render.shell import replace_file
from jobs.command import logs_command, metrics_script
from tests.unit.golden import check_golden
from tests.unit.infra.samples import stack_config

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "hostscripts"

_EVERY_READING = {
    "nic": "eth0",
    "rdma": "mlx5_0",
    "expected": {},
    "gpu_health": True,
    "nic_health": True,
    "dcgm_level": 1,
}


def job() -> StackConfig:
    """Job stack `exp1` on the dev stack's hosts (its run named after it)."""
    raw = copy.deepcopy(stack_config("dev"))
    raw.pop("secrets", None)
    raw.update(kind="job", cluster="c1")
    raw["training"] = {**raw["training"], "run_name": "exp1"}
    return parse_stack_config(raw)


SCRIPTS: dict[str, Callable[[], str]] = {
    # Not stored: each provider renders these when it runs (sh -s over SSH, sh -c in a task).
    "hostfacts-facts.sh": lambda: host_script({"nic": "eth0", "expected": {}}),
    "hostfacts-every-reading.sh": lambda: host_script(_EVERY_READING),
    # The peers' part alone (host_script appends it last), so that the word splitting it
    # means is allowed in scripts/lint for it, not for the whole host script.
    "hostfacts-peers.sh": lambda: peers_script({"10.0.1.3": "lab-h2", "10.0.1.2": "lab-h1"}),
    "probe.sh": lambda: probe_script("run1"),
    "probe-command.sh": lambda: probe_script("run1", command=True),
    "gate-collective.sh": lambda: collective_script(
        ["10.0.1.2", "10.0.1.3"], "10.0.1.2", 29600, [1 << 20, 1 << 24], 5
    ),
    "code-install.sh": lambda: install_script(
        "run1", "abc123", f"{ARCHIVE_DIR}/code-abc123.tar", ["def456"]
    ),
    "code-verify.sh": lambda: verify_script("run1", "abc123"),
    "gate-training-running.sh": lambda: TRAINING_RUNNING_SCRIPT + "\n",
    "run-kill.sh": lambda: KILL_SCRIPT + "\n",
    "run-clear-stop.sh": lambda: clear_stop_script("run1") + "\n",
    # The job command's reads on the master host (jobs/command.py, `sh -s` over SSH).
    "job-metrics.sh": lambda: metrics_script(job()) + "\n",
    "job-logs.sh": lambda: logs_command(job(), None, 50, False) + "\n",
    "job-logs-follow-task.sh": lambda: logs_command(job(), "10.0.1.3", 20, True) + "\n",
    # Resource inputs: a command's create and delete, a service's command, and the file
    # replacement both the launch and the scrape config hand to `sh -c` in a task.
    "scrape-write-reload.sh": lambda: job_scrape_script("job1", "scrape_configs: []\n"),
    "scrape-write.sh": lambda: job_scrape_script("job1", "scrape_configs: []\n", reload=False),
    "scrape-remove.sh": lambda: job_unscrape_script("job1", "/srv/dss"),
    "scrape-reload.sh": prometheus_reload_script,
    "jupyter-command.sh": lambda: JUPYTER_COMMAND + "\n",
    "replace-file.sh": lambda: replace_file("/data/a/b.txt") + "\n",
    "replace-file-executable-shared.sh": lambda: (
        replace_file("/data/a/b", executable=True, shared=True) + "\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_host_script_golden(name: str) -> None:
    """Each rendered host script equals its golden file (the text scripts/lint checks)."""
    check_golden(GOLDEN / name, SCRIPTS[name]())


def test_no_stale_golden() -> None:
    """Every file in golden/hostscripts/ is one this module renders."""
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(SCRIPTS), "golden/hostscripts/"
