"""The run's life, rendered and read, in four modules (no Pulumi, no I/O: tested
directly):

- infra/render/runfiles.py: where the run lives in its tasks (the files on the shared
  /data beside the hostfile, its logs) and the programs of infra/task/ written there;
- infra/render/supervisor.py: the supervisor that restarts a crashed launcher, its
  restart counts, and what it follows (`Follow`, the master task's takeover loop);
- infra/render/probe.py: the probe that reads a run from inside its task;
- infra/render/verdict.py: the verdict that turns what the probe saw into the run's state.

Every name stays importable from here, as before the split: the dynamic provider
infra/providers/run.py imports from this module, and a provider pickled into a stack's
state must load against the module paths it was made with (infra/providers/legacy.py).
"""

from __future__ import annotations

from infra.render.probe import FAILURE_LINES as FAILURE_LINES
from infra.render.probe import PROBE_ENV_PATTERN as PROBE_ENV_PATTERN
from infra.render.probe import PROBE_ENV_SUPERVISOR as PROBE_ENV_SUPERVISOR
from infra.render.probe import Probe as Probe
from infra.render.probe import parse_probe as parse_probe
from infra.render.probe import probe_env as probe_env
from infra.render.probe import probe_script as probe_script
from infra.render.runfiles import BUDGET_SPENT as BUDGET_SPENT
from infra.render.runfiles import METRICS_SUBDIR as METRICS_SUBDIR
from infra.render.runfiles import RESTARTS_FILE as RESTARTS_FILE
from infra.render.runfiles import active_path as active_path
from infra.render.runfiles import follow_path as follow_path
from infra.render.runfiles import follow_program as follow_program
from infra.render.runfiles import follow_settings_path as follow_settings_path
from infra.render.runfiles import forkserver_path as forkserver_path
from infra.render.runfiles import forkserver_program as forkserver_program
from infra.render.runfiles import launcher_log as launcher_log
from infra.render.runfiles import lease_path as lease_path
from infra.render.runfiles import log_dir as log_dir
from infra.render.runfiles import ranks_path as ranks_path
from infra.render.runfiles import ranks_program as ranks_program
from infra.render.runfiles import restart_metrics_file as restart_metrics_file
from infra.render.runfiles import stop_marker as stop_marker
from infra.render.runfiles import supervisor_path as supervisor_path
from infra.render.runfiles import supervisor_prefix as supervisor_prefix
from infra.render.runfiles import takeover_path as takeover_path
from infra.render.supervisor import BUDGET_METRIC as BUDGET_METRIC
from infra.render.supervisor import LEASE_S as LEASE_S
from infra.render.supervisor import MASTER_ADDR_SLOT as MASTER_ADDR_SLOT
from infra.render.supervisor import RESTARTS_METRIC as RESTARTS_METRIC
from infra.render.supervisor import TAKEOVER_ENV as TAKEOVER_ENV
from infra.render.supervisor import Follow as Follow
from infra.render.supervisor import restart_metrics_text as restart_metrics_text
from infra.render.supervisor import supervisor_script as supervisor_script
from infra.render.supervisor import takeover_loop as takeover_loop
from infra.render.verdict import BAD_STATES as BAD_STATES
from infra.render.verdict import RunState as RunState
from infra.render.verdict import RunStateName as RunStateName
from infra.render.verdict import verdict as verdict
