"""PURE: (pristine text, hand-edited text, file) -> the structural edits that reproduce the edit.

`vpatch capture` turns what an operator did with `sed -i` or an editor into a spec. The two
modules' ASTs are compared top-down by scope (module -> class -> def bodies, and the blocks of
if/for/while/with/try inside them, which statement ops search too). Statements are matched by
identity (a def or class by name, an assignment by its target, an import by its module, any
other statement by its whole AST), and for every difference the finest op that expresses it is
tried first:

- elements added to or removed from a list/tuple/set literal: `ensure_elements` /
  `remove_elements`, by `target` when the literal is assigned to a name, else `containing`
  (the literal's original values);
- an assignment's new value, a dict entry's, a parameter's new default: `set_value` (`key`
  for a dict entry; `value`, else `expr`);
- a call's new or changed keyword argument: `set_argument`;
- a new def (or a changed one whose body cannot be captured finer): `ensure_def`. A def new to
  a module or class (no def of its name there before) is one whatever changed around it:
  matched apart from the other statements, run after their edits, with `after`/`before` its
  neighbour's name when it is not last (`_Capture.block`);
- a new import, or names added to a `from x import`: `ensure_import`;
- bases added or removed: `ensure_base` / `remove_base`;
- otherwise the smallest enclosing statements: `insert_statement`, `remove_statement`,
  `replace_statement` (with `scope`, and `occurrence` when the statement repeats).

Every candidate is VERIFIED before it is kept: it runs on the pristine text
(`patcher.rewrite.apply_edits`) and the result's AST must equal the pristine AST with just that
one difference taken from the edited file. A candidate that misses its anchor, is ambiguous or
gives another tree is dropped for the next coarser one. At the end all kept edits run together
and the result must have the edited file's AST (`ast.dump`), or the capture falls back to
replacing whole top-level statements; if even that fails, `CaptureError`.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from typing import Any

from patcher import pyast
from patcher.authoring import sameast
from patcher.rewrite import RewriteResult, apply_edits
from patcher.rewrite.depth import TOO_DEEP, nesting_problem
from patcher.specs.model import Edit, edits_from_json

EditDict = dict[str, Any]
# How a candidate is replayed on the pristine text: None when its edits are not valid spec
# edits, else apply_edits' result (`Validated`, or `patcher.authoring.replays.Replays`, the
# command's, which remembers: a capture replays the same edits more than once)
Replay = Callable[[str, Sequence[EditDict]], "RewriteResult | None"]
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COLLECTIONS = (ast.List, ast.Tuple, ast.Set)
_BLOCK_FIELDS = ("body", "orelse", "finalbody")
_MAX_OCCURRENCE = 3


class CaptureError(Exception):
    """The edit cannot be expressed as a spec (the message says which file and why)."""


@dataclass
class Captured:
    """The edits for one file (`file` set on each by the caller) and what to tell the user."""

    edits: list[EditDict]
    notes: list[str] = field(default_factory=list)


def capture(
    pristine: str,
    edited: str,
    rel: str,
    replay: Replay | None = None,
    *,
    portable: bool = False,
) -> Captured:
    """The edits that turn `pristine` into `edited` (same AST always; see module docstring),
    every candidate replayed on `pristine` by `replay` (default: `Validated()`). `portable`
    (`vpatch backport`, whose spec is carried to other releases): a literal assigned to a name
    is found by its first elements before its name, which an older release may spell
    otherwise."""
    replay = replay if replay is not None else Validated()
    if pristine == edited:
        return Captured([], [f"{rel}: no change"])
    if not pristine:
        return Captured([{"op": "add_file", "file": rel, "text": edited}])
    for text in (pristine, edited):
        deep = nesting_problem(text)  # a host's file: it must not crash libcst or recurse here
        if deep:
            raise CaptureError(f"{rel}: {deep}")
    try:
        ptree, etree = pyast.parse(pristine), pyast.parse(edited)
    except SyntaxError as exc:
        raise CaptureError(f"{rel}: does not parse ({exc.msg}, line {exc.lineno})") from None
    try:
        same = ast.dump(etree) == ast.dump(ptree)
        want = sameast.dump(etree)
    except RecursionError:
        raise CaptureError(f"{rel}: {TOO_DEEP}") from None
    if same:
        return Captured([], [f"{rel}: only comments or layout changed; nothing to capture"])
    for coarse in (False, True):
        cap = _Capture(pristine, edited, ptree, etree, coarse, replay)
        cap.portable = portable
        sites = cap.block((), "body", ptree.body, etree.body, "", module=True)
        if sites is None:
            continue
        edits = [e for s in sites for e in s]
        if cap.result_dump(edits) == want:
            return Captured(edits)
    raise CaptureError(
        f"{rel}: no combination of spec ops reproduces this edit (every candidate, down to "
        "whole top-level statements, missed its anchor or gave another AST)"
    )


class Validated:
    """Replay a candidate: its edits validated as spec edits (patcher.specs.validate, pydantic
    imported when first asked: a capture whose replays are all remembered never needs it),
    then `apply_edits`."""

    validated = 0  # edit lists validated (a replay remembered validates none)

    def models(self, edits: Sequence[EditDict]) -> list[Edit] | None:
        """The edits as spec edits, None when one is not a valid spec edit."""
        self.validated += 1
        try:
            return edits_from_json(list(edits))
        except ValueError:  # pydantic's ValidationError: not an edit of the format
            return None

    def __call__(self, source: str, edits: Sequence[EditDict]) -> RewriteResult | None:
        models = self.models(edits)
        return None if models is None else apply_edits(source, models)


def _result_dump(
    source: str, edits: Sequence[EditDict], replay: Replay, dumps: dict[str, str | None]
) -> str | None:
    """AST dump of `source` after `edits`, None when they do not apply cleanly; `dumps`: the
    dumps of results already made (the candidate kept is replayed again at the end)."""
    rw = replay(source, edits)
    if rw is None or rw.status != "changed":
        return None
    if rw.source not in dumps:
        try:
            dumps[rw.source] = sameast.dump(pyast.parse(rw.source))
        except SyntaxError:
            dumps[rw.source] = None
    return dumps[rw.source]


# ---------------------------------------------------------------------------------------------
# Source and values


# line breaks str.splitlines knows and ast's line numbers do not count
_NOT_AST_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _segment(text: str, node: ast.AST) -> str | None:
    """`ast.get_source_segment(text, node)`, which splits the whole text character by
    character on every call (~10 ms for vLLM's speculative.py, a capture asks many times):
    the same slice from splitlines where that splits the text where ast counts lines."""
    if _NOT_AST_BREAKS.search(text):
        return ast.get_source_segment(text, node)
    end: int | None = getattr(node, "end_lineno", None)
    end_col: int | None = getattr(node, "end_col_offset", None)
    if end is None or end_col is None:
        return None
    first: int = node.lineno - 1  # type: ignore[attr-defined]
    col: int = node.col_offset  # type: ignore[attr-defined]
    lines = text.splitlines(keepends=True)
    if end - 1 == first:
        return lines[first].encode()[col:end_col].decode()
    head = lines[first].encode()[col:].decode()
    tail = lines[end - 1].encode()[:end_col].decode()
    return "".join([head, *lines[first + 1 : end - 1], tail])


def _src(node: ast.stmt, lines: Sequence[str], text: str) -> str:
    """A statement's source (decorators included), dedented to column 0."""
    first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    end = node.end_lineno or node.lineno
    head = lines[first - 1]
    if head[: node.col_offset].strip() and first == node.lineno:  # after a `;`
        return _segment(text, node) or ""
    out = _dedent(lines, first, end, [node])
    if isinstance(node, ast.If) and out.startswith("elif"):
        out = out[2:]  # an `elif`: the `if` statement it is in the tree, written alone
    return out


def _run_src(nodes: Sequence[ast.stmt], lines: Sequence[str], text: str) -> str:
    if not nodes:
        return ""
    first = _src(nodes[0], lines, text)
    if len(nodes) == 1:
        return first
    start = min([d.lineno for d in getattr(nodes[0], "decorator_list", [])] + [nodes[0].lineno])
    end = nodes[-1].end_lineno or nodes[-1].lineno
    return _dedent(lines, start, end, nodes)


def _dedent(lines: Sequence[str], start: int, end: int, nodes: Sequence[ast.stmt]) -> str:
    """Lines start..end (1-based) moved to column 0: `textwrap.dedent`, unless a string
    literal spans lines (a field's docstring in a class): a line that begins inside one is
    the string's value and keeps every character, the others lose the first line's indent."""
    chunk = lines[start - 1 : end]
    inside = {
        n
        for node in (nodes if end > start else ())
        for s in ast.walk(node)
        if isinstance(s, ast.Constant | ast.JoinedStr) and (s.end_lineno or 0) > s.lineno
        for n in range(s.lineno + 1, (s.end_lineno or 0) + 1)
    }
    if not inside:
        return textwrap.dedent("".join(chunk))
    width = len(chunk[0]) - len(chunk[0].lstrip(" \t"))
    out = []
    for n, line in enumerate(chunk, start):
        indent = len(line) - len(line.lstrip(" \t"))
        out.append(line if n in inside else line[min(indent, width) :])
    return "".join(out)


def _json_value(node: ast.expr) -> tuple[bool, Any]:
    """(True, value) when the expression is a literal a TOML spec can carry as `value`."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    return (_jsonable(value), value) if not isinstance(node, ast.Tuple | ast.Set) else (False, None)


def _jsonable(v: Any) -> bool:
    if isinstance(v, bool | int | str):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(_jsonable(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _jsonable(x) for k, x in v.items())
    return False


def _scalars(elts: Sequence[ast.expr]) -> list[Any] | None:
    out = []
    for e in elts:
        ok, v = _json_value(e)
        if not ok or isinstance(v, list | dict):
            return None
        out.append(v)
    return out


def _key_of(v: Any) -> str:
    return json.dumps([type(v).__name__, v], sort_keys=True)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _value_or_expr(node: ast.expr, text: str) -> list[dict[str, Any]]:
    """The ways to write an expression in an edit: `value` (TOML) first, then `expr`."""
    out: list[dict[str, Any]] = []
    ok, v = _json_value(node)
    if ok and v is not None:
        out.append({"value": v})
    seg = _segment(text, node)
    if seg is not None:
        out.append({"expr": seg})
    return out


def _scoped(op: str, scope: str, **fields: Any) -> EditDict:
    out: EditDict = {"op": op}
    if scope:
        out["scope"] = scope
    out.update(fields)
    return out


def _stmt_key(s: ast.stmt) -> tuple[str, ...]:
    """What pairs a pristine statement with its edited counterpart."""
    if isinstance(s, (*_DEFS, ast.ClassDef)):
        return ("def", s.name)
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and _dotted(s.targets[0]):
        return ("assign", str(_dotted(s.targets[0])))
    if isinstance(s, ast.AnnAssign) and _dotted(s.target):
        return ("assign", str(_dotted(s.target)))
    if isinstance(s, ast.ImportFrom):
        return ("from", "." * s.level + (s.module or ""))
    return ("stmt", ast.dump(s))


def _binds(s: ast.stmt) -> str | None:
    """The name a statement binds that an `ensure_def` may stand beside (`after`/`before`):
    a def's or class's, or a plain name's assignment."""
    if isinstance(s, (*_DEFS, ast.ClassDef)):
        return s.name
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
        return s.targets[0].id
    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
        return s.target.id
    return None


def _defined(body: Sequence[ast.stmt]) -> list[str]:
    """Names of the defs and classes of a scope's statements, those under if/try/with/for
    included: where `ensure_def` looks for its name."""
    out: list[str] = []
    for s in body:
        if isinstance(s, (*_DEFS, ast.ClassDef)):
            out.append(s.name)
            continue
        inner = [getattr(s, f, None) or [] for f in _BLOCK_FIELDS]
        inner += [h.body for h in getattr(s, "handlers", [])]
        inner += [c.body for c in getattr(s, "cases", [])]
        for stmts in inner:
            out += _defined(stmts)
    return out


def _fresh_defs(pbody: Sequence[ast.stmt], ebody: Sequence[ast.stmt]) -> set[int]:
    """Indices of the defs directly in ebody that are new to the scope: no def or class of
    that name in pbody, and only this one of it in ebody (a getter and its setter are not)."""
    had = set(_defined(pbody))
    has = _defined(ebody)
    return {
        j
        for j, s in enumerate(ebody)
        if isinstance(s, _DEFS) and s.name not in had and has.count(s.name) == 1
    }


# ---------------------------------------------------------------------------------------------
# The walk


Steps = tuple[tuple[str, int], ...]
# A mutation made in place on the pristine tree; it returns what undoes it (the tree is dumped
# between the two: no copy of a whole module per candidate)
Mutate = Callable[[ast.Module], Callable[[], None]]


def _swap(node: ast.AST, name: str, value: Any) -> Callable[[], None]:
    """Set node.name to value; what sets it back."""
    saved = getattr(node, name)
    setattr(node, name, value)
    return lambda: setattr(node, name, saved)


def _node_at(tree: ast.AST, steps: Steps) -> Any:
    node: Any = tree
    for name, index in steps:
        node = getattr(node, name)[index]
    return node


@dataclass(frozen=True)
class _Block:
    """One statement list being compared: where it is in the pristine tree (`steps` to its
    owner, `name` of the field), both versions, the scope path, and which ops fit there."""

    steps: Steps
    name: str
    p: list[ast.stmt]
    e: list[ast.stmt]
    scope: str
    module: bool
    defs_ok: bool

    def mutate(self, i1: int, i2: int, new: list[ast.stmt]) -> Mutate:
        """The pristine tree with p[i1:i2] replaced by `new`: what a candidate must give."""

        def apply(tree: ast.Module) -> Callable[[], None]:
            owner = getattr(_node_at(tree, self.steps), self.name)
            saved = owner[i1:i2]
            owner[i1:i2] = new

            def undo() -> None:
                owner[i1 : i1 + len(new)] = saved

            return undo

        return apply


class _Capture:
    def __init__(
        self,
        pristine: str,
        edited: str,
        ptree: ast.Module,
        etree: ast.Module,
        coarse: bool,
        replay: Replay,
    ) -> None:
        self.p, self.e = pristine, edited
        self.replay = replay
        self.dumps: dict[str, str | None] = {}
        self.plines = pristine.splitlines(keepends=True)
        self.elines = edited.splitlines(keepends=True)
        self.ptree, self.etree = ptree, etree
        self.coarse = coarse
        self.portable = False
        # (id of a pristine block, index) -> (its counterpart's index, the edits that change
        # it): what an insertion right after a changed statement is anchored on and runs after
        self.changed: dict[tuple[int, int], tuple[int, list[EditDict]]] = {}

    def result_dump(self, edits: Sequence[EditDict]) -> str | None:
        return _result_dump(self.p, edits, self.replay, self.dumps)

    def psrc(self, nodes: Sequence[ast.stmt]) -> str:
        return _run_src(nodes, self.plines, self.p)

    def esrc(self, nodes: Sequence[ast.stmt]) -> str:
        return _run_src(nodes, self.elines, self.e)

    def choose(
        self, alternatives: Sequence[list[EditDict]], mutate: Mutate
    ) -> list[EditDict] | None:
        """The first alternative whose result is the pristine tree with `mutate` applied."""
        undo = mutate(self.ptree)
        try:
            want = sameast.dump(self.ptree)
        finally:
            undo()
        for edits in alternatives:
            if edits and self.result_dump(edits) == want:
                return edits
        return None

    # -- blocks ---------------------------------------------------------------------------

    def block(
        self,
        steps: Steps,
        name: str,
        pbody: list[ast.stmt],
        ebody: list[ast.stmt],
        scope: str,
        module: bool = False,
        defs_ok: bool = False,
    ) -> list[list[EditDict]] | None:
        """Edits (one list per difference) turning pbody into ebody; None if one cannot be.

        A def new to a module or class (`_fresh_defs`) is left out of the matching: the other
        statements are matched as if it were not there, then it becomes an `ensure_def`, run
        after the block's other edits, that puts it beside the neighbour it has in ebody
        (`placed_defs`). So what else changed around it (a neighbour's body, statements
        inserted beside it) never turns it into an `insert_statement` anchored on a
        neighbour's text. A def no placement reproduces is matched with the rest again."""
        b = _Block(steps, name, pbody, ebody, scope, module, defs_ok or module)
        fresh = set() if self.coarse or not b.defs_ok else _fresh_defs(pbody, ebody)
        while True:
            self.changed = {k: v for k, v in self.changed.items() if k[0] != id(pbody)}
            rest = [s for j, s in enumerate(ebody) if j not in fresh]
            got = self.matched(replace(b, e=rest))
            if not fresh:
                return got
            if got is None:
                fresh = set()  # the other statements only match with the def among them
                continue
            placed, failed = self.placed_defs(b, sorted(fresh), got)
            if failed is None:
                return [*got, *placed]
            fresh.discard(failed)

    def matched(self, b: _Block) -> list[list[EditDict]] | None:
        """The block's statements paired by identity (`_stmt_key`), each difference captured."""
        pkeys = [_stmt_key(s) for s in b.p]
        ekeys = [_stmt_key(s) for s in b.e]
        out: list[list[EditDict]] = []
        ops = SequenceMatcher(None, pkeys, ekeys, autojunk=False).get_opcodes()
        for tag, i1, i2, j1, j2 in ops:
            pairs = list(zip(range(i1, i2), range(j1, j2), strict=False))
            pairable = tag == "equal" or (
                tag == "replace"
                and i2 - i1 == j2 - j1
                and all(type(b.p[i]) is type(b.e[j]) for i, j in pairs)
            )
            got: list[EditDict] | None
            if pairable:
                found = self.pairs(b, pairs)
                if found is not None:
                    out.extend(found)
                    continue
                if tag == "equal":
                    return None
                got = self.run_replace(b, i1, i2, j1, j2)
            elif tag == "replace":
                got = self.run_replace(b, i1, i2, j1, j2)
            elif tag == "insert":
                got = self.insert(b, i1, j1, j2)
            else:
                got = self.delete(b, i1, i2)
            if got is None:
                return None
            out.append(got)
        return out

    def placed_defs(
        self, b: _Block, fresh: list[int], got: list[list[EditDict]]
    ) -> tuple[list[list[EditDict]], int | None]:
        """An `ensure_def` for each def of b.e at the indices `fresh`, in order, each after
        the block's edits `got` and the defs before it: where it lands must be where it is
        in b.e. Also the first def none of its placements reproduces (None: none such)."""
        prior = [e for edits in got for e in edits]
        placed: list[list[EditDict]] = []
        for j in fresh:
            absent = {k for k in fresh if k > j}  # not added yet when this one runs
            want = [s for k, s in enumerate(b.e) if k not in absent]
            alts = [[*prior, edit] for edit in self.def_placements(b, j, absent)]
            chosen = self.choose(alts, b.mutate(0, len(b.p), want))
            if chosen is None:
                return placed, j
            prior.append(chosen[-1])
            placed.append([chosen[-1]])
        return placed, None

    def def_placements(self, b: _Block, j: int, absent: set[int]) -> list[EditDict]:
        """The ensure_defs that may put b.e[j] where it is: last in the scope (no neighbour
        named) when only defs still to come follow it, then after the statement before it,
        then before the one after it, each named by what it binds (`_binds`)."""
        code = self.esrc([b.e[j]])
        out: list[EditDict] = []
        if all(k in absent for k in range(j + 1, len(b.e))):
            out.append(_scoped("ensure_def", b.scope, code=code))
        prev = _binds(b.e[j - 1]) if j else None
        if prev is not None:
            out.append(_scoped("ensure_def", b.scope, after=prev, code=code))
        succ = _binds(b.e[j + 1]) if j + 1 < len(b.e) and j + 1 not in absent else None
        if succ is not None:
            out.append(_scoped("ensure_def", b.scope, before=succ, code=code))
        return out

    def pairs(self, b: _Block, pairs: list[tuple[int, int]]) -> list[list[EditDict]] | None:
        found: list[list[EditDict]] = []
        for i, j in pairs:
            if ast.dump(b.p[i]) != ast.dump(b.e[j]):
                got = self.pair(b, i, j)
                if got is None:
                    return None
                found.extend(got)
                self.changed[(id(b.p), i)] = (j, [e for edits in got for e in edits])
        return found

    def statement_alternatives(
        self, match: str, code: str | None, scope: str, op: str = "replace_statement"
    ) -> list[list[EditDict]]:
        fields: dict[str, Any] = {"match": match}
        if code is not None:
            fields["code"] = code
        out = [[_scoped(op, scope, **fields)]]
        if op == "replace_statement":
            out += [
                [_scoped(op, scope, **fields, occurrence=n)] for n in range(1, _MAX_OCCURRENCE + 1)
            ]
        return out

    def run_replace(self, b: _Block, i1: int, i2: int, j1: int, j2: int) -> list[EditDict] | None:
        alts = self.statement_alternatives(self.psrc(b.p[i1:i2]), self.esrc(b.e[j1:j2]), b.scope)
        return self.choose(alts, b.mutate(i1, i2, b.e[j1:j2]))

    def _insert(self, b: _Block, match: str, code: str, position: str) -> EditDict:
        return _scoped("insert_statement", b.scope, match=match, code=code, position=position)

    def insert(self, b: _Block, i1: int, j1: int, j2: int) -> list[EditDict] | None:
        new = b.e[j1:j2]
        changed = self.changed.get((id(b.p), i1 - 1)) if i1 else None
        if changed is not None and changed[0] == j1 - 1:
            # The statement before was changed by the edits just kept, which run first: the
            # new statements go after it as it is then (its pristine text is gone by then).
            prior = changed[1]
            alts = self.insert_alternatives(b, new, self.esrc([b.e[j1 - 1]]), None)
            both = b.mutate(i1 - 1, i1, [b.e[j1 - 1], *new])
            got = self.choose([[*prior, *alt] for alt in alts], both)
            if got is not None:
                return got[len(prior) :]
        before = self.psrc([b.p[i1 - 1]]) if i1 else None
        after = self.psrc([b.p[i1]]) if i1 < len(b.p) else None
        return self.choose(self.insert_alternatives(b, new, before, after), b.mutate(i1, i1, new))

    def insert_alternatives(
        self, b: _Block, new: list[ast.stmt], before: str | None, after: str | None
    ) -> list[list[EditDict]]:
        """Ways to insert `new` between the statements whose source is `before` and `after`."""
        alts: list[list[EditDict]] = []
        code = self.esrc(new)
        if not self.coarse:
            fine: list[EditDict] = []
            for k, stmt in enumerate(new):
                if isinstance(stmt, _DEFS) and b.defs_ok:
                    fine.append(_scoped("ensure_def", b.scope, code=self.esrc([stmt])))
                elif isinstance(stmt, ast.Import | ast.ImportFrom) and b.module:
                    fine.append(_scoped("ensure_import", b.scope, code=self.esrc([stmt])))
                else:
                    prev = self.esrc([new[k - 1]]) if k else before
                    if prev is None:
                        fine = []
                        break
                    fine.append(self._insert(b, prev, self.esrc([stmt]), "after"))
            if fine:
                alts.append(fine)
        if before is not None:
            alts.append([self._insert(b, before, code, "after")])
        if after is not None:
            alts.append([self._insert(b, after, code, "before")])
            alts += self.statement_alternatives(after, code + after, b.scope)
        if before is not None:
            alts += self.statement_alternatives(before, before + code, b.scope)
        return alts

    def delete(self, b: _Block, i1: int, i2: int) -> list[EditDict] | None:
        alts = [[_scoped("remove_statement", b.scope, match=self.psrc(b.p[i1:i2]))]]
        if i1:
            keep = self.psrc([b.p[i1 - 1]])
            alts += self.statement_alternatives(self.psrc(b.p[i1 - 1 : i2]), keep, b.scope)
        if i2 < len(b.p):
            keep = self.psrc([b.p[i2]])
            alts += self.statement_alternatives(self.psrc(b.p[i1 : i2 + 1]), keep, b.scope)
        return self.choose(alts, b.mutate(i1, i2, []))

    # -- one statement and its counterpart --------------------------------------------------

    def pair(self, b: _Block, i: int, j: int) -> list[list[EditDict]] | None:
        p, e, scope = b.p[i], b.e[j], b.scope
        here: Steps = (*b.steps, (b.name, i))
        whole = b.mutate(i, i + 1, [e])
        if not self.coarse:
            # a def or class renamed: the statement itself changes, not only what is inside
            renamed = getattr(p, "name", None) != getattr(e, "name", None)
            finer = None if renamed else self.finer(here, p, e, scope)
            if finer is not None:
                return finer
            alts = self.fine_alternatives(p, e, scope)
            got = self.choose(alts, whole) if alts else None
            if got is not None:
                return [got]
        alts = []
        if isinstance(p, _DEFS) and isinstance(e, _DEFS) and b.defs_ok and not self.coarse:
            alts.append([_scoped("ensure_def", scope, code=self.esrc([e]), replace=True)])
        alts += self.statement_alternatives(self.psrc([p]), self.esrc([e]), scope)
        got = self.choose(alts, whole)
        return None if got is None else [got]

    def finer(
        self, here: Steps, p: ast.stmt, e: ast.stmt, scope: str
    ) -> list[list[EditDict]] | None:
        """Differences inside a def, class or compound statement, each captured on its own."""
        if isinstance(p, _DEFS) and type(p) is type(e):
            assert isinstance(e, _DEFS)
            return self.in_def(here, p, e, scope)
        if isinstance(p, ast.ClassDef) and isinstance(e, ast.ClassDef):
            return self.in_class(here, p, e, scope)
        compound = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)
        if isinstance(p, compound) and type(p) is type(e):
            if _header(p) != _header(e):
                return None
            if ast.dump(_strip(p, "handlers")) != ast.dump(_strip(e, "handlers")):
                return None
            out: list[list[EditDict]] = []
            for f in _BLOCK_FIELDS:
                pb: list[ast.stmt] = getattr(p, f, None) or []
                eb: list[ast.stmt] = getattr(e, f, None) or []
                if ast.dump(ast.Module(pb, [])) == ast.dump(ast.Module(eb, [])):
                    continue
                if not pb or not eb:
                    return None  # an else: block appearing or going: the statement changes
                got = self.block(here, f, pb, eb, scope)
                if got is None:
                    return None
                out.extend(got)
            return out
        return None

    def in_def(
        self,
        here: Steps,
        p: ast.FunctionDef | ast.AsyncFunctionDef,
        e: ast.FunctionDef | ast.AsyncFunctionDef,
        scope: str,
    ) -> list[list[EditDict]] | None:
        path = f"{scope}.{p.name}" if scope else p.name
        same = ("decorator_list", "returns", "type_params")
        if any(
            ast.dump(_list(getattr(p, f, None))) != ast.dump(_list(getattr(e, f, None)))
            for f in same
        ):
            return None
        out: list[list[EditDict]] = []
        if ast.dump(p.args) != ast.dump(e.args):
            got = self.defaults(here, p, e, path)
            if got is None:
                return None
            out.append(got)
        if ast.dump(ast.Module(p.body, [])) != ast.dump(ast.Module(e.body, [])):
            body = self.block(here, "body", p.body, e.body, path)
            if body is None:
                return None
            out.extend(body)
        return out

    def defaults(
        self,
        here: Steps,
        p: ast.FunctionDef | ast.AsyncFunctionDef,
        e: ast.FunctionDef | ast.AsyncFunctionDef,
        path: str,
    ) -> list[EditDict] | None:
        """set_value param= for each parameter whose default changed (nothing else may)."""
        pd, ed = _param_defaults(p.args), _param_defaults(e.args)
        if pd is None or ed is None or list(pd) != list(ed):
            return None
        if ast.dump(_without_defaults(p.args)) != ast.dump(_without_defaults(e.args)):
            return None
        choices: list[list[dict[str, Any]]] = []
        names: list[str] = []
        for pname, pdefault in pd.items():
            edefault = ed[pname]
            if (pdefault is None) != (edefault is None):
                return None  # a default appearing or going changes the signature
            if pdefault is None or edefault is None or ast.dump(pdefault) == ast.dump(edefault):
                continue
            names.append(pname)
            choices.append(_value_or_expr(edefault, self.e))

        def mutate(tree: ast.Module) -> Callable[[], None]:
            return _swap(_node_at(tree, here), "args", e.args)

        alts = []
        for pick in (0, 1):
            edits = []
            for pname, options in zip(names, choices, strict=True):
                opt = options[min(pick, len(options) - 1)] if options else None
                if opt is None:
                    return None
                edits.append(_scoped("set_value", path, param=pname, **opt))
            alts.append(edits)
        return self.choose(alts, mutate)

    def in_class(
        self, here: Steps, p: ast.ClassDef, e: ast.ClassDef, scope: str
    ) -> list[list[EditDict]] | None:
        path = f"{scope}.{p.name}" if scope else p.name
        for f in ("decorator_list", "keywords", "type_params"):
            if ast.dump(_list(getattr(p, f, None))) != ast.dump(_list(getattr(e, f, None))):
                return None
        out: list[list[EditDict]] = []
        pb, eb = [ast.dump(b) for b in p.bases], [ast.dump(b) for b in e.bases]
        if pb != eb:
            edits = [
                _scoped("ensure_base", path, value=_segment(self.e, b) or "")
                for b, d in zip(e.bases, eb, strict=True)
                if d not in pb
            ]
            edits += [
                _scoped("remove_base", path, value=_segment(self.p, b) or "")
                for b, d in zip(p.bases, pb, strict=True)
                if d not in eb
            ]

            def mutate(tree: ast.Module) -> Callable[[], None]:
                return _swap(_node_at(tree, here), "bases", e.bases)

            got = self.choose([edits], mutate)
            if got is None:
                return None
            out.append(got)
        if ast.dump(ast.Module(p.body, [])) != ast.dump(ast.Module(e.body, [])):
            body = self.block(here, "body", p.body, e.body, path, defs_ok=True)
            if body is None:
                return None
            out.extend(body)
        return out

    def fine_alternatives(self, p: ast.stmt, e: ast.stmt, scope: str) -> list[list[EditDict]]:
        """Whole-statement differences one op can say: elements, a value, an argument, names
        added to an import."""
        alts: list[list[EditDict]] = []
        target = _assigned(p)
        if target is not None and target == _assigned(e) and _same_but_value(p, e):
            pv, ev = p.value, e.value  # type: ignore[attr-defined]
            assert pv is not None and ev is not None
            if self.portable:
                alts += [_element_edits(pv, ev, scope, a) for a in _first_elements(pv, ev)]
            elements = _element_edits(pv, ev, scope, {"target": target})
            if elements:
                alts.append(elements)
            entries = _entry_edits(pv, ev, scope, target, self.e)
            if entries:
                alts.append(entries)
            alts += [
                [_scoped("set_value", scope, target=target, **opt)]
                for opt in _value_or_expr(ev, self.e)
            ]
        if isinstance(p, ast.ImportFrom) and isinstance(e, ast.ImportFrom):
            have = {(a.name, a.asname) for a in p.names}
            new = [a for a in e.names if (a.name, a.asname) not in have]
            if new and len(e.names) == len(p.names) + len(new):
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in new)
                code = f"from {'.' * e.level}{e.module or ''} import {names}\n"
                alts.append([_scoped("ensure_import", scope, code=code)])
        generic = _delta_edits(p, e, scope, self.e)
        if generic:
            alts.append(generic)
        return alts


