"""PURE: the tree a capture must reproduce, as one string to compare, where a run of imports is
what it imports.

Why: a spec carries an import as `ensure_import`, which finds its place in another release
whose imports differ (a `replace_statement` of the import line finds nothing there). The op adds
a name at the end of the module's `from x import (...)`, and a new import after the last import
at the top; upstream keeps names in alphabetical order and puts a new line among the others.
Python binds the same names either way. So two modules are the same here when their
statements are, except that each run of consecutive module-level import statements counts as
the sorted list of (module, name, `as` name) it imports: the order inside a run, and how the
run is split into statements, do not count; an import moved past any other statement does. A
run that binds one name twice (the later one wins: the order counts) is compared as written.
"""

from __future__ import annotations

import ast

Imported = tuple[str, str, str]  # (source, name, `as` name or "")


def dump(tree: ast.Module) -> str:
    """`ast.dump(tree)`, with each run of module-level imports as what it imports."""
    parts: list[str] = []
    run: list[ast.Import | ast.ImportFrom] = []
    for stmt in [*tree.body, None]:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            run.append(stmt)
            continue
        if run:
            parts.append(_run(run))
            run = []
        if stmt is not None:
            parts.append(ast.dump(stmt))
    return "\n".join(parts)


def _run(stmts: list[ast.Import | ast.ImportFrom]) -> str:
    names: list[Imported] = []
    for stmt in stmts:
        source = "." * stmt.level + (stmt.module or "") if isinstance(stmt, ast.ImportFrom) else ""
        names += [(source, a.name, a.asname or "") for a in stmt.names]
    bound = [asname or (name if source else name.split(".")[0]) for source, name, asname in names]
    if len(set(bound)) != len(bound) or any(name == "*" for _s, name, _a in names):
        return "\n".join(ast.dump(s) for s in stmts)  # which binding wins depends on the order
    return "imports " + repr(sorted(names))
