"""Helpers shared by the rewrite ops: parsing, scope and target lookup, literals, statement keys.

Anchors must be structural so that one edit fits many releases of a file, and every failure to
find one must come back as a status (never an exception), because the engine reports per host
and per edit. Ops therefore raise `Abort` from deep inside a lookup and `guarded` turns it into
a `RewriteResult` at the op boundary; nothing else is caught.
"""

from __future__ import annotations

import ast
import functools
import math
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from pydantic import JsonValue

from patcher import pyast
from patcher.rewrite import RewriteResult, Status
from patcher.rewrite.depth import TOO_DEEP, nesting_problem

ScopeNode = cst.Module | cst.FunctionDef | cst.ClassDef
Block = cst.Module | cst.IndentedBlock
StatementKey = tuple[str, ...]

_E = TypeVar("_E")


class Abort(Exception):
    """An expected outcome other than "changed": carries the status and the user-facing reason."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def guarded(
    op: Callable[[str, _E], RewriteResult],
) -> Callable[[str, _E], RewriteResult]:
    """Turn `Abort` into a result with the untouched source, so ops can bail out from helpers."""

    @functools.wraps(op)
    def run(source: str, edit: _E) -> RewriteResult:
        try:
            return op(source, edit)
        except Abort as stop:
            return RewriteResult(stop.status, source, stop.message)
        except cst.CSTValidationError as exc:  # libcst refuses to build an impossible tree
            return RewriteResult("invalid", source, f"the edit would make invalid Python: {exc}")
        except RecursionError:  # libcst's visitors recurse once per level of the tree
            return RewriteResult("invalid", source, f"cannot parse the file: {TOO_DEEP}")

    return run


# --- parsing and results -------------------------------------------------------------------


def parse_module(source: str) -> cst.Module:
    """Parse with libcst, whose lossless tree lets us print everything we do not touch verbatim."""
    problem = nesting_problem(source)
    if problem:
        raise Abort("invalid", f"cannot parse the file: {problem}")
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        where = f"line {exc.editor_line}, column {exc.editor_column}"
        raise Abort("invalid", f"cannot parse the file: {exc.message} ({where})") from None
    if not module.has_trailing_newline and source.endswith(("\n", "\r")):
        # libcst misreads a file whose last line is a comment ending in a backslash as having
        # no final newline, and would drop that byte from every rewrite of the file.
        module = module.with_changes(has_trailing_newline=True)
    return module


def _compile_error(code: str) -> str | None:
    """The compiler's complaint about `code`, if any (symtable errors included, nothing runs)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<patched>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return f"{getattr(exc, 'msg', exc)} (line {line})" if line else str(exc)
    return None


def finish(source: str, new_code: str, message: str) -> RewriteResult:
    """Result for a rewritten file; refuses output that no longer compiles when the input did.

    A structural edit can still produce code the parser rejects (e.g. a default added before a
    parameter without one); shipping that to a host would break imports, so it is "invalid".
    """
    if new_code == source:  # e.g. removing the only `pass` of a block puts `pass` back
        return RewriteResult("unchanged", source, f"{message}: the text stays the same")
    error = _compile_error(new_code)
    if error is not None and _compile_error(source) is None:
        raise Abort("invalid", f"the edit would make the file invalid Python: {error}")
    return RewriteResult("changed", new_code, message)


def replace_node(module: cst.Module, old: cst.CSTNode, new: cst.CSTNode) -> cst.Module:
    """`deep_replace` by identity, typed for a module root."""
    if old is module:
        if not isinstance(new, cst.Module):  # pragma: no cover - callers pass a Module here
            raise TypeError("the module can only be replaced by a module")
        return new
    result = module.deep_replace(old, new)
    if not isinstance(result, cst.Module):  # pragma: no cover - module root is never `old`
        raise TypeError("replacement changed the module root")
    return result