def _list(v: Any) -> ast.AST:
    """Something `ast.dump` takes, for a field that may be a list, a node or missing."""
    if isinstance(v, list):
        return ast.Module(list(v), [])
    if isinstance(v, ast.AST):
        return v
    return ast.Constant(v)


def _strip(node: ast.stmt, f: str) -> ast.AST:
    return _list(getattr(node, f, None))


def _header(node: ast.stmt) -> str:
    """A compound statement without its blocks (its test, target, items...)."""
    fields = {
        f: getattr(node, f)
        for f in node._fields
        if f not in (*_BLOCK_FIELDS, "handlers", "type_comment")
    }
    return ast.dump(type(node)(**fields))


def _assigned(s: ast.stmt) -> str | None:
    if isinstance(s, ast.Assign) and len(s.targets) == 1:
        return _dotted(s.targets[0])
    if isinstance(s, ast.AnnAssign) and s.value is not None:
        return _dotted(s.target)
    return None


def _same_but_value(p: ast.stmt, e: ast.stmt) -> bool:
    if isinstance(p, ast.AnnAssign) and isinstance(e, ast.AnnAssign):
        return ast.dump(p.annotation) == ast.dump(e.annotation)
    return isinstance(p, ast.Assign) and isinstance(e, ast.Assign)


