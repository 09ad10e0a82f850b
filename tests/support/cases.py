"""Golden rewrite cases (tests/cases/<op>/<case>.py) and diff helpers.

Each case file is

    # spec: {"op": ..., ...}         the edit, validated as a spec's edits are
    # status: changed                expected status
    <input source>
    # output                         only for "changed"
    <expected output source>
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patcher.specs.model import Edit, edits_from_json

CASES = Path(__file__).resolve().parent.parent / "cases"


class EditValidator:
    """One edit's fields validated (pydantic, patcher/specs/validate.py), as the object the
    rewrites take: what a spec's `[[variant.edit]]` becomes. A ValidationError when the
    fields are not an edit."""

    def validate_python(self, data: Any) -> Edit:
        [edit] = edits_from_json([data])
        return edit


EDIT = EditValidator()
_OUTPUT = re.compile(r"^# output\n", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    edit: Edit
    status: str
    source: str
    expected: str | None


def load_case(path: Path) -> Case:
    """Split a case file into its edit, status, input and expected output."""
    text = path.read_bytes().decode("utf-8")
    spec_line, status_line, rest = text.split("\n", 2)
    assert spec_line.startswith("# spec: "), f"{path}: first line must be '# spec: {{...}}'"
    assert status_line.startswith("# status: "), f"{path}: second line must be '# status: ...'"
    edit = EDIT.validate_python(json.loads(spec_line.removeprefix("# spec: ")))
    status = status_line.removeprefix("# status: ").strip()
    parts = _OUTPUT.split(rest, maxsplit=1)
    expected = parts[1] if len(parts) == 2 else None
    assert (expected is not None) == (status == "changed"), f"{path}: '# output' iff changed"
    return Case(edit, status, parts[0], expected)


def diff_lines(diff: str) -> list[str]:
    """The added and removed lines of a unified diff (its ---/+++ headers left out)."""
    lines = diff.splitlines()
    return [ln for ln in lines if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))]


def changed_lines(old: str, new: str) -> list[str]:
    """`diff_lines` of the unified diff from `old` to `new`."""
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
    return diff_lines("\n".join(diff))
