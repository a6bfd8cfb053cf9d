"""TrainingCode: the training code synced to the tasks instead of baked into the image
(`training.code.dir`; infra/providers/code.py copies, infra/render/code.py bundles).

The program hashes the directory as it runs, so the digest is a plain value in the
preview: the script's path in the tasks (`/data/code/<run>/<digest>/<script>`) and
the launch's triggers carry it, a one-line change to `train.py` shows as this
component's update and the launch's replacement (the run restarts from its last
checkpoint on the new code), and the image, the services and their tasks stay as
they are. The image is rebuilt only when its own context changes (its dependencies).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from infra.components.swarm import ssh_prop
from infra.config import Code
from infra.providers.code import CodeSync
from infra.render.code import Bundle, bundle, code_path


@dataclass(frozen=True)
class TrainingCodeArgs:
    """The code dir and its excludes, the run it belongs to, and where the tasks are."""

    code: Code
    root: Path
    """`code.dir` on this machine (the config package resolves it)."""
    run_name: str
    host_endpoints: pulumi.Input[dict[str, Any]]
    """Host name -> Docker endpoint (`url`, `tls`): the swarm's."""
    tasks: pulumi.Input[list[dict[str, Any]]]
    """The roster's entries (node, service, task id); the master's first."""
    ssh_hosts: Mapping[str, Any] = field(default_factory=dict)
    """Per ssh:// endpoint URL, its host's SSH settings (swarm.py `ssh_hosts`)."""


class TrainingCode(pulumi.ComponentResource):
    """One version of the training code on the shared data dir."""

    bundle: Bundle
    digest: str
    """The code's content digest: known while the program runs, so the preview shows it."""
    path: str
    """The version's directory inside the tasks."""
    sync: CodeSync

    def __init__(
        self, name: str, args: TrainingCodeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("deepspeed-swarm:code:TrainingCode", name, None, opts)
        self.bundle = bundle(args.root, args.code.exclude)
        self.digest = self.bundle.digest
        self.path = code_path(args.run_name, self.digest)
        tasks = pulumi.Output.from_input(args.tasks).apply(
            lambda es: [{k: e[k] for k in ("node", "service", "task_id")} for e in es]
        )
        self.sync = CodeSync(
            f"{name}-sync",
            {
                "digest": self.digest,
                "files": len(self.bundle.files),
                "bytes": self.bundle.size,
                "run_name": args.run_name,
                "source": str(args.root),
                "exclude": list(args.code.exclude),
                "tasks": tasks,
                "host_endpoints": args.host_endpoints,
                **ssh_prop(args.ssh_hosts),
            },
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"digest": self.digest, "path": self.path})
