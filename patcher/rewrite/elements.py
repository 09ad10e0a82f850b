"""ensure_elements / remove_elements: add or drop values in a list, tuple or set literal.

The edit must read like a human made it, because patched files get diffed and reviewed: new
elements follow the literal's own layout (one per line, or inline), its quote style and its
trailing-comma habit, and removing what was added gives back the original text. To get there a
literal is flattened into a `Layout` (the whitespace after each element, commas as a style flag)
and rebuilt from it, so appending and removing are plain list operations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from pydantic import JsonValue

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
from patcher.specs.model import EnsureElements, RemoveElements

Collection = cst.List | cst.Tuple | cst.Set | cst.Dict
Item = cst.BaseElement | cst.BaseDictElement
Whitespace = cst.BaseParenthesizableWhitespace

_NONE = cst.SimpleWhitespace("")
_SPACE = cst.SimpleWhitespace(" ")


@dataclass(frozen=True)
class Entry:
    """One element, stripped of its comma; `after` runs up to the next element or bracket."""

    item: Item
    comma_ws: Whitespace
    after: Whitespace


@dataclass(frozen=True)
class Layout:
    """A collection literal as data: what surrounds and separates its elements."""

    node: Collection | cst.Call  # a Call only for `set()`, the empty set
    opening: Whitespace
    entries: tuple[Entry, ...]
    trailing_comma: bool


# --- reading and writing layouts -------------------------------------------------------------


def _is_empty(ws: Whitespace) -> bool:
    return isinstance(ws, cst.SimpleWhitespace) and not ws.value


def _multiline(ws: Whitespace) -> bool:
    return isinstance(ws, cst.ParenthesizedWhitespace)


def _brackets(node: Collection) -> tuple[Whitespace, Whitespace]:
    """Whitespace just inside the opening and closing bracket (none for a bare tuple)."""
    if isinstance(node, cst.List):
        return node.lbracket.whitespace_after, node.rbracket.whitespace_before
    if isinstance(node, cst.Set | cst.Dict):
        return node.lbrace.whitespace_after, node.rbrace.whitespace_before
    if node.lpar:
        return node.lpar[-1].whitespace_after, node.rpar[0].whitespace_before
    return _NONE, _NONE


def _joined(after: Whitespace, closing: Whitespace) -> Whitespace:
    """libcst splits the space before a bracket between the last comma and the bracket."""
    if _is_empty(after):
        return closing
    if _is_empty(closing):
        return after
    if isinstance(after, cst.SimpleWhitespace) and isinstance(closing, cst.SimpleWhitespace):
        return cst.SimpleWhitespace(after.value + closing.value)
    return closing  # pragma: no cover - the grammar gives one of them all the whitespace


def read_layout(node: Collection | cst.Call) -> Layout:
    """Flatten a literal (or `set()`) into a Layout."""
    if isinstance(node, cst.Call):
        return Layout(node, _NONE, (), False)
    opening, closing = _brackets(node)
    entries: list[Entry] = []
    for item in node.elements:
        comma = item.comma
        bare = item.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        if isinstance(comma, cst.Comma):
            entries.append(Entry(bare, comma.whitespace_before, comma.whitespace_after))
        else:
            entries.append(Entry(bare, _NONE, _NONE))
    if not entries:
        return Layout(node, opening, (), False)
    last = entries[-1]
    entries[-1] = dataclasses.replace(last, after=_joined(last.after, closing))
    has_comma = isinstance(node.elements[-1].comma, cst.Comma)
    one_tuple = isinstance(node, cst.Tuple) and len(entries) == 1
    # The comma of a one-line 1-tuple is syntax, not style; elsewhere it is the author's habit.
    trailing = has_comma and not (one_tuple and not _multiline(entries[-1].after))
    return Layout(node, opening, tuple(entries), trailing)


def _has_comment(ws: Whitespace) -> bool:
    if not isinstance(ws, cst.ParenthesizedWhitespace):
        return False
    lines = [ws.first_line.comment, *(line.comment for line in ws.empty_lines)]
    return any(comment is not None for comment in lines)


def _empty(layout: Layout) -> cst.BaseExpression:
    """`[]`, `()`, `{}` or `set()`, keeping parentheses and any comment left inside."""
    node = layout.node
    inner = layout.opening if _has_comment(layout.opening) else _NONE
    if isinstance(node, cst.Call):
        return node
    if isinstance(node, cst.Set):
        return cst.Call(func=cst.Name("set"), lpar=node.lpar, rpar=node.rpar)
    if isinstance(node, cst.List):
        return cst.List(
            [], cst.LeftSquareBracket(inner), cst.RightSquareBracket(_NONE), node.lpar, node.rpar
        )
    if isinstance(node, cst.Dict):
        return cst.Dict(
            [], cst.LeftCurlyBrace(inner), cst.RightCurlyBrace(_NONE), node.lpar, node.rpar
        )
    lpar = list(node.lpar) or [cst.LeftParen()]
    rpar = list(node.rpar) or [cst.RightParen()]
    lpar[-1] = lpar[-1].with_changes(whitespace_after=inner)
    rpar[0] = rpar[0].with_changes(whitespace_before=_NONE)
    return node.with_changes(elements=[], lpar=lpar, rpar=rpar)


def _items(layout: Layout) -> tuple[list[Item], Whitespace]:
    """Elements with their commas restored, and the whitespace that goes before the bracket."""
    entries = layout.entries
    one_tuple = isinstance(layout.node, cst.Tuple) and len(entries) == 1
    items: list[Item] = []
    for entry in entries[:-1]:
        items.append(entry.item.with_changes(comma=cst.Comma(entry.comma_ws, entry.after)))
    last = entries[-1]
    if layout.trailing_comma or one_tuple:
        items.append(last.item.with_changes(comma=cst.Comma(last.comma_ws, _NONE)))
    else:
        items.append(last.item)
    return items, last.after


def build(layout: Layout) -> cst.BaseExpression:
    """Turn a Layout back into a literal node of the original kind."""
    if not layout.entries:
        return _empty(layout)
    items, closing = _items(layout)
    node = layout.node
    if isinstance(node, cst.Call):  # set() grows into a set display
        return cst.Set(_elements(items), lpar=node.lpar, rpar=node.rpar)
    if isinstance(node, cst.List):
        return node.with_changes(
            elements=_elements(items),
            lbracket=node.lbracket.with_changes(whitespace_after=layout.opening),
            rbracket=node.rbracket.with_changes(whitespace_before=closing),
        )
    if isinstance(node, cst.Set):
        return node.with_changes(
            elements=_elements(items),
            lbrace=node.lbrace.with_changes(whitespace_after=layout.opening),
            rbrace=node.rbrace.with_changes(whitespace_before=closing),
        )
    if isinstance(node, cst.Dict):
        return node.with_changes(
            elements=_dict_elements(items),
            lbrace=node.lbrace.with_changes(whitespace_after=layout.opening),
            rbrace=node.rbrace.with_changes(whitespace_before=closing),
        )
    return _build_tuple(node, _elements(items), layout.opening, closing)


def _build_tuple(
    node: cst.Tuple, items: list[cst.BaseElement], opening: Whitespace, closing: Whitespace
) -> cst.Tuple:
    if not node.lpar:  # a bare tuple: nowhere to put inner whitespace, and none was read
        return node.with_changes(elements=items)
    lpar, rpar = list(node.lpar), list(node.rpar)
    lpar[-1] = lpar[-1].with_changes(whitespace_after=opening)
    rpar[0] = rpar[0].with_changes(whitespace_before=closing)
    return node.with_changes(elements=items, lpar=lpar, rpar=rpar)


def _elements(items: Sequence[Item]) -> list[cst.BaseElement]:
    return [item for item in items if isinstance(item, cst.BaseElement)]


def _dict_elements(items: Sequence[Item]) -> list[cst.BaseDictElement]:
    return [item for item in items if isinstance(item, cst.BaseDictElement)]


# --- layout operations -----------------------------------------------------------------------


def _line_break(indent: bool, last_line: cst.SimpleWhitespace) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(cst.TrailingWhitespace(), (), indent, last_line)


def append(layout: Layout, items: Sequence[Item]) -> Layout:
    """Add items at the end in the literal's style: one per line if it is laid out that way.

    Anything between the last element and the bracket (its trailing comment, commented-out
    entries) stays before the new elements, so they land right above the closing bracket.
    """
    entries = list(layout.entries)
    closing = entries[-1].after if entries else _NONE
    separator = _before_last(layout)
    if isinstance(closing, cst.ParenthesizedWhitespace) and isinstance(
        separator, cst.ParenthesizedWhitespace
    ):
        between: Whitespace = _line_break(separator.indent, separator.last_line)
        entries[-1] = dataclasses.replace(
            entries[-1],
            after=closing.with_changes(indent=separator.indent, last_line=separator.last_line),
        )
        end: Whitespace = _line_break(closing.indent, closing.last_line)
    else:
        between = _SPACE
        if entries:
            entries[-1] = dataclasses.replace(entries[-1], after=_SPACE)
        end = closing
    for i, item in enumerate(items):
        after = end if i == len(items) - 1 else between
        entries.append(Entry(item, _NONE, after))
    return dataclasses.replace(layout, entries=tuple(entries))


def _before_last(layout: Layout) -> Whitespace:
    """Whitespace in front of the last element (its line break, in a one-per-line literal)."""
    entries = layout.entries
    return entries[-2].after if len(entries) > 1 else layout.opening


def _merge(kept: Whitespace, removed: Whitespace, first: bool) -> Whitespace:
    """Whitespace left when the element between `kept` and `removed` goes.

    On multi-line literals the kept line end (with its comment) and any full-line comments of
    both survive, and the next line's indentation is taken; the removed element's own trailing
    comment goes with it. Inline, the space of the side away from the brackets wins.
    """
    if isinstance(kept, cst.ParenthesizedWhitespace) and isinstance(
        removed, cst.ParenthesizedWhitespace
    ):
        return cst.ParenthesizedWhitespace(
            kept.first_line,
            (*kept.empty_lines, *removed.empty_lines),
            removed.indent,
            removed.last_line,
        )
    return kept if first else removed


def drop(layout: Layout, indexes: set[int]) -> Layout:
    """Remove the entries at `indexes`, stitching the whitespace around each gap."""
    opening = layout.opening
    kept: list[Entry] = []
    for i, entry in enumerate(layout.entries):
        if i not in indexes:
            kept.append(entry)
        elif kept:
            kept[-1] = dataclasses.replace(
                kept[-1], after=_merge(kept[-1].after, entry.after, False)
            )
        else:
            opening = _merge(opening, entry.after, True)
    return dataclasses.replace(layout, opening=opening, entries=tuple(kept))


# --- the ops ---------------------------------------------------------------------------------


_WRAPPERS = frozenset({"frozenset", "set", "tuple", "list"})
_HASHED = frozenset({"frozenset", "set"})


@dataclass(frozen=True)
class Found:
    """The literal an element edit changes, how messages name it, and whether it is a set."""

    node: Collection | cst.Call  # a Call only for `set()`, the empty set
    label: str
    hashed: bool


def _wrapped(value: cst.BaseExpression) -> tuple[str, cst.List | cst.Tuple | cst.Set] | None:
    """(callee, literal) for `frozenset({...})` and friends: a builtin call of one literal."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
        return None
    if value.func.value not in _WRAPPERS or len(value.args) != 1:
        return None
    arg = value.args[0]
    if (
        arg.keyword is not None
        or arg.star
        or not isinstance(arg.value, cst.List | cst.Tuple | cst.Set)
    ):
        return None
    return value.func.value, arg.value


