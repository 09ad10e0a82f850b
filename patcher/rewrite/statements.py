"""replace_statement / insert_statement / remove_statement, anchored on statement source.

A statement matches when its `ast.dump` equals the `match` snippet's, so reformatting or new
comments upstream do not break the anchor while any semantic change does. The search covers the
scope's blocks (if/for/while/try/with/match bodies) but not nested defs and classes: those are
separate scopes, addressed by `scope`, which keeps a short `match` from hitting code elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from patcher.rewrite import Rewrite, RewriteResult
from patcher.rewrite._scope import (
    Abort,
    Block,
    ScopeNode,
    StatementKey,
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
    suites,
)
from patcher.specs.model import InsertStatement, RemoveStatement, ReplaceStatement, _StatementEdit


@dataclass(frozen=True)
class Run:
    """Statements `block.body[start:end]`, which together equal a snippet."""

    block: Block
    start: int
    end: int


class Index:
    """The blocks of one scope, their statement keys, and where each block sits in the tree."""

    def __init__(self, root: ScopeNode) -> None:
        self.blocks: list[Block] = []
        self._ancestors: dict[int, tuple[tuple[Block, int], ...]] = {}
        self._keys: dict[int, list[StatementKey]] = {}
        top = root if isinstance(root, cst.Module) else root.body
        if isinstance(top, cst.Module | cst.IndentedBlock):
            self._walk(top, ())

    def _walk(self, block: Block, ancestors: tuple[tuple[Block, int], ...]) -> None:
        self.blocks.append(block)
        self._ancestors[id(block)] = ancestors
        for i, stmt in enumerate(block.body):
            if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
                continue
            for suite in suites(stmt):
                if isinstance(suite, cst.IndentedBlock):
                    self._walk(suite, (*ancestors, (block, i)))

    def keys(self, block: Block) -> list[StatementKey]:
        if id(block) not in self._keys:
            self._keys[id(block)] = [statement_key(stmt) for stmt in block.body]
        return self._keys[id(block)]

    def find(self, key: StatementKey) -> list[Run]:
        """Every run of consecutive statements, in any block, that equals `key`."""
        runs: list[Run] = []
        for block in self.blocks:
            keys = self.keys(block)
            for start in range(len(keys)):
                found, end = _forward(keys, start, len(key))
                if found == key:
                    runs.append(Run(block, start, end))
        return runs

    def inside(self, run: Run, outer: Run) -> bool:
        """Whether `run` lies within the statements of `outer` (directly or nested)."""
        if run.block is outer.block:
            return outer.start <= run.start and run.end <= outer.end
        return any(
            block is outer.block and outer.start <= i < outer.end
            for block, i in self._ancestors[id(run.block)]
        )

    def next_to(self, run: Run, key: StatementKey, before: bool) -> bool:
        """Whether the statements right before/after `run` equal `key`."""
        keys = self.keys(run.block)
        if before:
            found: StatementKey = ()
            i = run.start
            while len(found) < len(key) and i > 0:
                i -= 1
                found = keys[i] + found
            return found == key
        return _forward(keys, run.end, len(key))[0] == key


def _forward(keys: Sequence[StatementKey], start: int, size: int) -> tuple[StatementKey, int]:
    """Keys of statements from `start` on, until at least `size` entries (or the block end)."""
    found: StatementKey = ()
    end = start
    while len(found) < size and end < len(keys):
        found += keys[end]
        end += 1
    return found, end


# --- shared plumbing -------------------------------------------------------------------------


def _preview(code: str) -> str:
    """First line of a snippet for messages, marked when there is more."""
    lines = [line.strip() for line in code.strip().splitlines()]
    text = lines[0] if len(lines) == 1 else lines[0] + " ..."
    return repr(text if len(text) <= 70 else text[:67] + "...")


def _locate(source: str, scope: str) -> tuple[cst.Module, Index]:
    module = parse_module(source)
    return module, Index(find_scope(module, scope))


def _ambiguous(module: cst.Module, runs: Sequence[Run], what: str) -> Abort:
    lines = format_lines(line_numbers(module, [r.block.body[r.start] for r in runs]))
    return Abort("ambiguous", f"{what} matches {len(runs)} places ({lines})")


def _splice(
    module: cst.Module, run: Run, new: Sequence[cst.BaseStatement], at_end: Sequence[cst.EmptyLine]
) -> cst.Module:
    """Replace `run` by `new` in its block; `at_end` lines go to the block footer."""
    body = [*run.block.body[: run.start], *new, *run.block.body[run.end :]]
    footer = [*at_end, *run.block.footer]
    if isinstance(run.block, cst.Module):
        return run.block.with_changes(body=body, footer=footer)
    return replace_node(module, run.block, run.block.with_changes(body=body, footer=footer))


def _run_length(lines: Sequence[cst.EmptyLine], from_end: bool, blank: bool) -> int:
    """Number of blank (or comment) lines at the start (or end) of `lines`."""
    seq = list(reversed(lines)) if from_end else list(lines)
    count = 0
    while count < len(seq) and (seq[count].comment is None) == blank:
        count += 1
    return count


def _blank_run(lines: Sequence[cst.EmptyLine], from_end: bool) -> int:
    return _run_length(lines, from_end, blank=True)


def _join_lines(
    first: Sequence[cst.EmptyLine], second: Sequence[cst.EmptyLine]
) -> list[cst.EmptyLine]:
    """`first` then `second`, with the blank lines where they meet not doubled up."""
    tail = _blank_run(first, from_end=True)
    head = _blank_run(second, from_end=False)
    middle = first[len(first) - tail :] if tail >= head else second[:head]
    return [*first[: len(first) - tail], *middle, *second[head:]]


def _strip_blank(lines: Sequence[cst.EmptyLine], leading: bool) -> list[cst.EmptyLine]:
    """`lines` without trailing (and, if `leading`, leading) blank lines."""
    start = _blank_run(lines, from_end=False) if leading else 0
    end = len(lines) - _blank_run(lines, from_end=True)
    return list(lines[start:end]) if start < end else []


def _in_order(module: cst.Module, runs: Sequence[Run]) -> list[Run]:
    """Runs sorted as they appear in the file (the index lists them block by block)."""
    lines = line_numbers(module, [r.block.body[r.start] for r in runs])
    return [run for _, _, run in sorted(zip(lines, range(len(runs)), runs, strict=True))]


def _nth(module: cst.Module, runs: Sequence[Run], edit: _StatementEdit, what: str) -> Run:
    """The `edit.occurrence`-th of `runs` in file order."""
    assert edit.occurrence is not None
    ordered = _in_order(module, runs)
    if edit.occurrence > len(ordered):
        raise Abort(
            "anchor_missing",
            f"{what} is found {len(ordered)} times in {scope_label(edit.scope)}: "
            f"there is no occurrence {edit.occurrence}",
        )
    return ordered[edit.occurrence - 1]


# --- the ops ---------------------------------------------------------------------------------


@guarded
def replace(source: str, edit: ReplaceStatement) -> RewriteResult:
    """Swap the matched statement(s) for `code`; "unchanged" once only `code` is left."""
    module, index = _locate(source, edit.scope)
    code_runs = index.find(snippet_key(edit.code))
    runs = [
        r
        for r in index.find(snippet_key(edit.match))
        if not any(index.inside(r, c) for c in code_runs)
    ]
    where = scope_label(edit.scope)
    if edit.occurrence is not None:
        return _replace_nth(source, module, edit, runs, code_runs, index)
    if len(runs) > 1:
        raise _ambiguous(module, runs, f"match {_preview(edit.match)} in {where}")
    if not runs:
        # Code found more than once still means "applied": the code may have existed elsewhere
        # before the first run, and a re-run of an applied edit must never report a problem.
        if code_runs:
            return RewriteResult("unchanged", source, f"already replaced in {where}")
        raise Abort("anchor_missing", f"match {_preview(edit.match)} not found in {where}")
    return _replace_run(source, module, edit, runs[0])


def _replace_nth(
    source: str,
    module: cst.Module,
    edit: ReplaceStatement,
    runs: list[Run],
    code_runs: list[Run],
    index: Index,
) -> RewriteResult:
    """Replace the `occurrence`-th match, counting the places already replaced as well.

    Counting replaced places keeps the numbering stable: after the edit, the place it changed
    holds `code` and still has its number, so a re-run finds it done instead of replacing the
    next match along.
    """
    replaced = [c for c in code_runs if not any(index.inside(c, r) for r in runs)]
    what = f"match {_preview(edit.match)} (or code)"
    run = _nth(module, [*runs, *replaced], edit, what)
    where = scope_label(edit.scope)
    if not any(run is r for r in runs):
        return RewriteResult(
            "unchanged", source, f"occurrence {edit.occurrence} already replaced in {where}"
        )
    return _replace_run(source, module, edit, run)


def _replace_run(
    source: str, module: cst.Module, edit: ReplaceStatement, run: Run
) -> RewriteResult:
    new = parse_statements(edit.code)
    old_lines = leading_lines(run.block.body[run.start])
    new[0] = new[0].with_changes(leading_lines=[*old_lines, *leading_lines(new[0])])
    message = f"replaced {_preview(edit.match)} in {scope_label(edit.scope)}"
    return finish(source, _splice(module, run, new, ()).code, message)


def _is_definition(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.FunctionDef | cst.ClassDef)


def _spacing(neighbour: cst.BaseStatement, block: Block) -> list[cst.EmptyLine]:
    """Blank lines for an inserted def/class: its neighbour's, or PEP 8's if it has none."""
    above = leading_lines(neighbour)
    blanks = list(above[: _blank_run(above, from_end=False)])
    count = 2 if isinstance(block, cst.Module) else 1
    return blanks or [cst.EmptyLine(indent=False) for _ in range(count)]


def _insertion(
    new: list[cst.BaseStatement], run: Run, at: int
) -> tuple[Run, list[cst.BaseStatement]]:
    """What replaces which statements to insert `new` at `at`, with defs set off by blank lines.

    Without this a method inserted after another would be glued to it (and the next statement
    glued to its body), which is valid but reads like a mistake in a review.
    """
    body = run.block.body
    spacing = _spacing(body[run.start], run.block)
    if _is_definition(new[0]) and not leading_lines(new[0]):
        new[0] = new[0].with_changes(leading_lines=spacing)
    if _is_definition(new[-1]) and at < len(body):
        following = body[at]
        missing = len(spacing) - _blank_run(leading_lines(following), from_end=False)
        if missing > 0:
            lines = [*spacing[:missing], *leading_lines(following)]
            return Run(run.block, at, at + 1), [*new, following.with_changes(leading_lines=lines)]
    return Run(run.block, at, at), new


@guarded
def insert(source: str, edit: InsertStatement) -> RewriteResult:
    """Put `code` before/after the matched statement(s) unless it is already right there."""
    module, index = _locate(source, edit.scope)
    code_key = snippet_key(edit.code)
    runs = index.find(snippet_key(edit.match))
    before = edit.position == "before"
    where = scope_label(edit.scope)
    if edit.occurrence is not None:
        # Only the chosen place counts: the code next to another match is not this edit's.
        runs = [_nth(module, runs, edit, f"match {_preview(edit.match)}")]
    if any(index.next_to(r, code_key, before) for r in runs):
        return RewriteResult(
            "unchanged", source, f"code already {edit.position} the match in {where}"
        )
    if not runs:
        raise Abort("anchor_missing", f"match {_preview(edit.match)} not found in {where}")
    if len(runs) > 1:
        raise _ambiguous(module, runs, f"match {_preview(edit.match)} in {where}")
    run = runs[0]
    new = parse_statements(edit.code)
    span, new = _insertion(new, run, run.start if before else run.end)
    message = f"inserted {_preview(edit.code)} {edit.position} {_preview(edit.match)} in {where}"
    return finish(source, _splice(module, span, new, ()).code, message)


@guarded
def remove(source: str, edit: RemoveStatement) -> RewriteResult:
    """Delete the matched statement(s); "unchanged" when they are already gone.

    Comment lines directly above the match describe it and go too; blank lines and comments set
    apart by a blank line stay. A block left empty gets `pass`.
    """
    module, index = _locate(source, edit.scope)
    runs = index.find(snippet_key(edit.match))
    where = scope_label(edit.scope)
    if not runs:
        return RewriteResult(
            "unchanged", source, f"{_preview(edit.match)} already absent in {where}"
        )
    if len(runs) > 1:
        raise _ambiguous(module, runs, f"match {_preview(edit.match)} in {where}")
    run = runs[0]
    body = run.block.body
    lines = leading_lines(body[run.start])
    kept = list(lines[: len(lines) - _run_length(lines, from_end=True, blank=False)])
    message = f"removed {_preview(edit.match)} from {where}"
    if run.end < len(body):
        following = body[run.end]
        joined = _join_lines(kept, leading_lines(following))
        moved = following.with_changes(leading_lines=joined)
        new_module = _splice(module, Run(run.block, run.start, run.end + 1), [moved], ())
    elif run.start == 0 and isinstance(run.block, cst.IndentedBlock):
        placeholder = cst.SimpleStatementLine(
            [cst.Pass()], leading_lines=_strip_blank(kept, leading=True)
        )
        new_module = _splice(module, run, [placeholder], ())
    else:
        new_module = _splice(module, run, [], _strip_blank(kept, leading=False))
    return finish(source, new_module.code, message)


# This family's rows of the op table (patcher.rewrite.rewrites): op -> its rewrite.
OPS: dict[str, Rewrite] = {
    "replace_statement": replace,
    "insert_statement": insert,
    "remove_statement": remove,
}