def _param_defaults(args: ast.arguments) -> dict[str, ast.expr | None] | None:
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    out: dict[str, ast.expr | None] = {a.arg: d for a, d in zip(positional, defaults, strict=True)}
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out[a.arg] = d
    return out


def _without_defaults(args: ast.arguments) -> ast.arguments:
    bare = copy.deepcopy(args)
    bare.defaults = []
    bare.kw_defaults = [None] * len(bare.kw_defaults)
    return bare


def _collection(node: ast.expr) -> ast.List | ast.Tuple | ast.Set | None:
    """The literal itself, or the one inside frozenset(...)/set(...)/tuple(...)/list(...)."""
    if isinstance(node, _COLLECTIONS):
        return node
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("frozenset", "set", "tuple", "list")
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], _COLLECTIONS)
    ):
        return node.args[0]
    return None


def _element_edits(
    pv: ast.expr, ev: ast.expr, scope: str, anchor: dict[str, Any] | None
) -> list[EditDict]:
    """ensure_elements (then remove_elements) turning one literal into the other; [] when the
    change is not only elements added and removed."""
    pc, ec = _collection(pv), _collection(ev)
    if pc is None or ec is None or type(pc) is not type(ec):
        return []
    if isinstance(pv, ast.Call) != isinstance(ev, ast.Call):
        return []
    if isinstance(pv, ast.Call) and isinstance(ev, ast.Call):
        if ast.dump(pv.func) != ast.dump(ev.func):
            return []
    pvals, evals = _scalars(pc.elts), _scalars(ec.elts)
    if pvals is None or evals is None:
        return []
    pkeys, ekeys = {_key_of(v) for v in pvals}, {_key_of(v) for v in evals}
    added = [v for v in evals if _key_of(v) not in pkeys]
    removed = [v for v in pvals if _key_of(v) not in ekeys]
    if not added and not removed:
        return []
    kept = [v for v in pvals if _key_of(v) not in {_key_of(r) for r in removed}]
    out: list[EditDict] = []
    if added:
        where = anchor if anchor is not None else {"containing": pvals}
        if not where.get("containing", True):
            return []
        out.append(_scoped("ensure_elements", scope, **where, values=_unique(added)))
    if removed:
        where = anchor if anchor is not None else {"containing": kept}
        if anchor is None and not kept:
            return []
        out.append(_scoped("remove_elements", scope, **where, values=_unique(removed)))
    return out