def line_numbers(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> list[int]:
    """1-based start lines of `nodes`, for messages that must point a human at the duplicates."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    return [positions[node].start.line for node in nodes]


def format_lines(lines: Sequence[int]) -> str:
    """Render as "line 3" or "lines 3, 9": messages about duplicates must say where they are."""
    word = "line" if len(lines) == 1 else "lines"
    return f"{word} {', '.join(map(str, sorted(lines)))}"


def scope_label(scope: str) -> str:
    """How a scope is named in messages ("the module" rather than an empty string)."""
    return repr(scope) if scope else "the module"


# --- scopes ----------------------------------------------------------------------------------


def suites(stmt: cst.BaseStatement) -> list[cst.BaseSuite]:
    """Bodies of a compound statement that belong to the same scope (all but def/class bodies).

    Conditional definitions (`if TYPE_CHECKING:`, `try: ... except ImportError:`) and
    assignments inside loops live in these, and both lookups must see through them.
    """
    found: list[cst.BaseSuite] = []
    if isinstance(stmt, cst.If):
        found.append(stmt.body)
        if isinstance(stmt.orelse, cst.If):
            found.extend(suites(stmt.orelse))
        elif stmt.orelse is not None:
            found.append(stmt.orelse.body)
    elif isinstance(stmt, cst.For | cst.While):
        found.append(stmt.body)
        if stmt.orelse is not None:
            found.append(stmt.orelse.body)
    elif isinstance(stmt, cst.Try | cst.TryStar):
        found.append(stmt.body)
        found.extend(handler.body for handler in stmt.handlers)
        found.extend(part.body for part in (stmt.orelse, stmt.finalbody) if part is not None)
    elif isinstance(stmt, cst.With):
        found.append(stmt.body)
    elif isinstance(stmt, cst.Match):
        found.extend(case.body for case in stmt.cases)
    return found


def body_of(node: ScopeNode | cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """Statements directly in a scope or indented block (a one-line suite holds none)."""
    if isinstance(node, cst.Module | cst.IndentedBlock):
        return node.body
    if isinstance(node, cst.FunctionDef | cst.ClassDef):
        return body_of(node.body)
    return ()


def _definitions(stmts: Sequence[cst.BaseStatement], name: str) -> Iterator[ScopeNode]:
    """Defs/classes called `name` at this level, looking through if/try/with/loops."""
    for stmt in stmts:
        if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
            if stmt.name.value == name:
                yield stmt
        else:
            for suite in suites(stmt):
                yield from _definitions(body_of(suite), name)


def definitions(node: ScopeNode, name: str) -> list[ScopeNode]:
    """Defs/classes called `name` directly in a scope (conditional ones included)."""
    return list(_definitions(body_of(node), name))


def find_scope(module: cst.Module, scope: str) -> ScopeNode:
    """Resolve a dotted class/def path from module level, one component at a time."""
    node: ScopeNode = module
    where = "the module"
    for name in scope.split(".") if scope else []:
        hits = list(_definitions(body_of(node), name))
        if not hits:
            raise Abort("anchor_missing", f"scope {scope!r}: no class or def {name!r} in {where}")
        if len(hits) > 1:
            lines = format_lines(line_numbers(module, hits))
            raise Abort(
                "ambiguous",
                f"scope {scope!r}: {name!r} is defined {len(hits)} times in {where} ({lines})",
            )
        node = hits[0]
        kind = "class" if isinstance(node, cst.ClassDef) else "def"
        where = f"{kind} {name!r}"
    return node


# --- assignment targets ----------------------------------------------------------------------


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """`self.x` for an Attribute chain of Names, `x` for a Name, None for anything else."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted_name(expr.value)
        return None if base is None else f"{base}.{expr.attr.value}"
    return None


@dataclass(frozen=True)
class Assignment:
    """One `target = value` (or `target: T = value`) found in a scope."""

    statement: cst.Assign | cst.AnnAssign
    value: cst.BaseExpression


def _small_statements(stmts: Sequence[cst.CSTNode]) -> Iterator[cst.BaseSmallStatement]:
    """Small statements of the scope body, recursing into compound statements but not defs."""
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            yield from stmt.body
        elif isinstance(stmt, cst.BaseCompoundStatement) and not isinstance(
            stmt, cst.FunctionDef | cst.ClassDef
        ):
            for suite in suites(stmt):
                yield from _small_statements([suite])
        elif isinstance(stmt, cst.IndentedBlock):
            yield from _small_statements(stmt.body)


def _assigns(small: cst.BaseSmallStatement, target: str) -> Assignment | None:
    if isinstance(small, cst.Assign):
        if any(dotted_name(t.target) == target for t in small.targets):
            return Assignment(small, small.value)
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        if dotted_name(small.target) == target:
            return Assignment(small, small.value)
    return None


def find_assignment(module: cst.Module, scope: str, target: str) -> Assignment:
    """The single assignment to `target` in `scope`; anything else is a status, not a guess."""
    node = find_scope(module, scope)
    root: Sequence[cst.CSTNode] = [node.body] if not isinstance(node, cst.Module) else node.body
    hits = [a for s in _small_statements(root) if (a := _assigns(s, target)) is not None]
    if not hits:
        raise Abort("anchor_missing", f"no assignment to {target!r} in {scope_label(scope)}")
    if len(hits) > 1:
        lines = format_lines(line_numbers(module, [h.statement for h in hits]))
        raise Abort(
            "ambiguous",
            f"{target!r} is assigned {len(hits)} times in {scope_label(scope)} ({lines})",
        )
    return hits[0]


# --- literals --------------------------------------------------------------------------------


def quote_string(text: str, quote: str = '"') -> str:
    """A Python string literal for `text` using `quote`, escaping only what must be escaped.

    Like `repr` and black, switch to the other quote when that avoids escaping.
    """
    other = "'" if quote == '"' else '"'
    if quote in text and other not in text:
        quote = other
    out: list[str] = []
    for char in text:
        if char in ("\\", quote):
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(repr(char)[1:-1])
    return quote + "".join(out) + quote


def render_literal(value: JsonValue, quote: str = '"') -> str:
    """Python source for a TOML/JSON value; non-finite floats become `float("...")` calls."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        name = "nan" if math.isnan(value) else "inf"
        call = f"float({quote_string(name, quote)})"
        return "-" + call if value < 0 else call
    if isinstance(value, str):
        return quote_string(value, quote)
    if isinstance(value, list):
        return "[" + ", ".join(render_literal(item, quote) for item in value) + "]"
    entries = (f"{quote_string(k, quote)}: {render_literal(v, quote)}" for k, v in value.items())
    return "{" + ", ".join(entries) + "}"


def parse_expression(code: str, what: str) -> cst.BaseExpression:
    """libcst expression for `code` (an "invalid" status if libcst's grammar rejects it)."""
    try:
        return cst.parse_expression(code.strip())
    except cst.ParserSyntaxError as exc:
        message = f"{what} is not an expression libcst can parse: {exc.message}"
        raise Abort("invalid", message) from None


def expression_dump(code: str) -> str | None:
    """Formatting-free identity of an expression (quotes, spaces and parens do not count)."""
    try:
        return ast.dump(pyast.parse(f"(\n{code}\n)", mode="eval"))
    except (SyntaxError, ValueError, RecursionError):
        return None


def _typed(value: object) -> object:
    """Comparable form that keeps types apart (`1`, `1.0` and `True` are different elements)."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    if isinstance(value, set | frozenset):
        return (type(value).__name__, frozenset(_typed(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_typed(k), _typed(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def literal_key(code: str) -> object | None:
    """Value identity of a literal's source, or None when it is not a plain literal."""
    try:
        return _typed(ast.literal_eval(f"(\n{code}\n)"))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def value_key(value: JsonValue) -> object:
    """Value identity of a spec value, comparable with `literal_key`."""
    return _typed(value)


def string_quote(nodes: Sequence[cst.BaseExpression], default: str = '"') -> str:
    """Quote character of the first plain string among `nodes`, so new strings blend in."""
    for node in nodes:
        while isinstance(node, cst.ConcatenatedString):
            node = node.left
        if isinstance(node, cst.SimpleString):
            return node.quote[0]
    return default


# --- statements ------------------------------------------------------------------------------


def snippet_key(code: str) -> StatementKey:
    """Normalised form of statement source: one `ast.dump` per statement, layout ignored."""
    return tuple(ast.dump(stmt) for stmt in pyast.parse(textwrap.dedent(code)).body)


def leading_lines(stmt: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """Blank and comment lines above a statement (typed access for any statement kind)."""
    if isinstance(stmt, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return stmt.leading_lines
    return ()  # pragma: no cover - libcst has no other statement kinds


def statement_key(stmt: cst.BaseStatement) -> StatementKey:
    """Normalised form of one statement of the tree (a `;` line yields several entries)."""
    bare = stmt.with_changes(leading_lines=())
    if not isinstance(bare, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return ("<unknown>",)  # pragma: no cover - libcst has no other statement kinds
    code = cst.Module(body=[bare]).code
    try:
        return snippet_key(code)
    except (SyntaxError, ValueError, RecursionError):
        return ("<unparsable>",)


def parse_statements(code: str) -> list[cst.BaseStatement]:
    """Statements of a snippet, its leading comment lines moved onto the first statement.

    libcst puts a snippet's leading comments in `Module.header`; they belong to the first
    statement once the snippet is spliced into a block.
    """
    try:
        snippet = cst.parse_module(textwrap.dedent(code))
    except cst.ParserSyntaxError as exc:
        message = f"code is not a statement libcst can parse: {exc.message}"
        raise Abort("invalid", message) from None
    stmts: list[cst.BaseStatement] = list(snippet.body)
    first = stmts[0]
    stmts[0] = first.with_changes(leading_lines=[*snippet.header, *leading_lines(first)])
    return stmts
