"""QueueEntry: a job waiting for its cluster's GPUs, as a Swarm config on the leader.

docs/design/sharing.md, 3.2. A job that does not fit when it is submitted is a config
named `dss-queue.<job>` (`entry_name`) made by this resource of the job's own stack, so
the entry is in the stack's state and in the swarm's Raft store, which keeps names
unique and outlives any one machine. Its data (immutable, as Swarm keeps a config's
data): the job's training as submitted, its code digest and the project revision it was
submitted from. Its labels (`LABELS`) say where it stands: `priority`, `since` (first
submit, kept by every update, so a resubmit keeps the job's place), `ask`, `state`,
`hosts` (reserved or admitted), `by` and `beat` (the claimant, for the runner: C6),
`position`, `reason`, `before` (a reservation's: the jobs holding its hosts when made).

Every label change carries the version the change was read at (`set_labels`): Swarm
refuses a stale one ("update out of sequence"), which is then read again and applied
over what another writer left, never written blind over it. A changed ask or priority
is such a change; changed data (a resubmit with another file or code) remakes the
config under the same name, its `since` and state labels kept. `read` returns the
labels' state, position and reason, so a refresh shows them; an entry gone from the
swarm reads as gone (the next `up` makes it again).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import HostError, docker_client, ssh_of, update_config
from infra.providers.reach import is_transport

ENTRY_PREFIX = "dss-queue."
LABEL = "dss.queue."
LABELS = ("priority", "since", "ask", "state", "hosts", "by", "beat", "position", "reason")
RESERVED_BEFORE = "before"
KEYS = ("leader_endpoint", "job", "cluster", "priority", "ask", "data")
"""The inputs; a change of `priority` or `ask` is a label update, of `data` a remake."""
NO_LEADER = "does not have a leader"
"""What a manager's engine says of a swarm it cannot reach the leader of (Raft without
quorum where it stands): another manager may."""
OUTPUTS = ("name", "since", "state", "position", "reason", "hosts")
CAS_TRIES = 5
"""Stale versions in a row before a label change gives up (each one is another writer's
change read back: a handful means something rewrites the entry without end)."""


def entry_name(job: str) -> str:
    return f"{ENTRY_PREFIX}{job}"


def ask_label(ask: Mapping[str, Any]) -> str:
    """The `ask` label: the job's nodes, GPUs per node, model and named hosts as compact
    JSON (what the admission pass plans by, infra/placement.py `Ask`)."""
    return json.dumps(dict(ask), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Entry:
    """One entry as the leader has it: its config id and version, and its labels."""

    id: str
    version: int
    name: str
    labels: Mapping[str, str]

    @property
    def job(self) -> str:
        return self.name.removeprefix(ENTRY_PREFIX)

    def label(self, key: str, default: str = "") -> str:
        return str(self.labels.get(LABEL + key, default))

    @property
    def state(self) -> str:
        return self.label("state", "queued")

    @property
    def priority(self) -> int:
        return int(self.label("priority", "0") or 0)

    @property
    def since(self) -> float:
        return float(self.label("since", "0") or 0)

    @property
    def ask(self) -> dict[str, Any]:
        return dict(json.loads(self.label("ask", "{}") or "{}"))

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(h for h in self.label("hosts").split(",") if h)

    @property
    def position(self) -> int | None:
        text = self.label("position")
        return int(text) if text.isdigit() else None

    @property
    def reason(self) -> str:
        return self.label("reason")

    def outputs(self) -> dict[str, Any]:
        """What a refresh shows of it (`OUTPUTS`)."""
        return {
            "name": self.name,
            "since": self.since,
            "state": self.state,
            "position": self.position,
            "reason": self.reason,
            "hosts": list(self.hosts),
        }


def _status(e: Exception) -> int | None:
    code = getattr(e, "status_code", None)
    return code if isinstance(code, int) else None


def _stale(e: Exception) -> bool:
    """Swarm's answer to an update carrying an old version (a 500 from the Raft store)."""
    return "out of sequence" in str(e)