def _first_elements(pv: ast.expr, ev: ast.expr) -> list[dict[str, Any]]:
    """`containing` anchors for a literal: its first two elements kept by the edit, three,
    then all it keeps (the first that finds only it in its scope is taken)."""
    pc, ec = _collection(pv), _collection(ev)
    pvals = _scalars(pc.elts) if pc is not None else None
    evals = _scalars(ec.elts) if ec is not None else None
    if pvals is None or evals is None:
        return []
    kept = [v for v in pvals if _key_of(v) in {_key_of(x) for x in evals}]
    sizes = sorted({min(n, len(kept)) for n in (2, 3, len(kept))} - {0})
    return [{"containing": kept[:n]} for n in sizes]


def _entry_edits(pv: ast.expr, ev: ast.expr, scope: str, target: str, etext: str) -> list[EditDict]:
    """set_value key= for each entry of a dict literal whose value changed or that was added
    (same keys otherwise, scalar keys); [] for anything else."""
    if not isinstance(pv, ast.Dict) or not isinstance(ev, ast.Dict):
        return []
    pkeys, ekeys = _scalars(pv.keys), _scalars(ev.keys)  # type: ignore[arg-type]
    if pkeys is None or ekeys is None or None in pv.keys or None in ev.keys:
        return []
    if ekeys[: len(pkeys)] != pkeys:
        return []  # a key removed or moved: not entries set
    out: list[EditDict] = []
    old = dict(zip(map(_key_of, pkeys), pv.values, strict=True))
    for key, value in zip(ekeys, ev.values, strict=True):
        before = old.get(_key_of(key))
        if before is not None and ast.dump(before) == ast.dump(value):
            continue
        opts = _value_or_expr(value, etext)
        if not opts:
            return []
        out.append(_scoped("set_value", scope, target=target, key=key, **opts[0]))
    return out


