"""Command line: python -m lab up|status|down."""

from __future__ import annotations

import argparse
import json
import sys

from lab import config as c
from lab import engines as en
from lab import gpus as lg
from lab.down import down
from lab.engine_install import install, is_installed
from lab.status import render_text, status
from lab.sysops import LabError
from lab.up import up


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="start the lab hosts (and optionally form the swarm)")
    u.add_argument("--hosts", type=int, default=2)
    u.add_argument(
        "--gpus",
        default="2",
        help="fake GPUs per host: one count for every host, or a comma list, one per host",
    )
    u.add_argument(
        "--gpu-models",
        default=lg.DEFAULT_GPU_MODEL,
        help="their model (nvidia-smi -L, lab status): one for every host, or a comma list",
    )
    u.add_argument("--mtu", type=int, default=c.DEFAULT_MTU, help="bridge and veth MTU")
    u.add_argument("--swarm", action="store_true", help="also swarm init on h1 and join the rest")
    u.add_argument("--managers", type=int, default=1, help="with --swarm: managers h1..hK")
    u.add_argument("--timeout", type=float, default=90, help="seconds to wait for daemons")
    u.add_argument(
        "--engine",
        default=en.default_engine(),
        choices=sorted(en.ENGINES),
        help=f"docker engine of every host (default ${en.ENGINE_ENV}, else {en.DEFAULT_ENGINE})",
    )
    eng = sub.add_parser("engine", help="docker engines: list, install into DSS_CACHE")
    esub = eng.add_subparsers(dest="engine_cmd", required=True)
    esub.add_parser("list", help="known engines, their versions and whether installed")
    ei = esub.add_parser("install", help="fetch, verify and unpack a pinned engine")
    ei.add_argument("name", choices=sorted(en.ENGINES))
    st = sub.add_parser("status", help="hosts, daemons, swarm, GPUs")
    st.add_argument("--json", action="store_true")
    sub.add_parser("down", help="remove everything the lab made (safe to repeat)")
    args = ap.parse_args(argv)
    if args.cmd == "up":
        try:  # refused before anything starts, as argparse refuses
            args.gpus, args.gpu_models = _gpu_flags(args)
        except ValueError as e:
            u.error(str(e))
    root = c.lab_root()
    try:
        if args.cmd == "up":
            up(
                root,
                args.hosts,
                args.gpus,
                args.mtu,
                args.swarm,
                args.managers,
                args.timeout,
                engine=args.engine,
                gpu_models=args.gpu_models,
            )
            return 0
        if args.cmd == "engine":
            return _engine_cmd(args)
        if args.cmd == "status":
            info = status(root)
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                sys.stdout.write(render_text(info))
            return 0 if info["up"] else 3
        problems = down(root)
        for p in problems:
            print(f"lab down: {p}", file=sys.stderr)
        return 1 if problems else 0
    except LabError as e:
        print(f"lab {args.cmd}: {e}", file=sys.stderr)
        if args.cmd == "up":
            print(
                "lab up: what was started is left for inspection; `python -m lab down` removes it",
                file=sys.stderr,
            )
        return 1


def _gpu_flags(args: argparse.Namespace) -> tuple[int | list[int], str | list[str]]:
    """`--gpus` and `--gpu-models`, checked against `--hosts` (ValueError naming them)."""
    counts, models = lg.parse_counts(args.gpus), lg.parse_models(args.gpu_models)
    lg.lab_gpus(args.hosts, counts, models)
    return counts, models


def _engine_cmd(args: argparse.Namespace) -> int:
    if args.engine_cmd == "install":
        install(args.name)
        return 0
    for name in sorted(en.ENGINES):
        e = en.ENGINES[name]
        where = en.engine_dir(e) if e.installable else "system"
        mark = "installed" if is_installed(e) else "not installed"
        print(f"{name}\t{e.version}\t{mark}\t{where}")
    return 0