def _assigned_collection(module: cst.Module, scope: str, target: str) -> Found:
    """The literal assigned to `target`, directly or through `frozenset(...)` and friends;
    `set()` counts as the empty set literal."""
    value = find_assignment(module, scope, target).value
    label = f"{target!r} in {scope_label(scope)}"
    if isinstance(value, cst.List | cst.Tuple | cst.Set):
        return Found(value, label, isinstance(value, cst.Set))
    wrapped = _wrapped(value)
    if wrapped is not None:
        return Found(wrapped[1], label, wrapped[0] in _HASHED or isinstance(wrapped[1], cst.Set))
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Name)
        and value.func.value == "set"
        and not value.args
    ):
        return Found(value, label, True)
    found = type(value).__name__
    code = module.code_for_node(value).strip().splitlines()[0]
    raise Abort(
        "anchor_missing",
        f"{label} is assigned a {found} ({code!r}), not a list, tuple or set literal "
        "(or a frozenset/set/tuple/list call of one)",
    )


class _Literals(cst.CSTVisitor):
    """Every list/tuple/set literal under a node, and which ones a set/frozenset call wraps."""

    def __init__(self) -> None:
        self.found: list[cst.List | cst.Tuple | cst.Set] = []
        self.hashed: set[int] = set()

    def visit_List(self, node: cst.List) -> None:
        self.found.append(node)

    def visit_Tuple(self, node: cst.Tuple) -> None:
        self.found.append(node)

    def visit_Set(self, node: cst.Set) -> None:
        self.found.append(node)

    def visit_Call(self, node: cst.Call) -> None:
        wrapped = _wrapped(node)
        if wrapped is not None and wrapped[0] in _HASHED:
            self.hashed.add(id(wrapped[1]))