def _unique(values: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for v in values:
        k = _key_of(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


def _deltas(
    a: Any, b: Any, path: tuple[tuple[Any, Any], ...], out: list[tuple[Any, Any, tuple[Any, ...]]]
) -> None:
    """The smallest differing node pairs of two trees, with their ancestors."""
    if type(a) is not type(b):
        out.append((a, b, path))
        return
    if not isinstance(a, ast.AST):
        if a != b:
            out.append((a, b, path))
        return
    if ast.dump(a) == ast.dump(b):
        return
    for f in a._fields:
        va, vb = getattr(a, f, None), getattr(b, f, None)
        if isinstance(va, list) and isinstance(vb, list):
            if len(va) != len(vb):
                out.append((a, b, path))
                return
        elif not isinstance(va, ast.AST) and va != vb:
            out.append((a, b, path))
            return
    for f in a._fields:
        va, vb = getattr(a, f, None), getattr(b, f, None)
        if isinstance(va, list) and isinstance(vb, list):
            for x, y in zip(va, vb, strict=True):
                _deltas(x, y, (*path, (a, b)), out)
        elif isinstance(va, ast.AST):
            _deltas(va, vb, (*path, (a, b)), out)


def _delta_edits(p: ast.stmt, e: ast.stmt, scope: str, etext: str) -> list[EditDict]:
    """Edits for a statement whose only differences are literal elements and keyword
    arguments of calls; [] when anything else differs."""
    found: list[tuple[Any, Any, tuple[Any, ...]]] = []
    _deltas(p, e, (), found)
    out: list[EditDict] = []
    done: set[int] = set()
    for a, b, path in found:
        # a changed element: the literal holding it is the difference
        if path and isinstance(path[-1][0], _COLLECTIONS) and not isinstance(a, _COLLECTIONS):
            a, b, path = path[-1][0], path[-1][1], path[:-1]
        if id(a) in done:
            continue
        done.add(id(a))
        if isinstance(a, _COLLECTIONS):
            edits = _element_edits(a, b, scope, None)
            if not edits:
                return []
            out += edits
            continue
        call = _call_argument(a, b, path, scope, etext)
        if call is None:
            return []
        out += call
    return out


def _call_argument(
    a: Any, b: Any, path: tuple[tuple[Any, Any], ...], scope: str, etext: str
) -> list[EditDict] | None:
    """set_argument for a keyword argument added to a call or given another value."""
    if isinstance(a, ast.Call) and isinstance(b, ast.Call):
        if ast.dump(a.func) != ast.dump(b.func) or len(a.args) != len(b.args):
            return None
        if any(ast.dump(x) != ast.dump(y) for x, y in zip(a.args, b.args, strict=True)):
            return None
        have = {k.arg: ast.dump(k.value) for k in a.keywords}
        new = {k.arg for k in b.keywords}
        if any(k not in new for k in have) or None in have or None in new:
            return None
        changed = [k for k in b.keywords if have.get(k.arg) != ast.dump(k.value)]
        callee = _dotted(b.func)
        if callee is None or not changed:
            return None
        return [_argument(callee, str(k.arg), k.value, scope, etext) for k in changed]
    for i in range(len(path) - 1, -1, -1):
        node, enode = path[i]
        if isinstance(node, ast.keyword) and node.arg and i > 0:
            call, ecall = path[i - 1]
            callee = _dotted(call.func) if isinstance(call, ast.Call) else None
            if callee is None or not isinstance(ecall, ast.Call):
                return None
            return [_argument(callee, node.arg, enode.value, scope, etext)]
    return None


def _argument(callee: str, arg: str, value: ast.expr, scope: str, etext: str) -> EditDict:
    opts = _value_or_expr(value, etext)
    return _scoped("set_argument", scope, call=callee, arg=arg, **opts[0])


# ---------------------------------------------------------------------------------------------
# The spec, as TOML text


def _toml_string(text: str) -> str:
    """A TOML string: multi-line literal for code (read back verbatim), else a basic string
    (JSON's escapes are TOML's)."""
    if "\n" in text and "'''" not in text and all(c >= " " or c in "\n\t" for c in text):
        return "'''\n" + text + "'''"
    return json.dumps(text, ensure_ascii=False)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        inner = ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items())
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"no TOML form for {v!r}")


