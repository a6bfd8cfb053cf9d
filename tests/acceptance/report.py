"""The acceptance results as a table for a person (`scripts/acceptance` prints it).

Each acceptance test records one row: the check, its figure (what was measured)
and the command that produced it. Rows go to `bench/out/acceptance.json` as the
tests run, so a failed or interrupted run still shows what it reached.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "out" / "acceptance.json"


@dataclass(frozen=True)
class Row:
    check: str
    result: str
    """`pass` or `FAIL`."""
    figure: str
    command: str


def load(path: Path = RESULTS) -> list[Row]:
    if not path.exists():
        return []
    return [Row(**r) for r in json.loads(path.read_text())]


def record(row: Row, path: Path = RESULTS) -> None:
    """Append a row (one per check; a re-recorded check replaces its row)."""
    rows = [r for r in load(path) if r.check != row.check] + [row]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in rows], indent=1))


def table(rows: list[Row]) -> str:
    """A Markdown table: check, result, figure, command."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| check | result | figure | command |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {cell(r.check)} | {r.result} | {cell(r.figure)} | `{cell(r.command)}` |" for r in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    rows = load(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS)
    if not rows:
        print(f"no acceptance results in {RESULTS} (run scripts/acceptance)", file=sys.stderr)
        sys.exit(1)
    print(table(rows))
    sys.exit(0 if all(r.result == "pass" for r in rows) else 1)
