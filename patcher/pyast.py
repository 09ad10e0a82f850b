"""The controller's one door to `ast.parse`: the parse holds a process-wide lock.

Why: on CPython before 3.13 (3.11.7 here), the C-to-Python conversion of a parsed tree counts
its recursion depth in state shared by all threads; two threads parsing at once (the matrix's
pool, a fleet's per-host threads) can raise `SystemError: AST constructor recursion depth
mismatch` for a perfectly good file. A parse holds the GIL for nearly all its time, so taking
turns costs nothing measurable. tests/unit/test_import_rules.py keeps every other module of
`patcher/` from calling `ast.parse` itself (the agent parses nothing).
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, overload

_LOCK = threading.Lock()  # not run state: it guards CPython's own parser state


@overload
def parse(source: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse(source: str, mode: Literal["eval"]) -> ast.Expression: ...


def parse(source: str, mode: Literal["exec", "eval"] = "exec") -> ast.Module | ast.Expression:
    """The tree of `source` (as `ast.parse(source, mode=mode)`), one thread at a time."""
    with _LOCK:
        return ast.parse(source, mode=mode)  # type: ignore[return-value]
