"""set_argument: one keyword argument of the one call to `call` in scope.

The callee is matched by its dotted name as written (`functools.lru_cache` and `lru_cache` are
different anchors: which one a file uses depends on its imports). The whole scope is searched,
its decorators and nested code included, because the calls worth patching are typically
`@lru_cache(maxsize=...)` on a def or `x: int = Field(default=...)` in a class body. A bare
decorator `@lru_cache` counts as a call without arguments and becomes one.
"""

from __future__ import annotations

import libcst as cst

from patcher.rewrite import Rewrite, RewriteResult, _commas
from patcher.rewrite._scope import (
    Abort,
    dotted_name,
    expression_dump,
    find_scope,
    finish,
    format_lines,
    guarded,
    line_numbers,
    parse_expression,
    parse_module,
    render_literal,
    replace_node,
    scope_label,
    string_quote,
)
from patcher.specs.model import SetArgument

Site = cst.Call | cst.Decorator  # a Decorator only for a bare `@name` without parentheses


class _Calls(cst.CSTVisitor):
    def __init__(self, call: str) -> None:
        self.call = call
        self.found: list[Site] = []

    def visit_Call(self, node: cst.Call) -> None:
        if dotted_name(node.func) == self.call:
            self.found.append(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        if dotted_name(node.decorator) == self.call:
            self.found.append(node)


def _site(module: cst.Module, edit: SetArgument) -> Site:
    """The single call to `edit.call` in the scope."""
    visitor = _Calls(edit.call)
    find_scope(module, edit.scope).visit(visitor)
    hits = visitor.found
    where = scope_label(edit.scope)
    if not hits:
        raise Abort("anchor_missing", f"no call to {edit.call} in {where}")
    if len(hits) > 1:
        lines = format_lines(line_numbers(module, hits))
        raise Abort("ambiguous", f"{edit.call} is called {len(hits)} times in {where} ({lines})")
    return hits[0]


def _keyword(site: Site, arg: str) -> cst.Arg | None:
    if isinstance(site, cst.Decorator):
        return None
    for candidate in site.args:
        if candidate.keyword is not None and candidate.keyword.value == arg:
            return candidate
    return None


def _new_code(edit: SetArgument, site: Site) -> str:
    if edit.expr is not None:
        return edit.expr.strip()
    values = [a.value for a in site.args] if isinstance(site, cst.Call) else []
    return render_literal(edit.value, string_quote(values))


def _with_keyword(site: Site, arg: str, value: cst.BaseExpression) -> cst.CSTNode:
    """The call with `arg=value` appended (a bare decorator grows parentheses for it)."""
    new = cst.Arg(value, keyword=cst.Name(arg), equal=cst.AssignEqual(_NO_SPACE, _NO_SPACE))
    if isinstance(site, cst.Decorator):
        return site.with_changes(decorator=cst.Call(site.decorator, [new]))
    args = _commas.insert(site.args, len(site.args), new, site.whitespace_before_args)
    return site.with_changes(args=args)


_NO_SPACE = cst.SimpleWhitespace("")


@guarded
def set_argument(source: str, edit: SetArgument) -> RewriteResult:
    """Set `arg=` of the call; "unchanged" when it already has that value (as an expression)."""
    module = parse_module(source)
    site = _site(module, edit)
    new_code = _new_code(edit, site)
    where = f"{edit.call}(...) in {scope_label(edit.scope)}"
    old = _keyword(site, edit.arg)
    if old is not None and expression_dump(module.code_for_node(old.value)) == expression_dump(
        new_code
    ):
        return RewriteResult("unchanged", source, f"{edit.arg}= of {where} is already {new_code}")
    value = parse_expression(new_code, "the new value")
    if old is not None:
        new_module = replace_node(module, old, old.with_changes(value=value))
        message = f"set {edit.arg}={new_code} in {where}"
    else:
        new_module = replace_node(module, site, _with_keyword(site, edit.arg, value))
        message = f"added {edit.arg}={new_code} to {where}"
    result = finish(source, new_module.code, message)
    _read_back(result.source, edit, new_code)
    return result


def _read_back(source: str, edit: SetArgument, code: str) -> None:
    """Refuse an `expr` that reads differently in place (`1, 2` would become two arguments)."""
    module = parse_module(source)
    found = _keyword(_site(module, edit), edit.arg)
    if found is None or expression_dump(module.code_for_node(found.value)) != expression_dump(code):
        raise Abort(
            "invalid",
            f"{code!r} would not read back as the same expression in the call; "
            "wrap it in parentheses",
        )


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "set_argument": set_argument,
}
