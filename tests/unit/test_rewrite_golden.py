"""Golden cases for the rewrite ops: tests/cases/<op>/<case>.py, black-style.

Each case file is

    # spec: {"op": ..., ...}         the edit, validated through the pydantic Edit union
    # status: changed                expected status
    <input source>
    # output                         only for "changed"
    <expected output source>

A case pins the exact text an op produces, so any formatting drift shows up as a diff here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patcher.rewrite import RewriteResult, apply_edit
from patcher.specs.model import EDIT_OPS
from tests.support.cases import CASES, EDIT, load_case


def _case_paths() -> list[Path]:
    return sorted(CASES.glob("*/*.py"))


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", _case_paths(), ids=_case_id)
def test_case(path: Path) -> None:
    case = load_case(path)
    assert case.edit.op == path.parent.name, "case sits in the directory of its op"
    result = apply_edit(case.source, case.edit)
    assert result.status == case.status, result.message
    assert result.message, "every outcome explains itself"
    if case.expected is None:
        assert result.source == case.source  # byte for byte: nothing changes on a non-change
        return
    assert result.source == case.expected
    compile(result.source, str(path), "exec")
    again = apply_edit(result.source, case.edit)
    assert (again.status, again.source) == ("unchanged", result.source), again.message


def test_the_op_table_dispatches_every_op_and_no_other() -> None:
    """The spec's union of edit records is the op table: every op has a rewrite (one row of
    its family module's OPS), none is left over."""
    from patcher.rewrite import rewrites

    assert sorted(rewrites()) == sorted(EDIT_OPS)
    assert len(EDIT_OPS) == len(set(EDIT_OPS))


def test_every_op_has_enough_cases() -> None:
    counts = {op: len(list((CASES / op).glob("*.py"))) for op in EDIT_OPS}
    assert all(n >= 8 for n in counts.values()), counts


# An import has no anchor: the module is always there and an import is added or merged, so
# it can be neither missing nor ambiguous (a clashing name is "invalid", pinned instead).
_NO_ANCHOR = {"ensure_import": {"anchor_missing", "ambiguous"}, "add_file": {"ambiguous"}}


def test_statuses_are_all_covered() -> None:
    """Each op is pinned for the applied, already-applied, missing and ambiguous outcomes."""
    for op in EDIT_OPS:
        wanted = {"changed", "unchanged", "anchor_missing", "ambiguous"} - _NO_ANCHOR.get(op, set())
        if op == "ensure_import":
            wanted.add("invalid")
        statuses = {load_case(p).status for p in (CASES / op).glob("*.py")}
        assert wanted <= statuses, (op, sorted(wanted - statuses))


# --- line endings, headers, invalid input ------------------------------------------------------

_CRLF_SOURCE = """\
#!/usr/bin/env python
# A header comment that libcst keeps in Module.header.


class Config:
    def check(self, kind: str, retries=3):
        supported = [
            "alpha",
            "beta",
        ]
        inline = ["alpha", "beta"]
        limits = {"cpu": 1}
        if kind not in supported:
            raise ValueError(kind)
        return True
"""

_CRLF_EDITS: list[dict[str, object]] = [
    {"op": "ensure_elements", "scope": "Config.check", "target": "supported", "values": ["gamma"]},
    {"op": "ensure_elements", "scope": "Config.check", "target": "inline", "values": ["gamma"]},
    {"op": "remove_elements", "scope": "Config.check", "target": "supported", "values": ["beta"]},
    {"op": "set_value", "scope": "Config.check", "target": "limits", "key": "gpu", "value": 2},
    {"op": "set_value", "scope": "Config.check", "param": "retries", "value": 5},
    {
        "op": "replace_statement",
        "scope": "Config.check",
        "match": "raise ValueError(kind)",
        "code": "msg = f'unsupported {kind}'\nraise ValueError(msg)",
    },
    {
        "op": "insert_statement",
        "scope": "Config.check",
        "match": "return True",
        "code": "if kind == 'beta':\n    print('beta')",
        "position": "before",
    },
    {"op": "remove_statement", "scope": "Config.check", "match": "return True"},
    {"op": "ensure_base", "scope": "Config", "value": "Base"},
    {"op": "ensure_def", "scope": "Config", "code": "def extra(self):\n    return 1\n"},
    {"op": "ensure_import", "code": "from os import path"},
    {
        "op": "set_argument",
        "scope": "Config.check",
        "call": "ValueError",
        "arg": "code",
        "value": 1,
    },
    {
        "op": "replace_statement",
        "scope": "Config.check",
        "match": "return True",
        "code": "return kind",
        "occurrence": 1,
    },
]


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("spec", _CRLF_EDITS, ids=lambda s: str(s["op"]))
def test_line_endings_and_header_survive(spec: dict[str, object], newline: str) -> None:
    source = _CRLF_SOURCE.replace("\n", newline)
    edit = EDIT.validate_python(spec)
    result = apply_edit(source, edit)
    assert result.status == "changed", result.message
    header = newline.join(_CRLF_SOURCE.splitlines()[:4]) + newline
    assert result.source.startswith(header)
    assert result.source.count(newline) == result.source.count("\n")  # no stray bare "\n"
    compile(result.source, "<crlf>", "exec")
    again = apply_edit(result.source, edit)
    assert (again.status, again.source) == ("unchanged", result.source), again.message


@pytest.mark.parametrize("spec", _CRLF_EDITS, ids=lambda s: str(s["op"]))
def test_unparsable_source_is_invalid(spec: dict[str, object]) -> None:
    source = "class Config:\n    def check(self:\n        pass\n"
    result: RewriteResult = apply_edit(source, EDIT.validate_python(spec))
    assert result.status == "invalid"
    assert result.source == source
    assert "line" in result.message
