"""Insert into and remove from comma-separated sequences that are not literals.

Class bases, call arguments and the names of a `from x import (...)` are laid out like
collection literals (inline, or one per line with or without a trailing comma), but libcst
keeps each item's comma on the item and the whitespace before the closing bracket on the
bracket or on the last argument. These helpers move that whitespace so a new item lands in the
sequence's own style and a removal leaves the neighbours as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import libcst as cst

Item = TypeVar("Item", cst.Arg, cst.ImportAlias)

_NONE = cst.SimpleWhitespace("")
_SPACE = cst.SimpleWhitespace(" ")


def _separator(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """A line break (with its indent, without its comment) when `ws` is one, else a space."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return cst.ParenthesizedWhitespace(cst.TrailingWhitespace(), (), ws.indent, ws.last_line)
    return _SPACE


def _comma_after(item: Item) -> cst.BaseParenthesizableWhitespace:
    return item.comma.whitespace_after if isinstance(item.comma, cst.Comma) else _NONE


def insert(
    items: Sequence[Item], at: int, new: Item, opening: cst.BaseParenthesizableWhitespace
) -> list[Item]:
    """`items` with `new` at index `at`; `opening` is the whitespace after the open bracket."""
    out = list(items)
    if not out:
        out.append(new.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        return out
    if at < len(out):  # something follows: the new item is separated like its neighbours
        before = opening if at == 0 else _comma_after(out[at - 1])
        out.insert(at, new.with_changes(comma=cst.Comma(_NONE, _separator(before))))
        return out
    last = out[-1]
    before = opening if len(out) == 1 else _comma_after(out[-2])
    # The new last item inherits the old last item's trailing comma (or its absence) and the
    # whitespace up to the bracket; the old one gets an ordinary separator.
    new = new.with_changes(comma=last.comma)
    last = last.with_changes(comma=cst.Comma(_NONE, _separator(before)))
    if isinstance(new, cst.Arg) and isinstance(last, cst.Arg):
        new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
        last = last.with_changes(whitespace_after_arg=_NONE)
    out[-1] = last
    out.append(new)
    return out


def remove(items: Sequence[Item], at: int) -> list[Item]:
    """`items` without the one at `at`; a removed last item hands its ending to the one before."""
    out = list(items)
    gone = out.pop(at)
    if at == len(out) and out:
        prev = out[-1].with_changes(comma=gone.comma)
        if isinstance(prev, cst.Arg) and isinstance(gone, cst.Arg):
            prev = prev.with_changes(whitespace_after_arg=gone.whitespace_after_arg)
        out[-1] = prev
    return out
