"""Text from hosts and journals made inert for a terminal.

Why: a host's file text (in a diff), a journal's spec id, a path, a warning or an error the
agent relays are chosen by whoever controls that host or that environment. Printed as they
are, an ESC sequence can recolour, move the cursor, clear or retitle the operator's terminal,
and a bidi override or isolate can show a line in another order than the bytes it holds (a
line of code that reads as a comment in a review before `capture`). Every human printer puts
such strings through `clean`, which shows each of those characters as a visible escape;
`--json` keeps the raw text (json escapes the controls itself).

What is escaped: C0 controls except tab and newline, DEL and C1 controls as `\\xNN`; the
characters that change the order or the visibility of what follows (bidi embeddings,
overrides, isolates and marks, zero-width characters, the line and paragraph separators,
byte-order mark, interlinear annotations) as `\\uNNNN`.
"""

from __future__ import annotations

_C0_C1 = (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))
_INVISIBLE = (
    0x061C,  # arabic letter mark
    *range(0x200B, 0x2010),  # zero width space/non-joiner/joiner, LRM, RLM
    *range(0x2028, 0x202F),  # line/paragraph separator, LRE RLE PDF LRO RLO
    *range(0x2060, 0x2070),  # word joiner, invisible operators, LRI RLI FSI PDI, deprecated
    0xFEFF,  # byte-order mark / zero width no-break space
    *range(0xFFF9, 0xFFFC),  # interlinear annotation anchors
)
_TABLE = {c: f"\\x{c:02x}" for c in _C0_C1} | {c: f"\\u{c:04x}" for c in _INVISIBLE}


def clean(text: object) -> str:
    """`text` (anything: str() of it) with every character above shown as its escape."""
    return str(text).translate(_TABLE)


def line(text: object) -> str:
    """`clean`, with newlines escaped too: for what must stay on one line (a host name, a
    spec id, a path, a table cell)."""
    return clean(text).replace("\n", "\\n")
