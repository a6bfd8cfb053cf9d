"""A job's run record as a stack's state holds it: the TrainingRun resource under the
launch, its outputs as the last `up` or refresh read them (jobs/command.py reads a run's
state from there, never from the stack's outputs, which only an `up` computes). `job
list` and the queue's release of ended runs (jobs/release.py) read it the same way
(`read_record`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from infra.layout import DYNAMIC_TYPE, LAUNCH_TYPE, RUN_RECORD_SUFFIX

# How the engine writes a secret value in a state it exports with --show-secrets.
_SECRET_SIG = "4dabf18193072939515e22adb298388d"


def _plain(value: Any) -> Any:
    """A state value, its secret wrapper (if any) taken off."""
    if isinstance(value, dict) and _SECRET_SIG in value and "plaintext" in value:
        return json.loads(value["plaintext"])
    return value


_RUN_RECORD_TYPE = f"{LAUNCH_TYPE}${DYNAMIC_TYPE}"
"""The run record's type in its URN: a dynamic resource that is a child of the launch."""


def run_record(deployment: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The run record's outputs in a stack's state (its `deployment`): the TrainingRun
    resource under the launch, as the last `up` or refresh (this command's, or a
    `pulumi refresh` typed by hand) read it: `state`, `reason`, `step`, `checkpoint`,
    `restarts`, `relaunches`. None when the state has none (a job never up, stopped, or
    whose `up` failed before its launch)."""
    found = None
    for res in (deployment or {}).get("resources") or []:
        # urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>
        parts = str(res.get("urn", "")).split("::", 3)
        if (
            len(parts) == 4
            and parts[2].endswith(_RUN_RECORD_TYPE)
            and parts[3].endswith(RUN_RECORD_SUFFIX)
            and not res.get("delete")  # a replaced copy the engine has yet to delete
        ):
            found = res
    if found is None:
        return None
    return {k: _plain(v) for k, v in (found.get("outputs") or {}).items()}


def read_record(stack: Any, refresh: bool = False) -> dict[str, Any] | None:
    """Job stack `stack`'s run record (an Automation API stack): after a refresh, which
    reads the run's state now, when `refresh`; else as the last `up` or refresh left it.
    None as `run_record` says."""
    if refresh:
        stack.refresh(color="never")
    return run_record(stack.export_stack().deployment)
