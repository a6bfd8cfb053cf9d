"""A waiting job's stack file written from its queue entry, when the checkout a pass
runs from does not have it (docs/jobs.md, "Starting a job submitted from another
checkout").

A job's stack file lives in the checkout it was submitted from; its entry's data
(infra/components/queue.py `entry_data`) holds what the file said: its training as
submitted, the project revision, the code's digest and, when the code dir is inside the
project, that dir. A pass from another checkout (a watch on a manager, a CI schedule)
writes the file from it when that checkout can run the job as submitted:

- at the same revision, so the program that starts it is the one it was submitted
  with (not a git checkout on either side: refused, as it cannot be told); or, when
  the pass is told to (`--any-revision`), at any revision, the program here starting
  it once its file, written from the entry, validates here (the `queued` mark keeps
  the revision it was submitted from);
- with its code: the entry's code dir inside the project with the digest submitted
  (the code committed with the revision), else the code the queue carries
  (infra/providers/queuecode.py), unpacked into the checkout's `CARRIED_DIR`
  (jobs/jobfile.py) and checked against the digest; neither: refused, naming the job.

The file is the queued form the submitter's was (the `queued` mark kept; the code dir
the unpacked one when the code was carried), then the pass writes its full form as for
any admitted job. The submitter's own file stays in the queued form: `scripts/job
list` there says the entry is gone. The refusals say what is allowed.
"""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from infra.config import ConfigError, code_dir
from infra.config.models.job import Code
from infra.providers.queue import entry_data, entry_name, find_entry
from infra.providers.queuecode import code_bytes
from infra.render.code import bundle
from jobs import command
from jobs.queue import revision


class CannotStart(Exception):
    """An admitted job that cannot start from this checkout: the line saying why."""


def write_from_entry(job: str, cluster: str, api: Any, any_revision: bool = False) -> str:
    """Write waiting job `job`'s stack file (cluster `cluster`) from its entry on the
    leader `api` (module doc); the line that says so. `any_revision`: a job submitted
    from another revision is written too, the line naming both. CannotStart: why it
    cannot start from this checkout (nothing written)."""
    name = command.stack_file(job).name
    entry = find_entry(api, job)
    if entry is None:
        raise CannotStart(f"job {job}: {name} is not in this checkout and its entry "
                          f"{entry_name(job)} is gone from the leader")  # fmt: skip
    data = entry_data(api, entry)
    wanted, here = str(data.get("revision") or ""), revision(command.stack_file(job).parent)
    same = bool(wanted) and wanted == here
    if not (same or any_revision):
        raise CannotStart(f"job {job}: {name} is not in this checkout, and it was submitted "
                          f"from revision {wanted[:12] or 'none (not a git checkout)'} while "
                          f"this checkout is at {here[:12] or 'none'}; it waits; allowed: run "
                          "the queue from the checkout it was submitted from, or from one at "
                          "its revision, or with --any-revision (this checkout's program "
                          "starts it)")  # fmt: skip
    training = dict(data.get("training") or {})
    digest = data.get("code_digest")
    said = ""
    if digest is not None:
        training["code"], said = _code(job, name, data.get("code"), str(digest), api)
    training["queued"] = {"revision": wanted}
    try:
        path = command.write_values(job, command.job_values(cluster, training))
    except ConfigError as e:
        raise CannotStart(f"job {job}: its file written from its entry is refused: "
                          f"{'; '.join(e.problems)}") from None  # fmt: skip
    code = f", code {digest}{said}" if digest else ""
    at = f"revision {wanted[:12]}" if same else other_revision(wanted, here)
    return f"job {job}: {path.name} written from its queue entry ({at}{code})"


def other_revision(wanted: str, here: str) -> str:
    """The words for a job submitted from revision `wanted` that this checkout, at
    `here`, starts with its own program (`--any-revision`)."""
    return (f"submitted from revision {wanted[:12] or 'none'}, started with this "
            f"checkout's program at {here[:12] or 'none'}: --any-revision")  # fmt: skip


def _code(job: str, name: str, code: Any, digest: str, api: Any) -> tuple[dict[str, Any], str]:
    """The job's `code` section here, and what the line says of it: the entry's, when
    its dir here has `digest`; else the code the queue carries, unpacked (`unpack`).
    CannotStart: neither."""
    why = _not_here(code, digest)
    if why is None:
        return dict(code), ""
    got = code_bytes(api, job)
    if got is None:
        raise CannotStart(f"job {job}: {name} is not in this checkout, and {why}, and the "
                          "queue does not carry its code (too large); it waits; allowed: "
                          "run the queue from the checkout it was submitted from, or from "
                          "one with its code in the project at its revision")  # fmt: skip
    label, packed = got
    if label != digest:
        raise CannotStart(f"job {job}: the code its queue carries is {label or 'unlabelled'}, "
                          f"submitted as {digest}; it waits; allowed: submit it again")  # fmt: skip
    root = unpack(command.carried_code(job), job, digest, packed)
    return {"dir": str(root), "exclude": []}, " carried by the queue"


def _not_here(code: Any, digest: str) -> str | None:
    """Why the entry's `code` section is not the code here (None: it is)."""
    if not isinstance(code, dict) or not code.get("dir"):
        return "its code dir was outside the project it was submitted from"
    model = Code.model_validate(code)
    root = code_dir(str(model.dir))
    got = bundle(root, model.exclude).digest if root.is_dir() else "missing"
    return (
        None if got == digest else f"its code dir {model.dir} here is {got}, submitted as {digest}"
    )


def unpack(home: Path, job: str, digest: str, packed: bytes) -> Path:
    """The carried code of job `job` (`packed`: its gzipped tar) unpacked under `home`
    (jobs/jobfile.py `carried_code`) as `<digest>/`, checked against `digest` (its
    files' manifest hashed) before it is renamed into place; the job's other versions
    there removed. CannotStart: a member outside `<digest>/`, not a plain file, or
    files that do not have the digest."""
    final = home / digest
    if final.is_dir() and bundle(final, []).digest == digest:
        return final
    home.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=".partial-", dir=home))
    try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(packed))) as tar:
            for member in tar.getmembers():
                inside = member.name.startswith(f"{digest}/") and ".." not in member.name
                if not (member.isfile() and inside):
                    raise CannotStart(f"job {job}: the code its queue carries holds "
                                      f"{member.name!r}; allowed: plain files under "
                                      f"{digest}/")  # fmt: skip
                got = tar.extractfile(member)
                assert got is not None  # a plain file's
                out = part / member.name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(got.read())
                out.chmod(0o755 if member.mode & 0o111 else 0o644)
        if bundle(part / digest, []).digest != digest:
            raise CannotStart(f"job {job}: the code its queue carries does not have its "
                              f"digest {digest}; it waits; allowed: submit it again")  # fmt: skip
        shutil.rmtree(final, ignore_errors=True)
        (part / digest).rename(final)
    finally:
        shutil.rmtree(part, ignore_errors=True)
    for old in home.iterdir():
        if old.name != digest:
            shutil.rmtree(old, ignore_errors=True)
    return final
