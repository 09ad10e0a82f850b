"""Colour in what vpatch prints for people: `--color auto|always|never`, NO_COLOR, CLICOLOR_FORCE.

One setting per process, as patcher.output.progress keeps -q/-v: the CLI's edge sets it
(`configure`)
and every rich Console made for people's output asks it (`console`). The decision is the CLIs
users know (pip, uv, gh): the flag wins; without it, `NO_COLOR` (any non-empty value) turns
colour off, then `CLICOLOR_FORCE` (non-empty, not `0`) turns it on where the output is no
terminal (a pager, CI's log), and else rich decides as it does (a terminal, `TERM=dumb`,
`FORCE_COLOR`). Off means no escape codes at all, bold included: what a script grepping the
output needs. It is colour only: whether a live progress line is drawn stays the terminal's
question (patcher.output.progress), never the flag's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rich.console import Console

Choice = Literal["auto", "always", "never"]
CHOICES: tuple[Choice, ...] = ("auto", "always", "never")

_choice: Choice = "auto"


def configure(choice: Choice | None) -> None:
    """The process's `--color` (None: not given, which is auto)."""
    global _choice
    _choice = choice or "auto"


def console_options(choice: Choice, environ: Mapping[str, str]) -> dict[str, Any]:
    """What rich's Console is told, for `choice` in `environ`: forced colour (`force_terminal`
    over a file that is no terminal, `no_color=False` over rich's own reading of NO_COLOR,
    and the 16 standard colours, all vpatch's styles use, whatever TERM says), no styling at
    all (`color_system=None`), or nothing (rich's own detection)."""
    forced = {"force_terminal": True, "no_color": False, "color_system": "standard"}
    if choice == "always":
        return forced
    if choice == "never" or environ.get("NO_COLOR", ""):
        return {"color_system": None}
    if environ.get("CLICOLOR_FORCE", "0") not in ("", "0"):
        return forced
    return {}


def console(file: IO[str], **more: Any) -> Console:
    """A rich Console on `file` that colours as this process's setting says."""
    from rich.console import Console

    return Console(file=file, **console_options(_choice, os.environ), **more)
