"""Pure source rewrites: (source text, edit) -> RewriteResult. No I/O, no raising for anchors.

Each op lives in its own module (elements, values, statements) as a function
`(source, edit) -> RewriteResult`, dispatched by `apply_edit`. Ops are
idempotent: running an edit on its own output returns status "unchanged". Anchors are structural
(scope path + assigned name, or a statement compared ignoring whitespace and comments), never
line numbers, so one edit fits many releases of a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from patcher.specs.model import Edit

Status = Literal["changed", "unchanged", "anchor_missing", "ambiguous", "invalid"]


@dataclass(frozen=True)
class RewriteResult:
    """Outcome of one or more edits. `source` is the input unchanged unless status == changed."""

    status: Status
    source: str
    message: str = ""


def apply_edit(source: str, edit: Edit) -> RewriteResult:
    """Dispatch one edit to its op module."""
    from patcher.rewrite import arguments, bases, defs, elements, imports, statements, values

    match edit.op:
        case "ensure_elements":
            return elements.ensure(source, edit)
        case "remove_elements":
            return elements.remove(source, edit)
        case "set_value":
            return values.set_value(source, edit)
        case "replace_statement":
            return statements.replace(source, edit)
        case "insert_statement":
            return statements.insert(source, edit)
        case "remove_statement":
            return statements.remove(source, edit)
        case "ensure_base":
            return bases.ensure(source, edit)
        case "remove_base":
            return bases.remove(source, edit)
        case "ensure_def":
            return defs.ensure(source, edit)
        case "ensure_import":
            return imports.ensure(source, edit)
        case "set_argument":
            return arguments.set_argument(source, edit)
        case "add_file":
            return add_file(source, edit.text)
    raise AssertionError(f"unknown op {edit.op}")  # pragma: no cover - pydantic rejects it


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
