"""ensure_base / remove_base: the positional bases of the class `scope`.

Bases are compared as expressions (`ast.dump`), so `mod.Base` and `mod . Base` are one base.
A new base goes after the positional ones: keyword bases (`metaclass=...`) must stay last.
"""

from __future__ import annotations

import libcst as cst

from patcher.rewrite import Rewrite, RewriteResult, _commas
from patcher.rewrite._scope import (
    Abort,
    expression_dump,
    find_scope,
    finish,
    guarded,
    parse_expression,
    parse_module,
    replace_node,
)
from patcher.specs.model import EnsureBase, RemoveBase


def _class(module: cst.Module, scope: str) -> cst.ClassDef:
    node = find_scope(module, scope)
    if not isinstance(node, cst.ClassDef):
        raise Abort("anchor_missing", f"scope {scope!r} is a def, not a class")
    return node


def _index(module: cst.Module, node: cst.ClassDef, value: str) -> int | None:
    """Position of the positional base equal to `value`, if the class has it."""
    wanted = expression_dump(value)
    for i, arg in enumerate(node.bases):
        if not arg.star and expression_dump(module.code_for_node(arg.value)) == wanted:
            return i
    return None


def _opening(node: cst.ClassDef) -> cst.BaseParenthesizableWhitespace:
    if isinstance(node.lpar, cst.LeftParen):
        return node.lpar.whitespace_after
    return cst.SimpleWhitespace("")


def _with_args(node: cst.ClassDef, args: list[cst.Arg], count: int) -> cst.ClassDef:
    """The class with `args` split back into `count` bases and the keywords after them."""
    if not args:  # `class A():` reads as a leftover; `class A:` is what one would write
        return node.with_changes(
            bases=(), keywords=(), lpar=cst.MaybeSentinel.DEFAULT, rpar=cst.MaybeSentinel.DEFAULT
        )
    lpar = node.lpar if isinstance(node.lpar, cst.LeftParen) else cst.LeftParen()
    rpar = node.rpar if isinstance(node.rpar, cst.RightParen) else cst.RightParen()
    return node.with_changes(bases=args[:count], keywords=args[count:], lpar=lpar, rpar=rpar)


@guarded
def ensure(source: str, edit: EnsureBase) -> RewriteResult:
    """Append the base after the positional bases; "unchanged" when the class has it."""
    module = parse_module(source)
    node = _class(module, edit.scope)
    value = edit.value.strip()
    if _index(module, node, value) is not None:
        return RewriteResult("unchanged", source, f"class {edit.scope!r} already has base {value}")
    new = cst.Arg(parse_expression(value, "value"))
    # `class A(*bases, B)` is legal; a base after `*bases` still goes after every positional.
    args = _commas.insert([*node.bases, *node.keywords], len(node.bases), new, _opening(node))
    new_class = _with_args(node, args, len(node.bases) + 1)
    message = f"added base {value} to class {edit.scope!r}"
    return finish(source, replace_node(module, node, new_class).code, message)


@guarded
def remove(source: str, edit: RemoveBase) -> RewriteResult:
    """Drop the base; "unchanged" when the class does not have it."""
    module = parse_module(source)
    node = _class(module, edit.scope)
    value = edit.value.strip()
    at = _index(module, node, value)
    if at is None:
        return RewriteResult(
            "unchanged", source, f"class {edit.scope!r} already lacks base {value}"
        )
    args = _commas.remove([*node.bases, *node.keywords], at)
    new_class = _with_args(node, args, len(node.bases) - 1)
    message = f"removed base {value} from class {edit.scope!r}"
    return finish(source, replace_node(module, node, new_class).code, message)


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "ensure_base": ensure,
    "remove_base": remove,
}
