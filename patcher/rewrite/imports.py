"""ensure_import: a module-level import, merged into the file's own imports.

An import is present when the module already binds the same names from the same module
(same relative level), anywhere at module level, `try:`/`except ImportError:` blocks included:
a second copy at the top would defeat such a fallback. `if TYPE_CHECKING:` blocks do not count:
they never run, and the name would be missing at run time. Missing names of a `from x import ...`
join the file's first top-level `from x import` of that module; otherwise the new statement
goes after the import block at the top (after the docstring when there is none), and a
`from __future__` import before every other statement but the docstring.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from patcher.rewrite import Rewrite, RewriteResult, _commas
from patcher.rewrite._scope import (
    Abort,
    body_of,
    dotted_name,
    finish,
    guarded,
    parse_module,
    parse_statements,
    replace_node,
    suites,
)
from patcher.specs.model import EnsureImport

Alias = tuple[str, str | None]  # (imported name, `as` name)


@dataclass(frozen=True)
class Wanted:
    """An import statement as data: `source` is None for `import a, b`."""

    source: tuple[int, str] | None  # (relative level, module) of a from-import
    aliases: tuple[Alias, ...]

    def render(self, aliases: Sequence[Alias]) -> str:
        names = ", ".join(
            name if asname is None else f"{name} as {asname}" for name, asname in aliases
        )
        if self.source is None:
            return f"import {names}"
        level, module = self.source
        return f"from {'.' * level}{module} import {names}"


def _alias(alias: cst.ImportAlias) -> Alias:
    name = dotted_name(alias.name) or ""
    asname = None
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        asname = alias.asname.name.value
    return name, asname


def _source(node: cst.ImportFrom) -> tuple[int, str]:
    module = dotted_name(node.module) if node.module is not None else ""
    return len(node.relative), module or ""


def _read(node: cst.Import | cst.ImportFrom) -> Wanted:
    names = node.names if not isinstance(node.names, cst.ImportStar) else ()
    aliases = tuple(_alias(a) for a in names)
    return Wanted(_source(node) if isinstance(node, cst.ImportFrom) else None, aliases)


def _wanted(code: str) -> Wanted:
    [stmt] = parse_statements(code)
    node = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    if not isinstance(node, cst.Import | cst.ImportFrom):  # pragma: no cover - spec checks it
        raise Abort("invalid", "code is not an import statement")
    return _read(node)


def _runtime_imports(stmts: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseSmallStatement]:
    """Module-level small statements that run on import: `if TYPE_CHECKING:` bodies do not
    (a name imported only there is missing at run time), their `else:` does."""
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield from stmt.body
        elif isinstance(stmt, cst.If) and dotted_name(stmt.test) in _TYPE_CHECKING:
            if stmt.orelse is not None:
                yield from _runtime_imports(
                    [stmt.orelse] if isinstance(stmt.orelse, cst.If) else body_of(stmt.orelse.body)
                )
        elif not isinstance(stmt, cst.FunctionDef | cst.ClassDef):
            for suite in suites(stmt):
                yield from _runtime_imports(body_of(suite))


_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _bound(alias: Alias) -> str:
    """The name an import alias binds (`import a.b` binds `a`)."""
    name, asname = alias
    return asname if asname is not None else name.split(".")[0]


def _is_import(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(small, cst.Import | cst.ImportFrom) for small in stmt.body
    )


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def _is_future(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(small, cst.ImportFrom) and _source(small) == (0, "__future__")
        for small in stmt.body
    )


def _position(body: Sequence[cst.BaseStatement], future: bool) -> int:
    """Index for a new import: after the imports at the top (the docstring, for none)."""
    at = 1 if body and _is_docstring(body[0]) else 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
            break
        if (_is_future(stmt) if future else _is_import(stmt)) and i >= at:
            at = i + 1
    return at


def _inserted(module: cst.Module, code: str, future: bool) -> cst.Module:
    at = _position(module.body, future)
    [new] = parse_statements(code)
    if at > 0 and _is_docstring(module.body[at - 1]):  # docstring, blank line, imports
        new = new.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    return module.with_changes(body=[*module.body[:at], new, *module.body[at:]])


def _merge_target(module: cst.Module, source: tuple[int, str]) -> cst.ImportFrom | None:
    """The first top-level `from <source> import a, b` (not a star import), if any."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if (
                isinstance(small, cst.ImportFrom)
                and not isinstance(small.names, cst.ImportStar)
                and _source(small) == source
            ):
                return small
    return None


def _merged(node: cst.ImportFrom, aliases: Sequence[Alias]) -> cst.ImportFrom:
    names = node.names
    assert not isinstance(names, cst.ImportStar)  # _merge_target skips star imports
    opening = node.lpar.whitespace_after if node.lpar is not None else cst.SimpleWhitespace("")
    items = list(names)
    for name, asname in aliases:
        # Names of a from-import are plain identifiers (the dots are in the module part).
        alias = cst.ImportAlias(
            cst.Name(name), None if asname is None else cst.AsName(cst.Name(asname))
        )
        items = _commas.insert(items, len(items), alias, opening)
    return node.with_changes(names=items)


@guarded
def ensure(source: str, edit: EnsureImport) -> RewriteResult:
    """Add the names the module does not import yet; "unchanged" when it has them all."""
    module = parse_module(source)
    wanted = _wanted(edit.code)
    have: dict[str, tuple[tuple[int, str] | None, Alias]] = {}
    present: set[tuple[tuple[int, str] | None, Alias]] = set()
    for small in _runtime_imports(module.body):
        if isinstance(small, cst.Import | cst.ImportFrom):
            found = _read(small)
            for alias in found.aliases:
                present.add((found.source, alias))
                have.setdefault(_bound(alias), (found.source, alias))
    missing = [a for a in wanted.aliases if (wanted.source, a) not in present]
    shown = wanted.render(wanted.aliases)
    if not missing:
        return RewriteResult("unchanged", source, f"the module already has {shown!r}")
    for alias in missing:
        other = have.get(_bound(alias))
        if other is not None and other[0] is not None and other[0] != wanted.source:
            # `from a import x` next to `from b import x`: one of them silently loses.
            taken = Wanted(other[0], (other[1],)).render([other[1]])
            raise Abort("invalid", f"{_bound(alias)!r} is already imported by {taken!r}")
    added = wanted.render(missing)
    target = _merge_target(module, wanted.source) if wanted.source is not None else None
    if target is not None:
        new_module = replace_node(module, target, _merged(target, missing))
        message = f"added {', '.join(a for a, _ in missing)} to an existing import: {added!r}"
    else:
        new_module = _inserted(module, added, wanted.source == (0, "__future__"))
        message = f"added {added!r}"
    return finish(source, new_module.code, message)


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "ensure_import": ensure,
}