def spec_toml(
    spec_id: str,
    summary: str,
    package: str,
    versions: str,
    files: Sequence[tuple[str, Captured]],
    comments: Sequence[str] = (),
) -> str:
    """A whole spec: one variant for `versions` holding every file's edits (each edit names
    its `file` when there are several), an import probe per changed module, and a commented
    skeleton of the probe that should prove the edit works."""
    from patcher.specs.model import module_of

    rels = [rel for rel, cap in files if cap.edits]
    lines = [f"# {c}" for c in comments]
    lines += [
        f"id = {_toml_value(spec_id)}",
        f"summary = {_toml_value(summary)}",
        f"package = {_toml_value(package)}",
        "",
        "[[variant]]",
        f"versions = {_toml_value(versions)}",
    ]
    if len(rels) == 1:
        lines.append(f"file = {_toml_value(rels[0])}")
    for rel, cap in files:
        for edit in cap.edits:
            lines += ["", "  [[variant.edit]]"]
            body = dict(edit)
            body.pop("file", None)
            if len(rels) > 1 or edit["op"] == "add_file":
                body = {"op": body.pop("op"), "file": rel, **body}
            for k, v in body.items():
                lines.append(f"  {k} = {_toml_value(v)}")
    for rel in rels:
        mod = module_of(rel)
        lines += ["", "[[probe]]", f"name = {_toml_value('import ' + mod)}"]
        lines.append(f"module = {_toml_value(mod)}")
    if rels:
        mod = module_of(rels[0])
        lines += [
            "",
            "# A probe that FAILS without the edit and PASSES with it proves the edit works",
            "# (docs/spec.md, [[probe]]). Fill in and uncomment:",
            "# [[probe]]",
            '# name = "the edit takes effect"',
            f"# module = {_toml_value(mod)}",
            "# code = '''",
            "# assert ...  # `module` is the imported module",
            "# '''",
        ]
    return "\n".join(lines) + "\n"
