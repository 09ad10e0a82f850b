"""How deep a host's file may be nested before a parser that recurses sees it (no libcst here:
`vpatch capture` checks a text before it imports the rewriters).

libcst's native parser recurses on the C stack: a file a few thousand levels deep (a host's,
chosen by whoever controls it) crashes the whole controller with SIGSEGV, every host's run
lost; libcst's visitors and `ast.dump` recurse in Python and raise RecursionError far earlier.
"""

from __future__ import annotations

import ast

from patcher import pyast

# AST levels a host's file may have. Real code stays under 100 (CPython itself refuses more
# than 200 nested brackets or 100 indentation levels); libcst crashes at a few thousand.
MAX_DEPTH = 1000
TOO_DEEP = "it is nested too deeply to rewrite"


def nesting_problem(source: str) -> str | None:
    """Why `source` must not reach libcst's parser (None: it may). Decided by CPython's own
    parser, which bounds its recursion and raises, then by the depth of its tree, walked
    without recursion. A file this Python cannot parse (newer syntax) is bounded by its raw
    bracket depth, the tokenizer's limit on every CPython."""
    try:
        tree = pyast.parse(source)
    except (RecursionError, MemoryError):
        return TOO_DEEP
    except SyntaxError as exc:
        if any(w in str(exc.msg) for w in ("too many", "too complex", "too deeply")):
            return f"{TOO_DEEP} ({exc.msg})"
        return TOO_DEEP if _bracket_depth(source) > 200 else None
    except ValueError:  # a NUL byte: libcst reports it
        return None
    todo: list[tuple[ast.AST, int]] = [(tree, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            return f"{TOO_DEEP} (more than {MAX_DEPTH} levels)"
        todo.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


def _bracket_depth(source: str) -> int:
    depth = deepest = 0
    for c in source:
        if c in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}" and depth:
            depth -= 1
    return deepest
