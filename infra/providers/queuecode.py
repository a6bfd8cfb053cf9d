"""QueueCode: a waiting job's code, carried in its cluster's queue as a Swarm config.

docs/design/sharing.md, C6 in part. A queued job has no task its code could be synced
through (infra/providers/code.py copies into the master task), so a pass from a
checkout without the job's code could not start it. The code's bundle
(infra/render/code.py: its files and manifest under `<digest>/`, a tar with fixed
times), gzipped, is the Swarm config `dss-queue-code.<job>` (`code_name`) on the
leader, made by this resource of the job's queued form: it is in the stack's state and
in Raft, and the full form's `up` deletes it with the entry. jobs/entryfile.py unpacks
it and checks it against its manifest and digest.

Only code whose gzipped tar is at most `MAX_CARRIED` bytes is carried (Swarm keeps a
config's data to 1000 KB); the program makes no such resource for larger code
(`carried`), and that job starts only from a checkout that has its code.

Its inputs hold the digest, not the bytes (the state stays small), and the code dir's
path on the machine that runs Pulumi (`source`), which is not compared: another
checkout's path is no change. Create, and a changed digest, read the dir again and
refuse when it no longer has the digest the program computed (edited between preview
and `up`). A refresh reads the config's digest label: a config gone reads as gone, one
with another digest as that digest (drift `up` repairs).
"""

from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult

from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import HostError
from infra.providers.queue import LABEL, config_named, leader_api, remove_named, remove_on_leader
from infra.render.code import Bundle, bundle

CODE_PREFIX = "dss-queue-code."
DIGEST_LABEL = LABEL + "digest"
MAX_CARRIED = 900 * 1024
"""The largest gzipped bundle carried: under Swarm's 1000 KB for a config's data, with
room for its base64 on the wire."""
MAX_READ = 16 << 20
"""The largest bundle the program gzips to see whether it is carried (the rest is
too large to fit in `MAX_CARRIED` unless it compresses more than 18 to 1)."""
KEYS = ("leader_endpoint", "job", "digest")
"""The inputs compared; `source` and `exclude` are not (paths differ between checkouts,
and the digest covers what the excludes leave)."""


def code_name(job: str) -> str:
    return f"{CODE_PREFIX}{job}"


def packed(b: Bundle) -> bytes:
    """Bundle `b` as the config holds it: its tar under `<digest>/`, gzipped with no
    name or time in the header, so the same files give the same bytes."""
    return gzip.compress(b.tar(b.digest), mtime=0)


def carried(b: Bundle) -> bool:
    """Whether bundle `b` is carried in the queue (module doc)."""
    return b.size <= MAX_READ and len(packed(b)) <= MAX_CARRIED


def code_bytes(api: Any, job: str) -> tuple[str, bytes] | None:
    """Job `job`'s carried code: its digest label and the gzipped tar; None: none."""
    found = config_named(api, code_name(job))
    if found is None:
        return None
    spec = api.inspect_config(found["ID"]).get("Spec") or {}
    digest = str((spec.get("Labels") or {}).get(DIGEST_LABEL) or "")
    return digest, base64.b64decode(spec.get("Data") or "")


def _make(props: dict[str, Any]) -> str:
    b = bundle(Path(props["source"]), props["exclude"])
    if b.digest != props["digest"]:
        raise HostError(
            f"training.code.dir: {props['source']} changed after the preview (digest "
            f"{b.digest}, previewed {props['digest']}); allowed: run `up` again"
        )
    api = leader_api(props)
    remove_named(api, code_name(props["job"]))  # left by a state that lost it, or the old digest's
    made = api.create_config(
        code_name(props["job"]), packed(b), labels={DIGEST_LABEL: props["digest"]}
    )
    return str(made["ID"])


def _outs(props: dict[str, Any]) -> dict[str, Any]:
    keep = (*KEYS, "source", "exclude", "ssh_hosts")
    return {k: props[k] for k in keep if k in props}


class QueueCodeProvider(BoundaryProvider):
    """The code config on the leader (module doc)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(_make(props), _outs(props))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if olds.get("digest") != news.get("digest"):
            _make(news)
        return UpdateResult(_outs(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, KEYS, replace_on=("job", "leader_endpoint"),
                         delete_before_replace=True)  # fmt: skip

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = config_named(leader_api(props), code_name(props["job"]))
        if found is None:
            return ReadResult(id_=None, outs={})  # gone: refresh drops it, `up` makes it
        digest = ((found.get("Spec") or {}).get("Labels") or {}).get(DIGEST_LABEL)
        return ReadResult(id_=str(found["ID"]), outs={**_outs(props), "digest": digest})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        remove_on_leader(props, code_name(props["job"]))


class QueueCode(Resource):
    """A waiting job's code in its cluster's queue (module doc)."""

    digest: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(QueueCodeProvider(), name, props, opts)