def _entry(cfg: Mapping[str, Any]) -> Entry:
    spec = cfg.get("Spec") or {}
    version = int((cfg.get("Version") or {}).get("Index") or 0)
    return Entry(str(cfg["ID"]), version, str(spec.get("Name")), dict(spec.get("Labels") or {}))


def config_named(api: Any, name: str) -> dict[str, Any] | None:
    """The Swarm config named `name` on the leader (as the engine lists it), or None."""
    for cfg in api.configs(filters={"name": name}):
        if (cfg.get("Spec") or {}).get("Name") == name:  # the filter matches prefixes too
            return dict(cfg)
    return None


def find_entry(api: Any, job: str) -> Entry | None:
    """Job `job`'s entry on the leader, or None."""
    cfg = config_named(api, entry_name(job))
    return None if cfg is None else _entry(cfg)


def entry_data(api: Any, entry: Entry) -> dict[str, Any]:
    """The data entry `entry` was made with (`_data`): the engine returns it base64."""
    spec = api.inspect_config(entry.id).get("Spec") or {}
    return dict(json.loads(base64.b64decode(spec.get("Data") or "e30=")))


def list_entries(api: Any) -> list[Entry]:
    """Every queue entry on the leader (the cluster's waiting jobs)."""
    found = api.configs(filters={"name": ENTRY_PREFIX})
    return [
        _entry(c) for c in found if str((c.get("Spec") or {}).get("Name")).startswith(ENTRY_PREFIX)
    ]


def _update_config(api: Any, entry: Entry, labels: Mapping[str, str]) -> None:
    """The entry's labels replaced at `entry`'s version (hostops.update_config): only
    labels may change, so the spec is the one read with new labels."""
    spec = dict(api.inspect_config(entry.id).get("Spec") or {})
    spec["Labels"] = dict(labels)
    update_config(api, entry.id, entry.version, spec)


def set_labels(
    api: Any,
    job: str,
    change: Callable[[Entry], Mapping[str, str | None] | None],
    tries: int = CAS_TRIES,
) -> Entry | None:
    """Apply `change` to job `job`'s entry as a compare-and-swap: `change` gets the entry
    as read and returns the labels to set (None as a value: remove the label; None for
    the whole: leave the entry as it is); the update carries the version read, and a
    stale one is read again and `change` applied afresh. The entry as left (None: there
    is none). HostError naming the entry after `tries` stale versions in a row."""
    for _ in range(tries):
        entry = find_entry(api, job)
        if entry is None:
            return None
        wanted = change(entry)
        if wanted is None:
            return entry
        labels = {**entry.labels, **{LABEL + k: v for k, v in wanted.items() if v is not None}}
        for k, v in wanted.items():
            if v is None:
                labels.pop(LABEL + k, None)
        try:
            _update_config(api, entry, labels)
        except Exception as e:  # the Docker SDK's APIError
            if _stale(e):
                continue  # another writer changed it since the read: read it again
            raise
        return find_entry(api, job)
    raise HostError(
        f"queue entry {entry_name(job)}: its labels changed under {tries} updates in a row; "
        "allowed: one writer at a time (the submit lock); try again"
    )


def _labels(props: Mapping[str, Any], since: float, kept: Mapping[str, str]) -> dict[str, str]:
    """A new entry's labels: its priority and ask, `since`, and the labels `kept` from
    the config it replaces (its state, hosts, reason), else `queued`."""
    out = {LABEL + "state": "queued", **kept}
    out[LABEL + "priority"] = str(int(props["priority"]))
    out[LABEL + "ask"] = ask_label(props["ask"])
    out[LABEL + "since"] = f"{since:.3f}"
    return out


def _data(props: Mapping[str, Any]) -> bytes:
    return json.dumps(props["data"], sort_keys=True).encode()


def leader_api(props: Mapping[str, Any]) -> Any:
    """The Docker API of the manager a queue resource was made through."""
    endpoint = props["leader_endpoint"]
    return docker_client(endpoint, ssh_of(props, endpoint)).api


def _make(api: Any, props: Mapping[str, Any], since: float, kept: Mapping[str, str]) -> Entry:
    name = entry_name(props["job"])
    api.create_config(name, _data(props), labels=_labels(props, since, kept))
    made = find_entry(api, props["job"])
    if made is None:
        raise HostError(f"queue entry {name}: made on the leader, then not found there")
    return made


