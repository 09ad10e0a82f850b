"""vpatch's unified diffs against GNU diff and patch (tests/cases/udiff/gnu_round_trips.json):
the hunks vpatch writes (`vpatch diff`, the plan's report) are GNU `diff -u`'s byte for byte,
`\\ No newline at end of file` included; GNU `patch` applies them; vpatch's own parser
(`vpatch backport`) applies GNU's. Real binaries, no stand-ins."""

from __future__ import annotations

import json
from typing import Any

import pytest

from patcher.authoring import handedit, udiff
from patcher.plan import base, fastdiff
from tests.support import gnudiff
from tests.support.cases import CASES

_DATA = json.loads((CASES / "udiff" / "gnu_round_trips.json").read_text())
_CASES: list[dict[str, Any]] = _DATA["cases"]


def _ids() -> list[str]:
    return [c["name"] for c in _CASES]


@pytest.fixture(params=_CASES, ids=_ids())
def case(request: pytest.FixtureRequest) -> dict[str, Any]:
    got: dict[str, Any] = request.param
    return got


def test_vpatch_writes_gnu_diffs_hunks(case: dict[str, Any]) -> None:
    old, new = case["old"], case["new"]
    gnu = gnudiff.diff_u(old, new)
    assert gnu  # every case changes something
    ours = base.unified_diff("pkg/m.py", old, new)
    assert ours.startswith("--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ ")
    assert gnudiff.hunks(ours) == gnu
    # `vpatch diff`'s writer (a hand edit against pip's bytes) and the anchored path alike
    scan = handedit.FileDiff("pkg/m.py", "/x/pkg/m.py", "modified", None, None, "wheel", old, new)
    assert scan.diff == ours
    a, b = fastdiff.split_lines(old), fastdiff.split_lines(new)
    assert "".join(fastdiff.unified_diff(a, b, "a/pkg/m.py", "b/pkg/m.py", small=0)) == ours


def test_gnu_patch_applies_vpatchs_diff(case: dict[str, Any]) -> None:
    old, new = case["old"], case["new"]
    assert gnudiff.patch(old, base.unified_diff("pkg/m.py", old, new)) == new


def test_vpatchs_parser_applies_gnus_diff_and_its_own(case: dict[str, Any]) -> None:
    old, new = case["old"], case["new"]
    for text in (
        "--- a/pkg/m.py\n+++ b/pkg/m.py\n" + gnudiff.diff_u(old, new),
        base.unified_diff("pkg/m.py", old, new),
    ):
        [fp] = udiff.parse(text)
        assert udiff.apply(old, fp) == new


def test_the_marker_is_gnus_own_line() -> None:
    """The one line GNU diff writes (a backslash, a space, the words, a newline), and only
    after a last line without newline."""
    assert fastdiff.NO_NEWLINE == "\\ No newline at end of file\n"
    assert fastdiff.split_lines("a\n\x0cb\r\nc") == ["a\n", "\x0cb\r\n", "c"]
    assert fastdiff.split_lines("") == [] and fastdiff.split_lines("\n") == ["\n"]
