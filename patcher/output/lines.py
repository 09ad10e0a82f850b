"""The lines the other rooms write for people: a renderer's table row, a `warning:` or `note:`
on stderr, the `error:`/`hint:` pair. Only the commands and this room print (a test in
tests/unit/test_import_rules.py keeps it so); the rooms below them call these instead.

Why one door: what reaches the operator's terminal is where host text is made inert
(patcher.output.inert), so every line passes `clean` here, whatever its caller already did
(`clean` of a clean line is the same line). Streams are looked up when a line is written, not
when this module is imported, so a test's captured stderr gets them.
"""

from __future__ import annotations

import sys

from patcher.output.inert import clean

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: `vpatch --version` writes through here, typing unloaded
    from typing import TextIO


def put(text: object, file: TextIO | None = None, *, flush: bool = False) -> None:
    """`text` made inert and a newline, on `file` (stdout when None), as print would."""
    out = sys.stdout if file is None else file
    out.write(clean(text) + "\n")
    if flush:
        out.flush()


def warning(text: object) -> None:
    """`warning: TEXT` on stderr: something went wrong that does not change the outcome."""
    put(f"warning: {text}", sys.stderr)


def note(text: object) -> None:
    """`note: TEXT` on stderr: what the operator should know, not a failure."""
    put(f"note: {text}", sys.stderr)
