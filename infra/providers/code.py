"""CodeSync: the training code's version on the shared data dir (dynamic provider; the
pure half is infra/render/code.py).

- Create and update read the code dir again, refuse when it no longer has the digest
  the program computed (edited between preview and up), copy the bundle into the
  master task (`put_archive` into the task's own /tmp: the daemon never writes to the
  shared file system, where root may be squashed) and unpack it as the training uid
  into `/data/code/<run>/<digest>/`, checked against its manifest and renamed into
  place. Then every other training task must see the same files: a data dir that is
  not shared is refused, naming the host, before the launch starts.
- The previous version stays until the next change (the run being stopped may still
  import from it); older ones are removed.
- Read checks the version in every reachable task with `sha256sum -c`: files removed
  or edited on the hosts read back as another `digest`, drift that `up` repairs.
- Its inputs hold the code's digest, not its bytes: the state stays small, and the
  source path, which differs between checkouts, is not compared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pulumi
from docker.errors import DockerException
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, UpdateResult
from requests.exceptions import ConnectionError as RequestsConnectionError

from infra.layout import TRAIN_UID
from infra.providers.boundary import BoundaryProvider, diff_keys
from infra.providers.hostops import HostError, each, service_container, ssh_of
from infra.providers.reach import settle
from infra.render.code import bundle, code_root, install_script, tar_bytes, verify_script

# Changed, these mean copying again; `run_name` moves the versions' directory.
CODE_KEYS = ("digest", "run_name", "tasks")
# The bundle's file inside the master task before it is unpacked (its own /tmp).
ARCHIVE_DIR = "/tmp"


Ssh = dict[str, Any] | None
"""A host's SSH settings (hostops.ssh_of), None for the URL's own."""


def _container(endpoint: dict[str, Any], task: dict[str, Any], ssh: Ssh = None) -> Any:
    """The running container of a roster task; HostError when there is none."""
    ctr = service_container(endpoint, task["service"], ssh=ssh)
    if ctr is None:
        raise HostError(f"no running task of {task['service']} on {task['node']}")
    return ctr


def _exec(
    endpoint: dict[str, Any], task: dict[str, Any], script: str, ssh: Ssh = None
) -> tuple[int, str]:
    """Run `script` as the training uid in a roster task: exit status and output."""
    return _run(_container(endpoint, task, ssh), script)


def _run(ctr: Any, script: str) -> tuple[int, str]:
    res = ctr.exec_run(["sh", "-c", script], user=TRAIN_UID)
    out = res.output.decode(errors="replace") if isinstance(res.output, bytes) else ""
    return int(res.exit_code or 0), out.strip()


def _install(props: dict[str, Any], keep: list[str]) -> None:
    b = bundle(Path(props["source"]), props["exclude"])
    digest = props["digest"]
    if b.digest != digest:
        raise Exception(
            f"training.code.dir: {props['source']} changed after the preview (digest "
            f"{b.digest}, planned {digest}); run `pulumi up` again to ship what is there now"
        )
    master, *others = props["tasks"]
    endpoints = props["host_endpoints"]
    ctr = _container(endpoints[master["node"]], master, ssh_of(props, endpoints[master["node"]]))
    name = f"dss-code-{digest}.tar"
    # put_archive unpacks a tar: a one-member tar that holds the bundle's tar.
    if not ctr.put_archive(ARCHIVE_DIR, tar_bytes([(name, b.tar(digest), 0o644)])):
        raise HostError(f"copying the code into {master['service']} on {master['node']} failed")
    rc, out = _run(ctr, install_script(props["run_name"], digest, f"{ARCHIVE_DIR}/{name}", keep))
    if rc != 0:
        raise Exception(
            f"training code {digest}: unpacking into the data dir on {master['node']} failed "
            f"(exit {rc}): {out[-800:]}"
        )
    # The other tasks read the same /data: they must see the same files (all asked at
    # once; the first that does not, in roster order, is reported).
    verify = verify_script(props["run_name"], digest)
    found = each(
        others,
        lambda t: _exec(endpoints[t["node"]], t, verify, ssh=ssh_of(props, endpoints[t["node"]])),
    )
    for task, (rc, out) in zip(others, found, strict=True):
        if rc != 0:
            raise Exception(
                f"training.data_dir: the code written from {master['node']} is not intact in "
                f"{task['node']}'s task ({out or f'exit {rc}'}); allowed: a data dir shared by "
                "every host (the same file system at the same path, e.g. NFS)"
            )


def _or_gone(props: dict[str, Any], task: dict[str, Any], script: str) -> tuple[int, str] | None:
    """`_exec`, or None for a task that is gone (or went while it was asked), or whose
    host the swarm knows lost; a host that cannot be reached and is not known lost
    fails the read, naming it (infra/providers/reach.py)."""
    where = props["host_endpoints"][task["node"]]
    try:
        return _exec(where, task, script, ssh=ssh_of(props, where))
    except (
        HostError,
        DockerException,
        RequestsConnectionError,
        ConnectionError,
        TimeoutError,
    ) as e:
        settle(props, task["node"], str(where.get("url")), e)
        return None


def check(props: dict[str, Any]) -> str:
    """The digest the tasks hold: `digest` when every reachable task has it intact,
    else a word for what is wrong there (`missing on lab-h2`, `modified on lab-h1`)."""
    tasks = props["tasks"]
    script = verify_script(props["run_name"], props["digest"])
    found = each(tasks, lambda t: _or_gone(props, t, script))
    for task, result in zip(tasks, found, strict=True):
        if result is None:
            # A task that is gone is the roster's to report.
            continue
        rc, _ = result
        if rc == 3:
            return f"missing on {task['node']}"
        if rc != 0:
            return f"modified on {task['node']}"
    return str(props["digest"])


class CodeSyncProvider(BoundaryProvider):
    """Copies the code's version into the data dir and checks it on every task."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        _install(props, keep=[])
        return CreateResult(id_=f"code-{props['run_name']}", outs=props)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Keep the version being replaced: its run is stopped only after this.
        # (A digest read back as `missing on ...` names no directory to keep.)
        old = str(olds.get("digest", ""))
        kept = (
            olds.get("run_name") == news["run_name"]
            and old != news["digest"]
            and re.fullmatch(r"[0-9a-f]{12}", old)
        )
        _install(news, keep=[old] if kept else [])
        return UpdateResult(outs=news)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_keys(olds, news, CODE_KEYS, replace_on=("run_name",))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs={**props, "digest": check(props)})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """Removes the run's code versions (the launch, which ran them, is gone)."""
        master = props["tasks"][0]
        root = code_root(props["run_name"])
        try:
            where = props["host_endpoints"][master["node"]]
            rc, out = _exec(where, master, f"rm -rf {root}", ssh=ssh_of(props, where))
        except (HostError, DockerException, RequestsConnectionError) as e:
            # A destroy goes on without the master's host (gone, unreachable, its task
            # leaving): the code is files on the data dir, nothing runs them any more.
            rc, out = -1, f"no task to remove it from ({' '.join(str(e).split())[:200]})"
        if rc != 0:
            pulumi.log.warn(f"training code: {root} stays on the data dir: {out}")


class CodeSync(Resource):
    """The training code's version on the data dir (dynamic resource)."""

    digest: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(CodeSyncProvider(), name, props, opts)
