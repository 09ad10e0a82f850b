"""set_value: set an assignment's right-hand side, one entry of a dict literal, or a default.

Values are compared as expressions (`ast.dump`), not as text, so a file that already holds the
value in another spelling (other quotes, extra parentheses) is "unchanged" and never rewritten.
"""

from __future__ import annotations

import libcst as cst

from patcher.rewrite import Rewrite, RewriteResult
from patcher.rewrite._scope import (
    Abort,
    expression_dump,
    find_assignment,
    find_scope,
    finish,
    format_lines,
    guarded,
    line_numbers,
    literal_key,
    parse_expression,
    parse_module,
    render_literal,
    replace_node,
    scope_label,
    string_quote,
    value_key,
)
from patcher.rewrite.elements import append, build, read_layout
from patcher.specs.model import SetValue


def _new_code(edit: SetValue, quote: str) -> str:
    """Source of the value to set: `expr` verbatim, or `value` rendered as a Python literal."""
    if edit.expr is not None:
        return edit.expr.strip()
    return render_literal(edit.value, quote)


def _same(module: cst.Module, old: cst.BaseExpression, new_code: str) -> bool:
    return expression_dump(module.code_for_node(old)) == expression_dump(new_code)


@guarded
def set_value(source: str, edit: SetValue) -> RewriteResult:
    """Dispatch on the edit's form: parameter default, dict entry, or whole right-hand side."""
    result = _set_value(source, edit)
    if edit.expr is not None and result.status == "changed":
        _read_back(result.source, edit)
    return result


def _read_back(source: str, edit: SetValue) -> None:
    """Refuse an `expr` that does not mean the same once in place.

    An `expr` is source text spliced into a dict entry or a parameter list, where a trailing
    comma (`1,` is a tuple alone, `1` in `{"k": 1,}`) or a comment would change what the file
    says without breaking its syntax. So the written file is read back and must hold exactly
    the expression the spec gave."""
    assert edit.expr is not None
    module = parse_module(source)
    found: cst.BaseExpression | None
    if edit.param is not None:
        node = find_scope(module, edit.scope)
        assert isinstance(node, cst.FunctionDef)
        found = _find_param(node, edit.param, edit.scope).default
    else:
        assert edit.target is not None
        found = find_assignment(module, edit.scope, edit.target).value
        if edit.key is not None:
            entries = found.elements if isinstance(found, cst.Dict) else []
            hits = [
                e.value
                for e in entries
                if isinstance(e, cst.DictElement)
                and literal_key(module.code_for_node(e.key)) == value_key(edit.key)
            ]
            found = hits[0] if len(hits) == 1 else None
    code = edit.expr.strip()
    if found is None or expression_dump(module.code_for_node(found)) != expression_dump(code):
        raise Abort(
            "invalid",
            f"expr {code!r} would not read back as the same expression in place "
            "(a trailing comma or a comment?); wrap it in parentheses",
        )


def _set_value(source: str, edit: SetValue) -> RewriteResult:
    module = parse_module(source)
    if edit.param is not None:
        return _set_default(source, module, edit, edit.param)
    assert edit.target is not None  # the SetValue validator demands target or param
    found = find_assignment(module, edit.scope, edit.target)
    if edit.key is not None:
        return _set_entry(source, module, edit, found.value)
    new_code = _new_code(edit, string_quote([found.value]))
    where = f"{edit.target!r} in {scope_label(edit.scope)}"
    if _same(module, found.value, new_code):
        return RewriteResult("unchanged", source, f"{where} is already {new_code}")
    new = parse_expression(new_code, "the new value")
    return finish(source, replace_node(module, found.value, new).code, f"set {where} to {new_code}")


def _set_entry(
    source: str, module: cst.Module, edit: SetValue, value: cst.BaseExpression
) -> RewriteResult:
    """Set `target[key]` inside a dict literal, appending the entry when the key is absent."""
    where = f"{edit.target!r} in {scope_label(edit.scope)}"
    scope = scope_label(edit.scope)
    if not isinstance(value, cst.Dict):
        found = type(value).__name__
        raise Abort("anchor_missing", f"{where} is assigned a {found}, not a dict literal")
    entries = [e for e in value.elements if isinstance(e, cst.DictElement)]
    quote = string_quote([e.key for e in entries])
    key_code = render_literal(edit.key, quote)
    hits = [e for e in entries if literal_key(module.code_for_node(e.key)) == value_key(edit.key)]
    new_code = _new_code(edit, string_quote([e.value for e in entries], quote))
    if len(hits) > 1:
        lines = format_lines(line_numbers(module, hits))
        raise Abort("ambiguous", f"key {key_code} appears {len(hits)} times in {where} ({lines})")
    new_value = parse_expression(new_code, "the new value")
    if not hits:
        new_dict = _with_entry(value, parse_expression(key_code, "key"), new_value)
        message = f"added {key_code}: {new_code} to {where}"
        return finish(source, replace_node(module, value, new_dict).code, message)
    if _same(module, hits[0].value, new_code):
        entry = f"{edit.target}[{key_code}] in {scope}"
        return RewriteResult("unchanged", source, f"{entry} is already {new_code}")
    message = f"set {edit.target}[{key_code}] in {scope} to {new_code}"
    return finish(source, replace_node(module, hits[0].value, new_value).code, message)


def _with_entry(
    node: cst.Dict, key: cst.BaseExpression, value: cst.BaseExpression
) -> cst.BaseExpression:
    """The dict with `key: value` appended, spaced around the colon like its last entry."""
    entry = cst.DictElement(key, value)
    last = node.elements[-1] if node.elements else None
    if isinstance(last, cst.DictElement):
        entry = entry.with_changes(
            whitespace_before_colon=last.whitespace_before_colon,
            whitespace_after_colon=last.whitespace_after_colon,
        )
    return build(append(read_layout(node), [entry]))


def _find_param(node: cst.FunctionDef, name: str, scope: str) -> cst.Param:
    """The named parameter; `*args`/`**kwargs` exist but cannot take a default."""
    params = node.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == name:
            return param
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param) and star.name.value == name:
            raise Abort("anchor_missing", f"{name!r} in {scope!r} is a * parameter: no default")
    raise Abort("anchor_missing", f"def {scope!r} has no parameter {name!r}")


def _set_default(source: str, module: cst.Module, edit: SetValue, name: str) -> RewriteResult:
    """Set a parameter default, adding `= value` (PEP 8 spacing) if it has none."""
    node = find_scope(module, edit.scope)
    if not isinstance(node, cst.FunctionDef):
        raise Abort("anchor_missing", f"scope {edit.scope!r} is a class, not a function")
    param = _find_param(node, name, edit.scope)
    quote = string_quote([param.default] if param.default is not None else [])
    new_code = _new_code(edit, quote)
    where = f"default of {name!r} in {edit.scope!r}"
    if param.default is not None and _same(module, param.default, new_code):
        return RewriteResult("unchanged", source, f"{where} is already {new_code}")
    new_param = param.with_changes(default=parse_expression(new_code, "the new value"))
    if param.default is None:
        spaced = param.annotation is not None
        space = cst.SimpleWhitespace(" " if spaced else "")
        new_param = new_param.with_changes(equal=cst.AssignEqual(space, space))
    message = f"set {where} to {new_code}"
    return finish(source, replace_node(module, param, new_param).code, message)


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "set_value": set_value,
}