def _holding(module: cst.Module, scope: str, containing: Sequence[JsonValue]) -> Found:
    """The one literal anywhere in `scope` that holds every value of `containing`."""
    node = find_scope(module, scope)
    visitor = _Literals()
    node.visit(visitor)
    wanted = [(v, render_literal(v)) for v in containing]
    hits = []
    for literal in visitor.found:
        codes = _element_codes(module, read_layout(literal))
        if all(any(_matches(c, v, r) for c in codes) for v, r in wanted):
            hits.append(literal)
    shown = _shown([r for _, r in wanted])
    label = f"the literal holding {shown} in {scope_label(scope)}"
    if not hits:
        raise Abort(
            "anchor_missing", f"no list, tuple or set literal holds {shown} in {scope_label(scope)}"
        )
    if len(hits) > 1:
        lines = format_lines(line_numbers(module, hits))
        raise Abort(
            "ambiguous",
            f"{len(hits)} literals hold {shown} in {scope_label(scope)} ({lines}); "
            "list more of their values in containing",
        )
    hit = hits[0]
    return Found(hit, label, isinstance(hit, cst.Set) or id(hit) in visitor.hashed)


def _collection(module: cst.Module, edit: EnsureElements | RemoveElements) -> Found:
    if edit.containing is not None:
        return _holding(module, edit.scope, edit.containing)
    assert edit.target is not None  # the spec demands target or containing
    return _assigned_collection(module, edit.scope, edit.target)


