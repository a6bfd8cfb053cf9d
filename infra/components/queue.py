"""QueuedJob: the queued form of a job stack, a job that waits for its cluster's GPUs.

docs/design/sharing.md, 3.2. When `scripts/job submit` finds no room for the job now
(infra/admission.py), it writes the job's file with `training.queued` and runs `up`:
the stack then holds its ClusterRef and this component, whose one child is the job's
queue entry (infra/providers/queue.py, the Swarm config `dss-queue.<job>` on the
leader), and no GPU service, no launch and no scrape, so the job holds no GPU while it
waits (no hold-and-wait). The entry's data is the job's training as submitted, its
code's digest and the project revision, so the job that starts is the one submitted.
Its code dir is in the data only when it is inside the project (a path relative to it,
the same in every checkout; an absolute one is a path on the submitter's machine): a
pass from another checkout at that revision whose code dir there has that digest
writes the job's file from the data (jobs/entryfile.py). The code itself, when its
gzipped bundle is small enough, is the second child: a Swarm config of its own
(infra/providers/queuecode.py), which such a pass unpacks when its checkout lacks the
code; with no task of the job there is nothing else to sync it through until the job
is admitted. Admitted (`scripts/job queue
CLUSTER --run`, or a submit that fits), the file is written without `queued` and `up`
makes the full form, deleting the entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from infra.components.clusterref import ClusterRef
from infra.components.swarm import ssh_prop
from infra.config import StackConfig, code_dir
from infra.config.rules.placement import job_ask
from infra.providers.queue import QueueEntry
from infra.providers.queuecode import QueueCode, carried
from infra.render.code import Bundle, bundle


@dataclass(frozen=True)
class QueuedJobArgs:
    """The job's config (its ask, priority and mark) and its cluster's reference."""

    cfg: StackConfig
    cluster: ClusterRef


def entry_data(cfg: StackConfig, code: Bundle | None) -> dict[str, Any]:
    """The entry's data: the job's training as submitted (its keys that differ from the
    defaults, without the code and the mark), its code digest (`code`: its bundle,
    `code_bundle`; None: the image's code), the revision it was submitted from, and its
    `code` section when its dir is inside the project (module doc; absent otherwise, so
    an image-code job's data is as it was)."""
    t = cfg.training
    digest = code.digest if code is not None else None
    data = {
        "training": t.model_dump(mode="json", exclude={"code", "queued"}, exclude_defaults=True),
        "code_digest": digest,
        "revision": t.queued.revision if t.queued else "",
    }
    if t.code.dir and not Path(t.code.dir).is_absolute():
        data["code"] = t.code.model_dump(mode="json", exclude_defaults=True)
    return data


def code_bundle(cfg: StackConfig) -> Bundle | None:
    """The job's code bundle (None: the image's code)."""
    t = cfg.training
    return bundle(code_dir(t.code.dir), t.code.exclude) if t.code.dir else None


def entry_ask(cfg: StackConfig) -> dict[str, Any]:
    """The ask the admission pass plans the job by (infra/placement.py `Ask`)."""
    ask = job_ask(cfg)
    return {
        "nodes": ask.nodes,
        "gpus_per_node": ask.gpus_per_node,
        "gpu_model": ask.gpu_model,
        "hosts": list(ask.hosts),
    }


class QueuedJob(pulumi.ComponentResource):
    """A waiting job's entry in its cluster's queue (module doc)."""

    entry: QueueEntry
    code: QueueCode | None

    def __init__(
        self, name: str, args: QueuedJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:queue:QueuedJob", name, None, opts)
        cfg = args.cfg
        assert cfg.job_name is not None and cfg.cluster is not None  # a job stack's
        code = code_bundle(cfg)  # every file read and hashed: once, for both children
        self.entry = QueueEntry(
            f"{name}-entry",
            {
                "leader_endpoint": args.cluster.leader_endpoint,
                "job": cfg.job_name,
                "cluster": cfg.cluster,
                "priority": cfg.training.priority,
                "ask": entry_ask(cfg),
                "data": entry_data(cfg, code),
                **ssh_prop(args.cluster.ssh_hosts),
            },
            pulumi.ResourceOptions(parent=self, depends_on=[args.cluster]),
        )
        # The code itself, when small enough, for a pass from a checkout without it
        # (jobs/entryfile.py); larger code starts only where it is.
        self.code = None
        if code is not None and carried(code):
            self.code = QueueCode(
                f"{name}-code",
                {
                    "leader_endpoint": args.cluster.leader_endpoint,
                    "job": cfg.job_name,
                    "digest": code.digest,
                    "source": str(code.root),
                    "exclude": list(cfg.training.code.exclude),
                    **ssh_prop(args.cluster.ssh_hosts),
                },
                pulumi.ResourceOptions(parent=self, depends_on=[args.cluster]),
            )
        self.register_outputs({"state": self.entry.state, "reason": self.entry.reason})
