"""`scripts/job`: submit, list, follow, resize, stop and remove jobs (jobs/__init__.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pulumi import automation as auto

from infra.command import starts_command
from infra.config import ConfigError
from jobs import command, queuerun, queuewatch, resize, teardown
from jobs.leader import quiet


def _set(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set {text!r}; allowed: key=value (value as JSON)")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}; allowed: seconds above 0")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/job",
        description="Jobs on a cluster stack (docs/jobs.md). submit: what follows `--` is "
        "the command as typed on one node when it starts with deepspeed, torchrun or python "
        "(training.command), else the arguments of --script (training.args).",
    )
    sub = p.add_subparsers(dest="op", required=True)
    s = sub.add_parser("submit", help="write the job's stack file and pulumi up it")
    s.add_argument("dir", type=Path, help="the code dir (synced to the tasks, no image build)")
    s.add_argument("--name", required=True, help="the job: its stack, run and services")
    s.add_argument("--cluster", required=True, help="the cluster stack (kind: cluster)")
    s.add_argument("--script", help="in the code dir (default train.py); not with a command")
    s.add_argument("--steps", type=int)
    s.add_argument("--checkpoint-every", type=int)
    s.add_argument("--nodes", type=int, help="hosts it runs on (default every training host)")
    s.add_argument("--gpus-per-node", type=int)
    s.add_argument("--gpu-model", help="only hosts with this GPU model (hosts[].gpus.model)")
    s.add_argument("--hosts", type=lambda v: [h for h in v.split(",") if h],
                   help="the hosts it runs on, master first (a,b); default: planned from "
                   "the GPUs free now")  # fmt: skip
    s.add_argument("--ds-config", help="a DeepSpeed config file in the project")
    s.add_argument("--fork-server", action="store_true",
                   help="launchers and ranks forked from a warm interpreter per task "
                   "(training.fork_server: a code change's first step comes sooner)")  # fmt: skip
    s.add_argument("--set", type=_set, action="append", default=[], metavar="KEY=JSON",
                   help="another training key (repeatable)")  # fmt: skip
    ls = sub.add_parser("list", help="every job: state, step, loss, GPUs")
    ls.add_argument("--refresh", action="store_true", help="read each run's state now")
    lg = sub.add_parser("logs", help="the job's launcher log, from its master host")
    lg.add_argument("name")
    lg.add_argument("--node", help="the lines of the job's task on this swarm node only")
    lg.add_argument("--rank", type=int, help="the lines of the task running this rank only")
    lg.add_argument("--lines", type=int, default=50)
    lg.add_argument("--follow", "-f", action="store_true")
    gp = sub.add_parser("gpus", help="each host of a cluster: GPUs free, and who holds the rest")
    gp.add_argument("cluster")
    q = sub.add_parser("queue", help="a cluster's waiting jobs: place, state, reason")
    q.add_argument("cluster")
    how = q.add_mutually_exclusive_group()
    how.add_argument("--run", action="store_true",
                     help="one pass now: release the runs that ended (their GPUs freed, "
                     "their verdict kept), admit, start what fits from this checkout")  # fmt: skip
    how.add_argument("--watch", action="store_true",
                     help="the pass of --run every --every seconds until SIGINT or SIGTERM, "
                     "printing only what changed")  # fmt: skip
    every = f"with --watch: seconds between passes (default {queuewatch.EVERY_S:g})"
    q.add_argument("--every", type=_seconds, metavar="SECONDS", help=every)
    q.add_argument("--any-revision", action="store_true",
                   help="with --run or --watch: start a job submitted from another project "
                   "revision with this checkout's program, once its file validates here "
                   "(default: it waits for a checkout at its revision)")  # fmt: skip
    rs = sub.add_parser("resize", help="a running job's node count, through its stack (the run "
                        "resumes at the new world size from its checkpoint)")  # fmt: skip
    rs.add_argument("name")
    rs.add_argument("--nodes", type=int, required=True, help="hosts it runs on from now")
    sub.add_parser("stop", help="stop the run, remove its services").add_argument("name")
    sub.add_parser("remove", help="stop, then drop the stack and its file").add_argument("name")
    return p


def _watch(cluster: str, every: float, any_revision: bool) -> int:
    """`queue CLUSTER --watch`: 0 once a signal ends it between passes; 130 when a second
    one interrupted a pass."""
    try:
        queuewatch.watch(cluster, every, any_revision=any_revision)
    except KeyboardInterrupt:
        print(f"cluster {cluster}: the watch was interrupted during a pass", file=sys.stderr)
        return 130
    return 0


def _aside(line: str) -> None:
    """A line beside a table (the manager it was read through): on stderr, so the table
    on stdout stays as scripts read it."""
    print(line, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The script's own arguments after `--` (argparse's REMAINDER would also take the
    # flags that follow the code dir).
    cut = argv.index("--") if "--" in argv else len(argv)
    p = parser()
    a = p.parse_args(argv[:cut])
    if a.op == "queue" and a.every is not None and not a.watch:
        p.error(f"--every {a.every:g} without --watch; allowed: --watch --every SECONDS")
    if a.op == "queue" and a.any_revision and not (a.run or a.watch):
        p.error("--any-revision without --run or --watch (it is what a pass may start); "
                "allowed: --run --any-revision, --watch --any-revision")  # fmt: skip
    args = argv[cut + 1 :]
    try:
        if a.op == "submit":
            typed = starts_command(args)
            if typed and a.script is not None:
                raise ConfigError([
                    f"--script {a.script} with the command {' '.join(args)!r} after `--`: "
                    "the command names its script; allowed: one of them"
                ])  # fmt: skip
            spec = command.JobSpec(
                name=a.name, cluster=a.cluster, code_dir=a.dir, script=a.script or "train.py",
                args=() if typed else args, command=args if typed else None,
                steps=a.steps, checkpoint_every=a.checkpoint_every, nodes=a.nodes,
                gpus_per_node=a.gpus_per_node, gpu_model=a.gpu_model, ds_config=a.ds_config,
                fork_server=a.fork_server, extra=dict(a.set), hosts=a.hosts,
            )  # fmt: skip
            command.submit(spec)
        elif a.op == "list":
            listed = command.list_jobs(refresh=a.refresh)
            for line in command.list_lines(listed):
                print(line)
            if unread := [r.name for r in listed if r.unread]:
                print(f"job list --refresh: not read now: {', '.join(unread)} (the reasons "
                      "above)", file=sys.stderr)  # fmt: skip
                return 1
        elif a.op == "gpus":
            rows = command.cluster_gpus(a.cluster, _aside)
            print(command.GPU_HEADER)
            for gpu_row in rows:
                print(gpu_row.line())
        elif a.op == "queue":
            if a.watch:
                return _watch(a.cluster, a.every or queuewatch.EVERY_S, a.any_revision)
            if a.run:  # its pass said the manager it went through
                queuerun.run_queue(a.cluster, any_revision=a.any_revision)
            for line in queuerun.queue_table(a.cluster, quiet if a.run else _aside):
                print(line)
        elif a.op == "logs":
            return command.logs(a.name, a.node, a.rank, a.lines, a.follow)
        elif a.op == "resize":
            resize.resize(a.name, a.nodes)
        elif a.op == "stop":
            teardown.stop(a.name)
        else:
            teardown.remove(a.name)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    except auto.CommandError as e:
        print(f"pulumi failed:\n{e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
