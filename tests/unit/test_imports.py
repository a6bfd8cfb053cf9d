"""The import contract: product code (infra, jobs, delivery, policy, ops and the program's
`__main__.py`) never imports the test rig (harness, lab, bench, tests), and the `infra`
modules import each other without a circle at module level. Read with `ast`, so nothing
is imported to check it; scripts/lint runs this module."""

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
RIG = ("harness", "lab", "bench", "tests")


@dataclass(frozen=True)
class Import:
    """One import statement's target, as a dotted name (`from a import b`: `a.b` when
    `a/b` is a module, else `a`), and whether it runs when the module is imported."""

    module: str
    line: int
    top_level: bool


def module_name(path: Path, root: Path = ROOT) -> str:
    """`infra/config/__init__.py` -> `infra.config`, `infra/layout.py` -> `infra.layout`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path = ROOT) -> bool:
    """A module or package of this checkout by that dotted name."""
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def product_files() -> list[Path]:
    """Every .py file of the product packages, and the program's `__main__.py`."""
    files = [p for pkg in PRODUCT for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [ROOT / "__main__.py", *(p for p in files if "__pycache__" not in p.parts)]


def _type_checking(node: ast.If) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(nodes: list[ast.stmt], top: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement, nested ones included, with whether it runs at import: not inside a
    function, and not under `if TYPE_CHECKING:`."""
    for node in nodes:
        yield node, top
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _walk(node.body, False)
        elif isinstance(node, ast.If) and _type_checking(node):
            yield from _walk(node.body, False)
            yield from _walk(node.orelse, top)
        else:
            yield from _walk(child_statements(node), top)


def imports(path: Path, root: Path = ROOT) -> list[Import]:
    """What a file imports, relative imports resolved against its package; a module named
    by a constant to `importlib.import_module` or `__import__` counts too (not at the top)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node, top in _walk(tree.body, True):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno, top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(Import(sub if is_module(sub, root) else base, node.lineno, top))
    for call in ast.walk(tree):
        if (
            isinstance(call, ast.Call)
            and _callee(call.func) in ("import_module", "__import__")
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            found.append(Import(call.args[0].value, call.lineno, False))
    return found


def _callee(func: ast.expr) -> str:
    """The called name: `f` of `f(...)` and of `mod.f(...)`."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


@pytest.mark.parametrize("path", product_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_product_code_never_imports_the_rig(path: Path) -> None:
    """No import of harness, lab, bench or tests, at the top or inside a function."""
    bad = [
        f"{path.relative_to(ROOT)}:{i.line} imports {i.module}"
        for i in imports(path)
        if i.module.split(".")[0] in RIG
    ]
    assert not bad, (
        "product code imports the test rig (move what it needs into the product; the "
        "rig may import the product, never the reverse):\n" + "\n".join(bad)
    )


def loads(importer: str, target: str) -> set[str]:
    """The modules an import of `target` runs: the target, and each package above it that
    is not one of the importer's own (those are already being imported when it runs;
    `infra.config.models.cluster` from `infra.config.rules.training` runs
    `infra.config.models`' `__init__` first)."""
    parts = target.split(".")
    packages = {".".join(parts[:n]) for n in range(2, len(parts))}
    own = {".".join(importer.split(".")[:n]) for n in range(1, importer.count(".") + 2)}
    return {target} | (packages - own)


def infra_graph() -> dict[str, set[str]]:
    """infra module -> the infra modules importing it runs at module level."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "infra").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = module_name(path)
        graph[name] = {
            loaded
            for i in imports(path)
            if i.top_level and i.module.split(".")[0] == "infra" and is_module(i.module)
            for loaded in loads(name, i.module)
        } - {name}
    return graph


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same, between infra's parts (`infra.config`, `infra.render`, `infra.layout`,
    ...): each part a layer that the ones below it never import."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    layers: dict[str, set[str]] = {}
    for module, targets in graph.items():
        layers.setdefault(part(module), set()).update(part(t) for t in targets)
    return {layer: targets - {layer} for layer, targets in layers.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected part of the graph (Tarjan), each as the path
    `a, b, ..., a`, smallest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in graph.get(v, ()):
                parts.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted((_circle(graph, part) for part in parts), key=len)


def _circle(graph: dict[str, set[str]], part: list[str]) -> list[str]:
    """A shortest circle through the part's first module, staying inside the part."""
    start, members = part[0], set(part)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, set()) & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return [*part, start]


def test_cycles_finds_a_circle() -> None:
    """The circle finder names each circle as a path (the contract's own check)."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}
    assert cycles(graph) == [["d", "d"], ["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


SAMPLE = """
from __future__ import annotations
import importlib
from typing import TYPE_CHECKING
from . import b
from .b import thing
from ..other import x
if TYPE_CHECKING:
    from pkg import c
try:
    import lab
except ImportError:
    import bench.tools
class K:
    import json
    def m(self) -> None:
        import harness.lab
def f() -> None:
    importlib.import_module("tests.unit")
"""


def test_imports_finds_every_import_and_when_it_runs(tmp_path: Path) -> None:
    """Relative imports resolve against the package, `from a import b` names module `a.b`
    when there is one, and imports under TYPE_CHECKING, in functions and by
    import_module do not run at the top; those in try, except and class bodies do."""
    (tmp_path / "top" / "pkg").mkdir(parents=True)
    for name in ("top/__init__.py", "top/pkg/__init__.py", "top/pkg/b.py", "top/pkg/c.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "top" / "pkg" / "a.py").write_text(SAMPLE)
    found = [(i.module, i.top_level) for i in imports(tmp_path / "top/pkg/a.py", tmp_path)]
    assert found == [
        ("__future__", True),
        ("importlib", True),
        ("typing", True),
        ("top.pkg.b", True),
        ("top.pkg.b", True),
        ("top.other", True),
        ("pkg", False),
        ("lab", True),
        ("bench.tools", True),
        ("json", True),
        ("harness.lab", False),
        ("tests.unit", False),
    ]


def test_loads_runs_the_packages_above_the_target() -> None:
    """An import runs the target and the packages above it that are not the importer's."""
    assert loads("infra.config.rules.training", "infra.config.models.cluster") == {
        "infra.config.models",
        "infra.config.models.cluster",
    }
    assert loads("infra.render.labels", "infra.config") == {"infra.config"}


def test_no_import_circles_in_infra() -> None:
    """infra's modules import each other without a circle at module level (imports under
    `if TYPE_CHECKING:` and inside functions aside)."""
    found = cycles(infra_graph())
    assert not found, (
        "import circles among infra modules (move the shared piece to a lower module that "
        "both import):\n" + "\n".join(" -> ".join(c) for c in found)
    )


def test_no_import_circles_between_infra_parts() -> None:
    """infra's parts (config, render, providers, components, task, layout) are layers: no
    two of them import each other, through any of their modules."""
    found = cycles(layer_graph(infra_graph()))
    assert not found, (
        "import circles between infra's parts (move the shared piece to the lower part):\n"
        + "\n".join(" -> ".join(c) for c in found)
    )
