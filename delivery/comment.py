"""Render `pulumi preview --json` output as the markdown a reviewer reads.

    pulumi preview --json --stack dev | scripts/preview-comment --stack dev
    scripts/preview-comment --stack prod --drift --run-url URL preview.json

(scripts/preview-comment runs `python -m delivery.comment` in the project's env.)

Per component, what would be created, updated, replaced or deleted, and for each
change whether it restarts the running training job, moves tasks, or leaves
training alone (delivery/preview.py). For a cluster stack, the jobs on it (their
stack files, docs/jobs.md) that the change restarts. `--drift` renders the drift issue's body.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from delivery import preview
from infra.config import job_names

# The project root, where the stack files are.
ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("file", nargs="?", help="the preview's JSON (default: stdin)")
    ap.add_argument("--stack", required=True)
    ap.add_argument("--drift", action="store_true", help="render the drift issue body")
    ap.add_argument("--run-url", default="", help="link to the CI run (with --drift)")
    args = ap.parse_args()
    text = Path(args.file).read_text() if args.file else sys.stdin.read()
    digest = json.loads(text) if text.strip() else {}
    if args.drift:
        sys.stdout.write(preview.render_drift(digest, args.stack, args.run_url))
    else:
        sys.stdout.write(
            preview.render(
                digest, args.stack, stack_transport(args.stack), job_names(ROOT, cluster=args.stack)
            )
        )
    return 0


def stack_transport(stack: str) -> str:
    """The data plane `Pulumi.<stack>.yaml` gives the ranks, or "" where the file is
    not there or not valid (the preview itself then says why)."""
    from infra.config import ConfigError, parse_stack_config, stack_file_values
    from infra.render.labels import transport_summary

    path = ROOT / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return ""
    values = stack_file_values(path.read_text())
    # Encrypted values: the config package reads them through the engine, not here.
    values.pop("secrets", None)
    try:
        return transport_summary(parse_stack_config(values))
    except ConfigError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