def _result(props: Mapping[str, Any], entry: Entry) -> dict[str, Any]:
    return {**{k: props[k] for k in KEYS if k in props}, **_ssh(props), **entry.outputs()}


def _ssh(props: Mapping[str, Any]) -> dict[str, Any]:
    return {"ssh_hosts": props["ssh_hosts"]} if props.get("ssh_hosts") else {}


class QueueEntryProvider(BoundaryProvider):
    """The entry's config on the leader (module doc): made, relabelled by
    compare-and-swap, remade when its data changes, read back with its state."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        api = leader_api(props)
        old = find_entry(api, props["job"])
        if old is not None:
            # Left by a stack whose state lost it (an interrupted `up`): the job keeps
            # its place; its data is written anew.
            api.remove_config(old.id)
        since = old.since if old is not None else time.time()
        entry = _make(api, props, since, _kept(old))
        return CreateResult(entry.id, _result(props, entry))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        api = leader_api(news)
        if olds.get("data") != news.get("data"):
            old = find_entry(api, news["job"])
            since = old.since if old is not None else float(olds.get("since") or time.time())
            if old is not None:
                api.remove_config(old.id)
            entry = _make(api, news, since, _kept(old))
        else:
            relabel = {"priority": str(int(news["priority"])), "ask": ask_label(news["ask"])}
            got = set_labels(api, news["job"], lambda _e: relabel)
            entry = got if got is not None else _make(api, news, time.time(), {})
        return UpdateResult(_result(news, entry))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        entry = find_entry(leader_api(props), props["job"])
        if entry is None:
            return ReadResult(id_=None, outs={})  # gone: refresh drops it, `up` makes it
        return ReadResult(id_=entry.id, outs=_result(props, entry))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, KEYS, replace_on=("job", "leader_endpoint"),
                         delete_before_replace=True)  # fmt: skip

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        remove_on_leader(props, entry_name(props["job"]))


def remove_named(api: Any, name: str) -> None:
    """Remove the config named `name` from the leader `api`; none there is as wanted."""
    cfg = config_named(api, name)
    if cfg is None:
        return
    try:
        api.remove_config(cfg["ID"])
    except Exception as e:
        if _status(e) != 404:  # gone meanwhile: as wanted
            raise


def remove_on_leader(props: Mapping[str, Any], name: str) -> None:
    """Remove the config named `name` through the manager a queue resource (`props`)
    was made through, or, that manager lost or cut off from the swarm's leader, through
    the next of the cluster's ssh:// hosts that answers as a manager: a config is in
    Raft, on every manager; the job starts through another (jobs/leader.py `reached`)."""
    try:
        remove_named(leader_api(props), name)
    except Exception as e:
        if not (is_transport(e) or NO_LEADER in str(e)):
            raise
        for ep in _other_engines(props):
            try:
                remove_named(docker_client(ep, ssh_of(props, ep)).api, name)
            except Exception:  # not a manager, or not reachable either: the next
                continue
            return
        raise


def _other_engines(props: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The engines of the cluster's other ssh:// hosts, in its file's order (the SSH
    settings the program gave, by URL); a tcp:// cluster gives none."""
    made_through = str(props["leader_endpoint"].get("url"))
    return [{"url": url} for url in props.get("ssh_hosts") or {} if url != made_through]


def _kept(old: Entry | None) -> dict[str, str]:
    """The labels a remade entry keeps of the one it replaces: where it stands."""
    if old is None:
        return {}
    keep = ("state", "hosts", "position", "reason", RESERVED_BEFORE)
    return {LABEL + k: old.label(k) for k in keep if LABEL + k in old.labels}


class QueueEntry(Resource):
    """A waiting job's entry in its cluster's queue (module doc). Outputs: `state`,
    `position`, `reason` as the last `up` or refresh read them."""

    state: pulumi.Output[str]
    position: pulumi.Output[Any]
    reason: pulumi.Output[str]
    since: pulumi.Output[float]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(QueueEntryProvider(), name, {**props, **dict.fromkeys(OUTPUTS)}, opts)
