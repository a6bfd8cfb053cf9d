"""jobs.lock: the cluster's submit lock, against a fake of the leader's config API."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness.waits import wait_for
from infra.config import ConfigError
from jobs import lock

pytestmark = pytest.mark.unit


class ApiError(Exception):
    """What the Docker SDK raises: an error with the HTTP status."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class FakeApi:
    """The leader's configs: names unique, as Swarm's store keeps them."""

    def __init__(self) -> None:
        self.configs_by_id: dict[str, dict[str, Any]] = {}
        self.made = 0

    def create_config(self, name: str, data: bytes, labels: dict[str, str]) -> dict[str, str]:
        if any(c["Spec"]["Name"] == name for c in self.configs_by_id.values()):
            raise ApiError(409)
        self.made += 1
        cid = f"cfg{self.made}"
        self.configs_by_id[cid] = {"ID": cid, "Spec": {"Name": name, "Labels": labels}}
        return {"ID": cid}

    def configs(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        return [
            c for c in self.configs_by_id.values() if c["Spec"]["Name"].startswith(filters["name"])
        ]

    def remove_config(self, cid: str) -> None:
        if self.configs_by_id.pop(cid, None) is None:
            raise ApiError(404)

    def inspect_config(self, cid: str) -> dict[str, Any]:
        if cid not in self.configs_by_id:
            raise ApiError(404)
        c = self.configs_by_id[cid]
        return {**c, "Version": {"Index": c.get("version", 1)}}

    # hostops.update_config's calls (the Engine API's POST /configs/{id}/update).
    def _url(self, path: str, cid: str) -> str:
        return path.format(cid)

    def _post_json(self, url: str, data: dict[str, Any], params: dict[str, int]) -> Any:
        cid = url.split("/")[2]
        c = self.configs_by_id.get(cid)
        if c is None:
            raise ApiError(404)
        if params["version"] != c.get("version", 1):
            raise ApiError(500)  # "update out of sequence"
        c["Spec"] = {**c["Spec"], "Labels": dict(data["Labels"])}
        c["version"] = c.get("version", 1) + 1
        return None

    def _raise_for_status(self, _res: Any) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()

    class Client:
        def __init__(self) -> None:
            self.api = fake

    monkeypatch.setattr(lock, "docker_client", lambda _ep, _ssh=None: Client())
    return fake


def test_the_lock_is_held_for_the_block_and_let_go(api: FakeApi) -> None:
    """Inside the block the leader has the lock, labelled with the holder; after it, none."""
    with lock.submit_lock({"url": "x"}, "submit of a", print):
        (held,) = api.configs_by_id.values()
        assert held["Spec"]["Name"] == lock.LOCK_NAME
        assert held["Spec"]["Labels"][lock.HOLDER_LABEL] == "submit of a"
    assert api.configs_by_id == {}


def test_the_lock_is_let_go_when_the_block_fails(api: FakeApi) -> None:
    """An error in the block (a refused up) still lets the lock go."""
    with pytest.raises(RuntimeError), lock.submit_lock({"url": "x"}, "submit of a", print):
        raise RuntimeError("up failed")
    assert api.configs_by_id == {}


def test_a_second_submit_waits_naming_the_holder_then_takes_it(api: FakeApi) -> None:
    """Held by another: the waiter says who once, polls, and takes it once it is gone."""
    clock = Clock()
    other = lock.try_lock(api, "submit of a by u@m pid 1", clock())
    assert isinstance(other, str)
    said: list[str] = []

    def sleep(s: float) -> None:
        clock.sleep(s)
        if clock.now >= 1010:
            api.remove_config(other)

    with lock.submit_lock({"url": "x"}, "submit of b", said.append, clock=clock, sleep=sleep):
        (held,) = api.configs_by_id.values()
        assert held["Spec"]["Labels"][lock.HOLDER_LABEL] == "submit of b"
    assert said == ["waiting for the cluster's submit lock, held by submit of a by u@m pid 1"]


def test_an_expired_lock_is_taken(api: FakeApi) -> None:
    """A holder past its expiry (a submit killed before it let go) is removed and the
    lock taken at once, saying so."""
    clock = Clock()
    stale = lock.try_lock(api, "submit of dead", clock() - 2 * lock.LEASE_S)
    assert isinstance(stale, str)
    said: list[str] = []
    with lock.submit_lock({"url": "x"}, "submit of b", said.append, clock=clock, sleep=clock.sleep):
        assert stale not in api.configs_by_id
    assert said == ["the cluster's submit lock of submit of dead has expired: taking it"]
    assert clock.now == 1000.0


def test_the_wait_runs_out_with_a_clear_error(api: FakeApi) -> None:
    """A holder that stays past the wait: ConfigError naming it and what to do; the
    holder's lock is left as it is."""
    clock = Clock()
    assert isinstance(lock.try_lock(api, "submit of a", clock()), str)
    with (
        pytest.raises(ConfigError, match="held by submit of a after waiting 60 s; allowed: one"),
        lock.submit_lock({"url": "x"}, "b", lambda _l: None, 60, clock=clock, sleep=clock.sleep),
    ):
        pass
    assert len(api.configs_by_id) == 1


def test_a_leader_that_does_not_answer_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any other Docker error names the leader, not a traceback."""

    class Down:
        class api:
            @staticmethod
            def create_config(*_a: Any, **_k: Any) -> Any:
                raise ApiError(500)

    monkeypatch.setattr(lock, "docker_client", lambda _ep, _ssh=None: Down())
    with (
        pytest.raises(ConfigError, match="submit lock could not be taken: docker unix:///s"),
        lock.submit_lock({"url": "unix:///s"}, "b", print),
    ):
        pass


def test_holder_name_names_the_job_user_and_process() -> None:
    """What a waiting submit is told about the holder."""
    name = lock.holder_name("exp-a")
    assert name.startswith("submit of exp-a by ") and "@" in name and " pid " in name


def test_the_holder_renews_its_lease_while_the_block_runs(api: FakeApi) -> None:
    """Each renewal moves the expiry `hold_s` past the clock; the lock stays the holder's."""
    clock = Clock()
    with lock.submit_lock({"url": "x"}, "submit of a", print, hold_s=50, clock=clock, renew_s=0.01):
        (held,) = api.configs_by_id.values()
        clock.now = 5000.0
        wait_for("the renewal", lambda: held["Spec"]["Labels"][lock.EXPIRES_LABEL] == "5050",
                 5, 0.005)  # fmt: skip
        assert held["Spec"]["Labels"][lock.HOLDER_LABEL] == "submit of a"
    assert api.configs_by_id == {}


def test_a_lapsed_lease_taken_by_another_is_not_renewed(api: FakeApi) -> None:
    """Renewing a lock another took (this holder's lease lapsed, the lock removed and
    made anew) changes nothing of it and says whose it is."""
    mine = lock.try_lock(api, "submit of a", 1000.0)
    assert isinstance(mine, str)
    api.remove_config(mine)
    theirs = lock.try_lock(api, "submit of b", 1000.0)
    assert isinstance(theirs, str)
    assert lock.renew(api, mine, "submit of a", 9999.0) == "it is gone"
    assert lock.renew(api, theirs, "submit of a", 9999.0) == "it is held by submit of b"
    assert api.configs_by_id[theirs]["Spec"]["Labels"][lock.EXPIRES_LABEL] == "1120"


def test_a_renewal_at_a_stale_version_is_refused(api: FakeApi) -> None:
    """The update carries the version read: a change between the read and the update
    (another writer) makes the renewal fail, saying the leader's answer."""
    mine = lock.try_lock(api, "submit of a", 1000.0)
    assert isinstance(mine, str)
    read = api.inspect_config

    def then_changed(cid: str) -> dict[str, Any]:
        got = read(cid)
        api.configs_by_id[cid]["version"] = 7
        return got

    api.inspect_config = then_changed  # type: ignore[method-assign]  # the race, staged
    assert lock.renew(api, mine, "submit of a", 9999.0) == "the leader said: HTTP 500"


def test_a_lost_lease_is_said_once_and_the_block_goes_on(api: FakeApi) -> None:
    """The lock removed under the holder (its lease lapsed): the holder says so once,
    stops renewing, and its block is not interrupted."""
    said: list[str] = []
    with lock.submit_lock({"url": "x"}, "submit of a", said.append, renew_s=0.01):
        api.configs_by_id.clear()
        wait_for("the lost lease said", lambda: said, 5, 0.005)
        time.sleep(0.05)
    assert said == ["the cluster's submit lock could not be renewed: it is gone"]
