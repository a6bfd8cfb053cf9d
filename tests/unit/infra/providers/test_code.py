"""infra.providers.code: what is a change to the code's record, and what read reports."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from docker.errors import NotFound
from requests.exceptions import ConnectionError as RequestsConnectionError

from infra.providers import code
from infra.providers.hostops import HostError

pytestmark = pytest.mark.unit

PROPS: dict[str, Any] = {
    "digest": "0123456789ab",
    "files": 2,
    "bytes": 20,
    "run_name": "r",
    "source": "/checkout/a/code",
    "exclude": [".git"],
    "tasks": [
        {"node": "h1", "service": "ds-master", "task_id": "t1"},
        {"node": "h2", "service": "ds-worker", "task_id": "t2"},
    ],
    "host_endpoints": {"h1": {"url": "unix:///h1"}, "h2": {"url": "unix:///h2"}},
}


def read_digest() -> Any:
    """The digest read gives back for PROPS."""
    outs = code.CodeSyncProvider().read("code-r", dict(PROPS)).outs
    assert outs is not None
    return outs["digest"]


def diff(**news: Any) -> Any:
    return code.CodeSyncProvider().diff("code-r", dict(PROPS), {**PROPS, **news})


def test_another_checkout_is_no_change() -> None:
    """The same code from another checkout path copies nothing."""
    assert not diff(source="/checkout/b/code").changes


def test_new_digest_is_an_update() -> None:
    """New code is copied in place (an update), not a replacement."""
    d = diff(digest="ba9876543210")
    assert (d.changes, d.replaces) == (True, [])


def test_new_run_name_is_a_replacement() -> None:
    """Another run's code lives in another directory: a replacement."""
    assert diff(run_name="r2").replaces == ["run_name"]


@pytest.mark.parametrize(
    ("exits", "read"),
    [((0, 0), "0123456789ab"), ((0, 3), "missing on h2"), ((4, 0), "modified on h1")],
)
def test_read_reports_the_first_task_without_the_version(
    monkeypatch: pytest.MonkeyPatch, exits: tuple[int, int], read: str
) -> None:
    """Read gives the digest back only when every task holds it intact; else it names the
    host and what is wrong there, a drift the next `up` repairs."""
    by_node = dict(zip(("h1", "h2"), exits, strict=True))
    monkeypatch.setattr(code, "_exec", lambda _e, task, _s, ssh=None: (by_node[task["node"]], ""))
    assert read_digest() == read


@pytest.mark.parametrize(
    ("node", "error"),
    [
        # Not running: the roster's to report, not a code drift.
        ("h2", HostError("no running task")),
        # Removed between listing and exec (Docker's 404).
        ("h1", NotFound("No such container")),
    ],
)
def test_read_skips_a_task_that_is_gone(
    monkeypatch: pytest.MonkeyPatch, node: str, error: Exception
) -> None:
    """A task that is gone, or goes while it is asked, is skipped: the others decide."""

    def gone(_e: Any, task: dict[str, Any], _s: str, ssh: Any = None) -> tuple[int, str]:
        if task["node"] == node:
            raise error
        return 0, ""

    monkeypatch.setattr(code, "_exec", gone)
    assert read_digest() == PROPS["digest"]


def test_read_asks_every_task_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks are asked together, not one after another (9 hosts: one round trip)."""
    together = threading.Barrier(2, timeout=10)

    def meet(_e: Any, _task: Any, _s: str, ssh: Any = None) -> tuple[int, str]:
        together.wait()  # broken, not passed, when the tasks are asked in turn
        return 0, ""

    monkeypatch.setattr(code, "_exec", meet)
    assert read_digest() == PROPS["digest"]


def test_code_edited_after_the_preview_is_refused(tmp_path: Any) -> None:
    """Create refuses when the code dir no longer has the digest the program planned."""
    (tmp_path / "train.py").write_text("print('edited after preview')\n")
    with pytest.raises(Exception, match=r"changed after the preview .* planned 0123456789ab"):
        code.CodeSyncProvider().create({**PROPS, "source": str(tmp_path)})


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (HostError("no running task of ds-master on h1"), "no task to remove it from"),
        (NotFound("container gone"), "no task to remove it from (container gone)"),
        (RequestsConnectionError("refused"), "no task to remove it from (refused)"),
        ((1, "rm: cannot remove"), "rm: cannot remove"),
    ],
)
def test_delete_goes_on_without_the_master_and_warns(
    monkeypatch: pytest.MonkeyPatch, outcome: Any, said: str
) -> None:
    """A destroy whose master task is gone, unreachable or cannot remove the code warns,
    naming the directory left behind, and does not fail."""
    warned: list[str] = []

    def run(_e: Any, _task: Any, _s: str, ssh: Any = None) -> Any:
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(code, "_exec", run)
    monkeypatch.setattr("infra.providers.code.pulumi.log.warn", warned.append)
    code.CodeSyncProvider().delete("code-r", dict(PROPS))
    assert len(warned) == 1 and "/data/code/r stays on the data dir" in warned[0]
    assert said in warned[0]


def test_delete_removes_the_run_code_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A removal that works says nothing."""
    ran: list[str] = []

    def run(_e: Any, _task: Any, script: str, ssh: Any = None) -> tuple[int, str]:
        ran.append(script)
        return 0, ""

    monkeypatch.setattr(code, "_exec", run)
    monkeypatch.setattr(
        "infra.providers.code.pulumi.log.warn", lambda m: pytest.fail(f"warned: {m}")
    )
    code.CodeSyncProvider().delete("code-r", dict(PROPS))
    assert ran == ["rm -rf /data/code/r"]


@pytest.mark.parametrize("swarm_says", ["ready", None])
def test_read_fails_on_a_host_not_known_lost(
    monkeypatch: pytest.MonkeyPatch, swarm_says: str | None
) -> None:
    """A task's host that cannot be reached fails the read, naming it, unless lost."""
    from infra.providers import reach
    from infra.providers.errors import EngineUnreachable

    def unreachable(_e: Any, task: dict[str, Any], _s: str, ssh: Any = None) -> tuple[int, str]:
        if task["node"] == "h2":
            raise EngineUnreachable("docker unix:///h2: connection aborted")
        return 0, ""

    monkeypatch.setattr(code, "_exec", unreachable)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: swarm_says)
    with pytest.raises(HostError, match=r"host h2 .*connection aborted"):
        read_digest()


def test_read_passes_over_a_host_known_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.providers import reach
    from infra.providers.errors import EngineUnreachable

    def unreachable(_e: Any, task: dict[str, Any], _s: str, ssh: Any = None) -> tuple[int, str]:
        if task["node"] == "h2":
            raise EngineUnreachable("docker unix:///h2: connection aborted")
        return 0, ""

    monkeypatch.setattr(code, "_exec", unreachable)
    monkeypatch.setattr(reach, "node_state", lambda _p, _h, _u: "down")
    assert read_digest() == PROPS["digest"]
