"""A waiting job's stack file written from its queue entry, when the checkout a pass
runs from does not have it (docs/jobs.md, "Starting a job from another checkout").

A job's stack file lives in the checkout it was submitted from; its entry's data
(infra/components/queue.py `entry_data`) holds what the file said: its training as
submitted, the project revision, the code's digest and, when the code dir is inside the
project, that dir. A pass from another checkout (a watch on a manager, a CI schedule)
writes the file from it when that checkout can run the job as submitted:

- at the same revision, so the program that starts it is the one it was submitted
  with (not a git checkout on either side: refused, as it cannot be told);
- its code dir inside the project, with the digest submitted here too (the code
  committed with the revision, or put there); a dir outside the project is a path on
  the submitter's machine: refused, naming the job.

The file is the queued form the submitter's was (the `queued` mark kept), then the pass
writes its full form as for any admitted job. The submitter's own file stays in the
queued form: `scripts/job list` there says the entry is gone. The code is not carried
by the entry (the design's C6 would); the refusals say what is allowed.
"""

from __future__ import annotations

from typing import Any

from infra.config import ConfigError, code_dir
from infra.config.models.job import Code
from infra.providers.queue import entry_data, entry_name, find_entry
from infra.render.code import bundle
from jobs import command
from jobs.queue import revision


class CannotStart(Exception):
    """An admitted job that cannot start from this checkout: the line saying why."""


def write_from_entry(job: str, cluster: str, api: Any) -> str:
    """Write waiting job `job`'s stack file (cluster `cluster`) from its entry on the
    leader `api` (module doc); the line that says so. CannotStart: why it cannot start
    from this checkout (nothing written)."""
    name = command.stack_file(job).name
    entry = find_entry(api, job)
    if entry is None:
        raise CannotStart(f"job {job}: {name} is not in this checkout and its entry "
                          f"{entry_name(job)} is gone from the leader")  # fmt: skip
    data = entry_data(api, entry)
    wanted, here = str(data.get("revision") or ""), revision(command.stack_file(job).parent)
    if not wanted or wanted != here:
        raise CannotStart(f"job {job}: {name} is not in this checkout, and it was submitted "
                          f"from revision {wanted[:12] or 'none (not a git checkout)'} while "
                          f"this checkout is at {here[:12] or 'none'}; it waits; allowed: run "
                          "the queue from the checkout it was submitted from, or from one at "
                          "its revision")  # fmt: skip
    training = dict(data.get("training") or {})
    digest = data.get("code_digest")
    if digest is not None:
        training["code"] = _code_here(job, name, data.get("code"), str(digest))
    training["queued"] = {"revision": wanted}
    try:
        path = command.write_values(job, command.job_values(cluster, training))
    except ConfigError as e:
        raise CannotStart(f"job {job}: its file written from its entry is refused: "
                          f"{'; '.join(e.problems)}") from None  # fmt: skip
    code = f", code {digest}" if digest else ""
    return f"job {job}: {path.name} written from its queue entry (revision {wanted[:12]}{code})"


def _code_here(job: str, name: str, code: Any, digest: str) -> dict[str, Any]:
    """The entry's `code` section when its dir here has `digest`. CannotStart: it has
    none (the dir was outside the project), or the dir here is missing or differs."""
    if not isinstance(code, dict) or not code.get("dir"):
        raise CannotStart(f"job {job}: {name} is not in this checkout, and its code dir was "
                          "outside the project it was submitted from; it waits; allowed: "
                          "run the queue from the checkout it was submitted from, or submit "
                          "code kept inside the project")  # fmt: skip
    model = Code.model_validate(code)
    root = code_dir(str(model.dir))
    got = bundle(root, model.exclude).digest if root.is_dir() else "missing"
    if got != digest:
        raise CannotStart(f"job {job}: {name} is not in this checkout, and its code dir "
                          f"{model.dir} here is {got}, submitted as {digest}; it waits; "
                          "allowed: a checkout with the code as submitted (commit it with "
                          "the revision)")  # fmt: skip
    return dict(code)
