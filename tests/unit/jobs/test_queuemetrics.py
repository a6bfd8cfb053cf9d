"""jobs.queuemetrics: the queue's metrics file, written on the master host by each pass."""

from __future__ import annotations

import subprocess
import time
import types
from pathlib import Path
from typing import Any

import pytest

from infra.config import StackConfig
from infra.providers.fit import Holder, SwarmGpus
from infra.providers.queue import Entry
from infra.render.queuefile import file_name
from jobs import command, queuemetrics, queuerun
from tests.unit.jobs.conftest import MasterScripts, written
from tests.unit.jobs.test_queue import queued

pytestmark = pytest.mark.unit
__all__ = ["queued"]  # the fixture, shared with test_queue.py


def entry(job: str, state: str, since: float = 100.0, position: str = "") -> Entry:
    labels = {"dss.queue.state": state, "dss.queue.since": str(since)}
    if position:
        labels["dss.queue.position"] = position
    return Entry(f"id-{job}", 1, f"dss-queue.{job}", labels)


def settings(data_dir: Path) -> StackConfig:
    """Cluster c1's settings as its jobs read them, with `data_dir` as the data dir."""
    cfg = command.cluster_settings("c1")
    training = cfg.training.model_copy(update={"data_dir": str(data_dir)})
    return cfg.model_copy(update={"training": training})


def test_the_script_puts_the_file_in_place_whole(project: Path, tmp_path: Path) -> None:
    """Run by a shell, the script makes the metrics folder and leaves the text as the
    cluster's file, and no temporary file the collector could read."""
    data = tmp_path / "data"
    text = 'dss_queue_jobs{cluster="c1",state="queued"} 1\n'
    script = queuemetrics.write_script(settings(data), "c1", text)
    subprocess.run(["bash", "-s"], input=script, text=True, check=True)
    folder = data / ".dss" / "metrics"
    assert (folder / file_name("c1")).read_text() == text
    assert sorted(p.name for p in folder.iterdir()) == [file_name("c1")]


def test_publish_writes_the_waiting_jobs_only(project: Path) -> None:
    """Queued and reserved entries are counted and timed; an admitted one (starting) is
    not; the script goes to the master host."""
    ran = MasterScripts()
    entries = [entry("a", "reserved", 100.0, "1"), entry("b", "queued", 160.0, "2")]
    entries.append(entry("c", "admitted"))
    assert queuemetrics.publish(command.cluster_settings("c1"), "c1", entries, print,
                                now=400.0, run=ran)  # fmt: skip
    (script,) = ran
    assert 'dss_queue_jobs{cluster="c1",state="queued"} 1\n' in script
    assert 'dss_queue_jobs{cluster="c1",state="reserved"} 1\n' in script
    assert 'dss_queue_head_wait_seconds{cluster="c1"} 300\n' in script
    assert 'job="c"' not in script


def test_an_unchanged_queue_is_written_again_only_after_a_while(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that sees what was last written writes nothing until EVERY_S has passed;
    a change is written at once."""
    ran = MasterScripts()
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    cfg = command.cluster_settings("c1")
    same = [entry("a", "queued")]
    assert queuemetrics.publish(cfg, "c1", same, print, run=ran)
    assert not queuemetrics.publish(cfg, "c1", same, print, run=ran)
    assert queuemetrics.publish(cfg, "c1", [*same, entry("b", "queued")], print, run=ran)
    clock[0] += queuemetrics.EVERY_S
    assert queuemetrics.publish(cfg, "c1", [*same, entry("b", "queued")], print, run=ran)
    assert len(ran) == 3


def test_a_failed_write_is_said_and_tried_again(project: Path) -> None:
    """The master host refusing the write: said naming the host and its error, False,
    and the next pass writes again."""
    said: list[str] = []

    def refused(_cfg: Any, _script: str, **_kw: Any) -> Any:
        return types.SimpleNamespace(returncode=1, stderr="mkdir: Permission denied\n")

    cfg = command.cluster_settings("c1")
    assert not queuemetrics.publish(cfg, "c1", [entry("a", "queued")], said.append, run=refused)
    assert said == ["cluster c1: queue metrics not written on lab-h1: mkdir: Permission denied"]
    ran = MasterScripts()
    assert queuemetrics.publish(cfg, "c1", [entry("a", "queued")], said.append, run=ran)


def test_a_pass_writes_the_job_it_leaves_waiting(queued: dict[str, Any]) -> None:
    """`job queue --run` with exp1's hosts held: the file says one job reserved, and
    how long exp1 has waited."""
    queued["swarm"] = SwarmGpus(
        capacity={"lab-h1": 2, "lab-h2": 2}, held={"lab-h1": [Holder("exp0-master", "exp0", 2)]}
    )
    queuerun.run_queue("c1", out=lambda _l: None)
    (script,) = written()
    assert 'dss_queue_jobs{cluster="c1",state="reserved"} 1\n' in script
    assert 'dss_queue_wait_seconds{cluster="c1",run="exp1",state="reserved"} ' in script


def test_a_pass_that_starts_the_job_writes_an_empty_queue(queued: dict[str, Any]) -> None:
    """exp1 admitted and started: no job waits, the head's wait is 0."""
    assert queuerun.run_queue("c1", out=lambda _l: None) == ["exp1"]
    (script,) = written()
    assert 'dss_queue_jobs{cluster="c1",state="reserved"} 0\n' in script
    assert 'dss_queue_head_wait_seconds{cluster="c1"} 0\n' in script
