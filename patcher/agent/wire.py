"""JSON for the agent's requests, answers and journal, without importing `json`.

Why: `json` imports `re` (and through it `enum`, `functools`, `collections`): ~6 ms of CPU at
every agent start, more than the rest of an inspect. Its C accelerator `_json` does the actual
work for `json.loads`/`json.dumps` and imports nothing; this module drives it the way
`json.decoder`/`json.encoder` do with their default settings, so the text and the objects are
the same (tests/unit/test_agent_wire.py compares them on every Python the agent supports).
Without `_json` (another implementation), or on any error, it is `json` itself: a bad request
gets json's own error message.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any

_c: Any = None
try:
    import _json as _c
except ImportError:  # pragma: no cover - CPython always has it
    pass
_make_encoder = getattr(_c, "make_encoder", None)
_make_scanner = getattr(_c, "make_scanner", None)
_escape = getattr(_c, "encode_basestring_ascii", None)

_WS = " \t\n\r"


class _Decoding:
    """What json.JSONDecoder() hands the C scanner (its default settings)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


_scan = _make_scanner(_Decoding()) if _make_scanner is not None else None


def loads(text: str) -> Any:
    """json.loads(text) for a str."""
    if _scan is not None:
        start = len(text) - len(text.lstrip(_WS))
        try:
            obj, end = _scan(text, start)
        except Exception:
            # Not JSON there (StopIteration: no value at all). json words the error: the C
            # scanner reports one through json.decoder, and before 3.12 only if it is already
            # imported (else a SystemError).
            pass
        else:
            if end == len(text.rstrip(_WS)):
                return obj
    import json

    return json.loads(text)


def _default(obj: Any) -> Any:
    raise TypeError("Object of type %s is not JSON serializable" % type(obj).__name__)


def dumps(obj: Any, sort_keys: bool = False) -> str:
    """json.dumps(obj, sort_keys=sort_keys) (ASCII, default separators, circular check)."""
    if _make_encoder is not None and _escape is not None:
        encode = _make_encoder({}, _default, _escape, None, ": ", ", ", sort_keys, False, True)
        return "".join(encode(obj, 0))
    import json

    return json.dumps(obj, sort_keys=sort_keys)
