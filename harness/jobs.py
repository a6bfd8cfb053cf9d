"""Job stacks as the tests leave them: removed through the job command where a test
left one behind (a failed assertion, a job the test did not end)."""

from __future__ import annotations

from collections.abc import Callable

from harness.stack import Stack
from jobs import command, teardown


def remove_job(cluster: Stack, name: str, out: Callable[[str], None] | None = None) -> None:
    """Job `name` of `cluster` removed (its stack destroyed, its file deleted) when its
    stack file is still here; what the job command says goes to `out`, else into the
    cluster's record."""
    if command.stack_file(name).exists():
        teardown.remove(name, env=cluster.env, out=out or cluster.record)
