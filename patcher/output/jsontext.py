"""`json.dumps(doc, indent=2)`, byte for byte, fast: every `--json` document is printed so.

Why: json's C encoder cannot indent, and its Python one costs a generator frame per value, ~30
us a host of a fleet's report (10,000 hosts: 0.3 s). Here strings go through json's own C
escaper and a container's scalars are written with their key in one piece; anything else (a
subclass, a key that is not a str) hands the whole document to json itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class _Other(Exception):
    """A value the fast path does not encode itself: json's own encoder does the document."""


def dumps(doc: Any) -> str:
    """The same text as `json.dumps(doc, indent=2)`."""
    parts: list[str] = []
    try:
        text = _leaf(doc)
        if text is not None:
            return text
        _encode(doc, "", parts.append)
    except (_Other, RecursionError):
        return json.dumps(doc, indent=2)
    return "".join(parts)


_esc = json.encoder.encode_basestring_ascii
_CONST = {None: "null", True: "true", False: "false"}


def _leaf(v: Any) -> str | None:
    """A scalar's JSON text; None for a container (and _Other for anything else)."""
    tp = type(v)
    if tp is str:
        return str(_esc(v))
    if v is None or tp is bool:
        return _CONST[v]
    if tp is int:
        return int.__repr__(v)
    if tp is float:
        return json.dumps(v)
    if tp is dict or tp is list or tp is tuple:
        return None
    raise _Other


def _encode(o: Any, ind: str, put: Callable[[str], object]) -> None:
    """o is a dict, list or tuple: its items, one a line, scalars in the same write."""
    if not o:
        put("{}" if type(o) is dict else "[]")
        return
    inner = ind + "  "
    if type(o) is dict:
        sep = "{\n" + inner
        for k, v in o.items():
            if type(k) is not str:
                raise _Other
            text = _leaf(v)
            if text is None:
                put(sep + _esc(k) + ": ")
                _encode(v, inner, put)
            else:
                put(sep + _esc(k) + ": " + text)
            sep = ",\n" + inner
        put("\n" + ind + "}")
        return
    sep = "[\n" + inner
    for v in o:
        text = _leaf(v)
        if text is None:
            put(sep)
            _encode(v, inner, put)
        else:
            put(sep + text)
        sep = ",\n" + inner
    put("\n" + ind + "]")
