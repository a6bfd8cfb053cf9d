"""What the lint-step checks (tests/unit/test_imports.py, test_sizes.py) share: the
statements nested in a statement."""

from __future__ import annotations

import ast


def child_statements(node: ast.AST) -> list[ast.stmt]:
    """The statements directly inside `node`'s blocks (body, else, finally, except
    handlers, match cases), in order; not those of nested functions' bodies, which
    the callers walk themselves."""
    stmts: list[ast.stmt] = []
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, None) or []:
            if isinstance(child, ast.stmt):
                stmts.append(child)
            # except handlers and match cases hold statements of their own
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                stmts += child.body
    return stmts
