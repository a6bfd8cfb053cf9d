"""ops/systemd/dss-queue-watch@.service: the queue's watch as a systemd service, one
instance per cluster (docs/jobs.md, "Queued jobs"). Read as systemd reads its keys; not
run under systemd here (no init system in the test machines)."""

from __future__ import annotations

import configparser
import shlex

import pytest

from jobs.__main__ import parser
from ops.project import ROOT

pytestmark = pytest.mark.unit

UNIT = ROOT / "ops" / "systemd" / "dss-queue-watch@.service"


def section(name: str) -> configparser.SectionProxy:
    """One section of the unit (keys case-sensitive, as systemd has them)."""
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys keep their case
    cp.read_string(UNIT.read_text())
    return cp[name]


def test_it_runs_the_watch_of_its_instances_cluster() -> None:
    """ExecStart is `scripts/job queue <instance> --watch` from the checkout it works in,
    and the job command's parser takes those arguments."""
    svc = section("Service")
    argv = shlex.split(svc["ExecStart"])
    assert argv[0] == f"{svc['WorkingDirectory']}/scripts/job", argv
    assert argv[1:] == ["queue", "%i", "--watch"], argv
    got = parser().parse_args(["queue", "lab-cluster", "--watch"])
    assert (got.op, got.cluster, got.watch) == ("queue", "lab-cluster", True), got


def test_a_stop_signals_the_watch_alone() -> None:
    """SIGTERM goes to the watch only (KillMode=mixed), so a `pulumi up` it is running
    finishes and the submit lock is let go; the default would signal the `up` too."""
    svc = section("Service")
    assert (svc["KillMode"], svc["KillSignal"]) == ("mixed", "SIGTERM"), dict(svc)


def test_it_is_restarted_only_when_it_failed() -> None:
    """A watch that ended on a signal (exit 0) stays stopped; one that could not start is
    tried again."""
    assert section("Service")["Restart"] == "on-failure"
    assert section("Install")["WantedBy"] == "multi-user.target"
