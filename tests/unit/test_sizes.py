"""Sizes a person can hold: no product module (infra, jobs, delivery, policy, ops and the
program's `__main__.py`) over 400 lines, and no function or method there over 80 (tests
and goldens aside). Read with `ast`, so nothing is imported to check it; scripts/lint
runs this module. A module that must stay whole is listed in EXCEPTIONS with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.unit.astwalk import child_statements

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("infra", "jobs", "delivery", "policy", "ops")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# Modules allowed over MAX_MODULE_LINES (never a function over its limit), each with why.
# An entry goes once its module fits again (test_exceptions_are_still_needed says so).
EXCEPTIONS: dict[str, str] = {
    "infra/task/forkserver.py": (
        # infra/render/runfiles.py forkserver_program: the launch script carries its text.
        "shipped whole into the task; its bytes are the launch's (training.fork_server); "
        "splitting it changes every such stack's launch script and restarts training"
    ),
}


@dataclass(frozen=True)
class Function:
    """A function or method: where its `def` is, its dotted name in the module, and its
    length in lines (the `def` line to the last line of its body)."""

    line: int
    name: str
    lines: int


def product_files(root: Path = ROOT) -> list[Path]:
    """Every .py file of the product packages, and the program's `__main__.py`."""
    files = [p for pkg in PRODUCT for p in sorted((root / pkg).rglob("*.py"))]
    return [root / "__main__.py", *(p for p in files if "__pycache__" not in p.parts)]


def functions(tree: ast.Module) -> Iterator[Function]:
    """Every function and method, nested ones included, named `Class.method`,
    `outer.inner`, ..."""

    def walk(nodes: list[ast.stmt], prefix: str) -> Iterator[Function]:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                end = node.end_lineno or node.lineno
                yield Function(node.lineno, name, end - node.lineno + 1)
                yield from walk(node.body, f"{name}.")
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")
            else:
                yield from walk(child_statements(node), prefix)

    yield from walk(tree.body, "")


def module_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_modules_fit() -> None:
    """No product module is over MAX_MODULE_LINES, the listed exceptions aside."""
    big = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in product_files()
        if (n := module_lines(path)) > MAX_MODULE_LINES
        and path.relative_to(ROOT).as_posix() not in EXCEPTIONS
    ]
    assert not big, (
        f"modules over {MAX_MODULE_LINES} lines (split each along a seam of what it does; "
        "keep the old import paths a dynamic provider or a state needs):\n" + "\n".join(big)
    )


def test_functions_fit() -> None:
    """No product function or method is over MAX_FUNCTION_LINES (no exceptions)."""
    big = [
        f"{path.relative_to(ROOT)}:{f.line} {f.name}: {f.lines} lines"
        for path in product_files()
        for f in functions(ast.parse(path.read_text(), str(path)))
        if f.lines > MAX_FUNCTION_LINES
    ]
    assert not big, (
        f"functions over {MAX_FUNCTION_LINES} lines (name their steps as functions or "
        "methods of their own):\n" + "\n".join(big)
    )


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_exceptions_are_still_needed(name: str) -> None:
    """Each exception names a product module that is still over the limit, with a reason."""
    path = ROOT / name
    assert path in product_files(), f"{name}: not a product module"
    assert module_lines(path) > MAX_MODULE_LINES, f"{name} fits now: drop it from EXCEPTIONS"
    assert EXCEPTIONS[name].strip(), f"{name}: no reason given"


SAMPLE = """
def short():
    return 1


class K:
    def method(self):
        def inner():
            pass
        return inner

    async def other(self):
        pass


if True:
    def conditional():
        try:
            pass
        except ValueError:
            def handler():
                pass
"""


def test_functions_names_and_measures_each_def() -> None:
    """Functions, methods, nested, async and conditional ones are found, each measured
    from its `def` to its last line (the size check's own check)."""
    found = [(f.name, f.line, f.lines) for f in functions(ast.parse(SAMPLE))]
    assert found == [
        ("short", 2, 2),
        ("K.method", 7, 4),
        ("K.method.inner", 8, 2),
        ("K.other", 12, 2),
        ("conditional", 17, 6),
        ("conditional.handler", 21, 2),
    ]
