"""`python -m infra.config`: print the configuration reference tables.

`--update-docs` rewrites them in docs/configuration.md; `--update-readme`, its name
when the tables lived in README.md, does the same (it no longer touches README.md).
"""

from __future__ import annotations

import sys

from infra.config.reference import config_reference, rules_reference, update_docs


def main(argv: list[str]) -> int:
    if argv in (["--update-docs"], ["--update-readme"]):
        update_docs()
        return 0
    if argv:
        print("usage: python -m infra.config [--update-docs]", file=sys.stderr)
        return 2
    print(config_reference(), rules_reference(), sep="\n", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
