"""Pure source rewrites: (source text, edit) -> RewriteResult. No I/O, no raising for anchors.

Each op lives in its family's module (elements, values, statements, ...) as a function
`(source, edit) -> RewriteResult`, one row of that module's `OPS`; `apply_edit` dispatches
through `rewrites()`, the table of every family's rows. Ops are
idempotent: running an edit on its own output returns status "unchanged". Anchors are structural
(scope path + assigned name, or a statement compared ignoring whitespace and comments), never
line numbers, so one edit fits many releases of a file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from patcher.specs.model import Edit

Status = Literal["changed", "unchanged", "anchor_missing", "ambiguous", "invalid"]


@dataclass(frozen=True)
class RewriteResult:
    """Outcome of one or more edits. `source` is the input unchanged unless status == changed."""

    status: Status
    source: str
    message: str = ""


# One op's rewrite: (source, the op's own edit record) -> result.
Rewrite = Callable[[str, Any], "RewriteResult"]


@cache
def rewrites() -> dict[str, Rewrite]:
    """The op table's rewrites: every family module's OPS rows, keyed by the spec's `op`
    (specs.model.EDIT_OPS; tests/unit/test_rewrite_golden.py checks they are the same ops).
    Imported on first use: libcst is not on the path of a command that rewrites nothing."""
    from patcher.rewrite import arguments, bases, defs, elements, imports, statements, values

    table: dict[str, Rewrite] = {"add_file": lambda source, edit: add_file(source, edit.text)}
    for family in (elements, values, statements, bases, defs, imports, arguments):
        table.update(family.OPS)
    return table


def apply_edit(source: str, edit: Edit) -> RewriteResult:
    """Dispatch one edit to its op's rewrite (pydantic admits only the table's ops)."""
    return rewrites()[edit.op](source, edit)


def add_file(source: str, text: str) -> RewriteResult:
    """A whole new module: the planner passes "" for a file that does not exist yet."""
    if source == text:
        return RewriteResult("unchanged", source, "the file already has this text")
    if source:
        return RewriteResult("anchor_missing", source, "the file exists with other content")
    return RewriteResult("changed", text, "created the module")


def apply_edits(source: str, edits: Sequence[Edit]) -> RewriteResult:
    """Run edits in order; stop at the first that cannot find its anchor.

    Status is "changed" if any edit changed the text, "unchanged" if all were already in place.
    """
    current = source
    messages: list[str] = []
    for i, edit in enumerate(edits):
        res = apply_edit(current, edit)
        if res.status in ("anchor_missing", "ambiguous", "invalid"):
            return RewriteResult(res.status, source, f"edit[{i}] ({edit.op}): {res.message}")
        if res.status == "changed":
            current = res.source
        if res.message:
            messages.append(res.message)
    status: Status = "changed" if current != source else "unchanged"
    return RewriteResult(status, current, "; ".join(messages))
