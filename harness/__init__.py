"""One harness for tests, benchmarks and ops: the lab client (`harness.lab`), the
Pulumi CLI driver (`harness.stack`), stack-config builders (`harness.configs`) and
polling waits (`harness.waits`).

Nothing here runs at import: the modules only name paths and define helpers, so
unit tests import them without a lab, a docker engine or the Pulumi CLI.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The project root (Pulumi.yaml, `__main__.py`, the committed stack files)."""
