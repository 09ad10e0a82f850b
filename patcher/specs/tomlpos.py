"""Where in a TOML file a field is: `variant[1].edit[0].values` -> (line, column), 1-based.

`vpatch check` reports `FILE:LINE:COL: FIELD: message`, the form editors and pre-commit turn
into a jump to the spot. tomllib returns values without positions, so this scans the text the
way TOML is laid out by hand: table headers (`[metrics]`, `[[variant]]`, `[[variant.edit]]`,
counted per parent so `edit[1]` of `variant[2]` is the second edit header after the third
variant header) and `key = value` lines, skipping the insides of multi-line strings (probe code
holds `x = 1` lines). Inline tables and keys spread over several lines are found at the line
that starts them. A field that is not written (a required one that is missing) is reported at
the table that lacks it.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^(\s*)(\[\[?)\s*([^\[\]]+?)\s*\]\]?")
_KEY = r"(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
_KEYLINE = re.compile(rf"^(\s*)({_KEY}(?:\s*\.\s*{_KEY})*)\s*=(.*)$")
_ERROR_AT = re.compile(r"\(at line (\d+), column (\d+)\)")
_LAST = re.compile(r"(\.[^.\[\]]+|\[\d+\])$")


def _parts(dotted: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(rf"{_KEY}", dotted)]


def positions(text: str) -> dict[str, tuple[int, int]]:
    """Every table and key written in `text`, by the field path `vpatch check` uses."""
    found: dict[str, tuple[int, int]] = {}
    latest: dict[str, str] = {}  # plain table name ("variant.edit") -> its current instance
    counts: dict[str, int] = {}
    table = ""
    closing: str | None = None  # inside a multi-line string: its closing quotes
    for n, line in enumerate(text.splitlines(), 1):
        if closing is not None:
            if closing in line:
                closing = None
            continue
        header = _HEADER.match(line)
        if header:
            indent, brackets, dotted = header.groups()
            names = _parts(dotted)
            parent = latest.get(".".join(names[:-1]), ".".join(names[:-1]))
            path = f"{parent}.{names[-1]}" if parent else names[-1]
            if brackets == "[[":
                counts[path] = counts.get(path, -1) + 1
                path = f"{path}[{counts[path]}]"
            latest[".".join(names)] = path
            table = path
            found.setdefault(path, (n, len(indent) + 1))
            continue
        keyline = _KEYLINE.match(line)
        if keyline is None or line.lstrip().startswith("#"):
            continue
        indent, dotted, value = keyline.groups()
        path = ".".join([*([table] if table else []), *_parts(dotted)])
        found.setdefault(path, (n, len(indent) + 1))
        for quotes in ('"""', "'''"):
            if value.count(quotes) % 2 == 1:
                closing = quotes
                break
    return found


Positions = dict[str, tuple[int, int]]


def locate(text: str | Positions, field: str) -> tuple[int, int]:
    """(line, col) of `field`, else of the nearest written table or key containing it, else
    (1, 1): the top of the file. Given `positions(text)` instead of the text, it costs the
    length of `field`, not of the file: `vpatch check` locates every problem of a file in one
    scan of it (8000 problems in one file stay linear)."""
    found = positions(text) if isinstance(text, str) else text
    path = "" if field.startswith("(") else field  # (top level), (toml), (file)
    while path:
        if path in found:
            return found[path]
        last = _LAST.search(path)  # drop ".name" or "[i]"
        path = path[: last.start()] if last else ""
    return 1, 1


def error_position(message: str) -> tuple[int, int] | None:
    """(line, col) a TOML parser's message names (`... (at line 3, column 7)`), if any."""
    m = _ERROR_AT.search(message)
    return (int(m[1]), int(m[2])) if m else None
