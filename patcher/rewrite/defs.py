"""ensure_def: a function in a module, or a method in a class, present exactly as written.

The def's name is the anchor. A def of that name that equals `code` (compared as `ast.dump`,
so layout and comments do not count) means the edit is in place. A DIFFERENT def of that name
is upstream's own version, which the spec's author has not seen: it is reported, and replaced
only when the spec says `replace = true`. An absent def goes at the end of its scope, or next
to the statement binding the name in `after`/`before`: where upstream put it, so a captured
edit gives upstream's tree. That neighbour is a preference, never a condition: the def's name
stays the only anchor, so the edit carries to a release that lacks the neighbour.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from patcher.rewrite import Rewrite, RewriteResult
from patcher.rewrite._scope import (
    Abort,
    definitions,
    find_scope,
    finish,
    format_lines,
    guarded,
    leading_lines,
    line_numbers,
    parse_module,
    parse_statements,
    replace_node,
    scope_label,
    snippet_key,
    statement_key,
)
from patcher.specs.model import EnsureDef


def _binds(stmt: cst.BaseStatement, name: str) -> bool:
    """The statement directly in a scope binds `name`: a def or class of that name, or an
    assignment to it (`name = ...`, `name: T = ...`)."""
    if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
        return stmt.name.value == name
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else []
        if isinstance(small, cst.AnnAssign):
            targets = [small.target]
        if any(isinstance(t, cst.Name) and t.value == name for t in targets):
            return True
    return False


def _place(body: Sequence[cst.BaseStatement], edit: EnsureDef) -> tuple[int, str]:
    """Where in `body` the new def goes, and how the message says it: after the last statement
    binding `after`, before the first binding `before`, else last. A neighbour that is not
    there (another release) leaves the def at the end: where a def stands among a class's
    methods does not change what it does (code of the scope that calls it while the module
    loads would: the import probe of a captured spec fails then)."""
    name = edit.after if edit.after is not None else edit.before
    if name is None:
        return len(body), ""
    hits = [k for k, stmt in enumerate(body) if _binds(stmt, name)]
    if not hits:
        return len(body), f" (at the end: nothing binds {name!r} there)"
    if edit.after is not None:
        return hits[-1] + 1, f" after {name}"
    return hits[0], f" before {name}"


def _inserted(
    node: cst.Module | cst.ClassDef, new: cst.BaseStatement, edit: EnsureDef
) -> tuple[cst.CSTNode, str]:
    """`node` with `new` in its body where `edit` says (`_place`), set off by PEP 8's blank
    lines unless it has some; the words that say where."""
    if isinstance(node, cst.Module):
        body: Sequence[cst.BaseStatement] = node.body
    elif isinstance(node.body, cst.IndentedBlock):
        body = node.body.body
    else:
        raise Abort("anchor_missing", f"class {node.name.value!r} has a one-line body")
    at, where = _place(body, edit)
    blanks = 2 if isinstance(node, cst.Module) else 1
    above = list(leading_lines(new))
    first = at == 0 and bool(body)  # before the scope's first statement: no blank line above
    if not first and (not above or above[0].comment is not None):  # code's comment goes with it
        new = new.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * blanks + above)
    after = list(body[at:])
    if after and (not leading_lines(after[0]) or leading_lines(after[0])[0].comment is not None):
        # what now follows the def is set off from it as the def is from what precedes it
        spaced = [cst.EmptyLine(indent=False)] * blanks + list(leading_lines(after[0]))
        after[0] = after[0].with_changes(leading_lines=spaced)
    stmts = [*body[:at], new, *after]
    if isinstance(node, cst.Module):
        return node.with_changes(body=stmts), where
    assert isinstance(node.body, cst.IndentedBlock)
    return node.with_changes(body=node.body.with_changes(body=stmts)), where


@guarded
def ensure(source: str, edit: EnsureDef) -> RewriteResult:
    """Add the def when its name is free (`_place`); "unchanged" when an equal def is there."""
    module = parse_module(source)
    node = find_scope(module, edit.scope)
    where = scope_label(edit.scope)
    if isinstance(node, cst.FunctionDef):
        raise Abort("anchor_missing", f"scope {edit.scope!r} is a def: name a module or class")
    name = edit.name
    hits = definitions(node, name)
    if len(hits) > 1:
        lines = format_lines(line_numbers(module, hits))
        raise Abort("ambiguous", f"{name!r} is defined {len(hits)} times in {where} ({lines})")
    [new] = parse_statements(edit.code)
    if not hits:
        new_scope, place = _inserted(node, new, edit)
        message = f"added def {name} to {where}{place}"
        return finish(source, replace_node(module, node, new_scope).code, message)
    old = hits[0]
    if not isinstance(old, cst.FunctionDef):
        raise Abort("anchor_missing", f"{where} has a class {name!r} where the def would go")
    if statement_key(old) == snippet_key(edit.code):
        return RewriteResult("unchanged", source, f"def {name} in {where} is already as given")
    if not edit.replace:
        raise Abort(
            "anchor_missing",
            f"a different def {name} exists in {where}; set replace = true to overwrite it",
        )
    if not leading_lines(new):  # the comments and blank lines above the old def stay
        new = new.with_changes(leading_lines=leading_lines(old))
    message = f"replaced def {name} in {where}"
    return finish(source, replace_node(module, old, new).code, message)


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "ensure_def": ensure,
}