def _element_codes(module: cst.Module, layout: Layout) -> list[str | None]:
    """Source of each element value (None for `*spread`, which never equals a value)."""
    return [
        module.code_for_node(e.item.value) if isinstance(e.item, cst.Element) else None
        for e in layout.entries
    ]


def _matches(code: str | None, value: JsonValue, rendered: str) -> bool:
    """Equal by value; by expression shape as a fallback for `float("nan")` and friends."""
    if code is None:
        return False
    key = literal_key(code)
    if key is not None:
        return key == value_key(value)
    return expression_dump(code) == expression_dump(rendered)


def _unique(values: Sequence[JsonValue]) -> list[JsonValue]:
    seen: list[object] = []
    out: list[JsonValue] = []
    for value in values:
        if value_key(value) not in seen:
            seen.append(value_key(value))
            out.append(value)
    return out


def _shown(values: Sequence[str]) -> str:
    return ", ".join(values)


@guarded
def ensure(source: str, edit: EnsureElements) -> RewriteResult:
    """Append the values the literal lacks; "unchanged" when all are present."""
    module = parse_module(source)
    found = _collection(module, edit)
    node = found.node
    layout = read_layout(node)
    codes = _element_codes(module, layout)
    quote = string_quote([e.item.value for e in layout.entries if isinstance(e.item, cst.Element)])
    rendered = [(v, render_literal(v, quote)) for v in _unique(edit.values)]
    missing = [(v, r) for v, r in rendered if not any(_matches(c, v, r) for c in codes)]
    if not missing:
        shown = _shown([r for _, r in rendered])
        return RewriteResult("unchanged", source, f"{found.label} already contains {shown}")
    if found.hashed and any(isinstance(v, list | dict) for v, _ in missing):
        raise Abort("invalid", f"cannot put a list or table into the set {found.label}")
    items = [cst.Element(parse_expression(r, "value")) for _, r in missing]
    new = build(append(layout, items))
    message = f"added {_shown([r for _, r in missing])} to {found.label}"
    return finish(source, replace_node(module, node, new).code, message)


@guarded
def remove(source: str, edit: RemoveElements) -> RewriteResult:
    """Drop every element equal to one of the values; "unchanged" when none is there."""
    module = parse_module(source)
    found = _collection(module, edit)
    node = found.node
    layout = read_layout(node)
    codes = _element_codes(module, layout)
    rendered = [(v, render_literal(v)) for v in _unique(edit.values)]
    doomed = {i for i, c in enumerate(codes) if any(_matches(c, v, r) for v, r in rendered)}
    if not doomed:
        shown = _shown([r for _, r in rendered])
        return RewriteResult("unchanged", source, f"{found.label} already lacks {shown}")
    removed = _shown([module.code_for_node(layout.entries[i].item) for i in sorted(doomed)])
    new = build(drop(layout, doomed))
    message = f"removed {removed} from {found.label}"
    return finish(source, replace_node(module, node, new).code, message)


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "ensure_elements": ensure,
    "remove_elements": remove,
}
