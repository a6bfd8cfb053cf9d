"""Render `pulumi preview --json` output as the markdown a reviewer reads.

    pulumi preview --json --stack dev | scripts/preview-comment --stack dev
    scripts/preview-comment --stack prod --drift --run-url URL preview.json

(scripts/preview-comment runs `python -m delivery.comment` in the project's env.)

Per component, what would be created, updated, replaced or deleted, and for each
change whether it restarts the running training job, moves tasks, or leaves
training alone (delivery/preview.py). `--drift` renders the drift issue's body.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from delivery import preview


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
        sys.stdout.write(preview.render(digest, args.stack))
    return 0


if __name__ == "__main__":
    sys.exit(main())
