"""ensure_def: a function in a module, or a method in a class, present exactly as written.

The def's name is the anchor. A def of that name that equals `code` (compared as `ast.dump`,
so layout and comments do not count) means the edit is in place. A DIFFERENT def of that name
is upstream's own version, which the spec's author has not seen: it is reported, and replaced
only when the spec says `replace = true`.
"""

from __future__ import annotations

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


def _appended(node: cst.Module | cst.ClassDef, new: cst.BaseStatement) -> cst.CSTNode:
    """`node` with `new` last in its body, set off by PEP 8's blank lines unless it has some."""
    blanks = 2 if isinstance(node, cst.Module) else 1
    above = list(leading_lines(new))
    if not above or above[0].comment is not None:  # a comment of `code` goes with the def
        new = new.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * blanks + above)
    if isinstance(node, cst.Module):
        return node.with_changes(body=[*node.body, new])
    body = node.body
    if not isinstance(body, cst.IndentedBlock):
        raise Abort("anchor_missing", f"class {node.name.value!r} has a one-line body")
    return node.with_changes(body=body.with_changes(body=[*body.body, new]))


@guarded
def ensure(source: str, edit: EnsureDef) -> RewriteResult:
    """Append the def when its name is free; "unchanged" when an equal def is there."""
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
        new_scope = _appended(node, new)
        message = f"added def {name} to {where}"
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
