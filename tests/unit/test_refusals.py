"""Every hunk a spec cannot carry is named in one run (`patcher.authoring.refusals`, and
`patcher.authoring.backport` which takes a diff to its end): the file, the hunk's number,
header and old lines, and why; not the first one alone."""

from __future__ import annotations

import difflib

from patcher.authoring import backport, refusals, udiff
from patcher.authoring.capture import capture

FILLER = "".join(f"x{i} = {i}\n" for i in range(10))
# The last of five equal statements: no anchor finds it (occurrence goes to 3), so no spec op
# can change it; the two defs' returns can be.
PRISTINE = (
    "f()\n" * 5 + FILLER + "\n\ndef g():\n    return 1\n" + FILLER + "\n\ndef k():\n    return 3\n"
)
EDITED = (
    PRISTINE.replace("f()\n" + FILLER[:7], "h()\n" + FILLER[:7])
    .replace("return 1", "return 2")
    .replace("return 3", "return 4")
)


def diff(old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), "a/pkg/m.py", "b/pkg/m.py"
    )
    return "".join(lines)


def test_every_refused_hunk_of_a_diff_is_named() -> None:
    text = diff(PRISTINE, EDITED).replace(" def k():", " def gone():")  # hunk 3: not there
    done = backport.capture_diff(udiff.parse(text), lambda _rel: PRISTINE, None, "pkg 1.0")
    assert done.files == []  # hunk 2 alone is fine, but a spec without the others is not made
    assert [r.to_json() for r in done.refused] == [
        {
            "file": "pkg/m.py",
            "hunk": 1,
            "header": "@@ -2,7 +2,7 @@",
            "lines": [2, 8],
            "reason": "cannot be captured: no combination of spec ops reproduces this edit "
            "(every candidate, down to whole top-level statements, missed its anchor or gave "
            "another AST)",
        },
        {
            "file": "pkg/m.py",
            "hunk": 3,
            "header": "@@ -30,4 +30,4 @@",
            "lines": [30, 33],
            "reason": "does not apply to pkg 1.0: its old lines are not in the file",
        },
    ]
    err = backport.refused(done)
    assert err.exit_code == 2  # a hunk made against another release: bad input, as before
    assert err.message.count("pkg/m.py: hunk ") == 2
    assert err.message.startswith("pkg/m.py: hunk 1 (@@ -2,7 +2,7 @@, lines 2-8) cannot be")


def test_a_hand_edit_is_taken_hunk_by_hunk() -> None:
    hunks = list(enumerate(refusals.hunks_of("pkg/m.py", PRISTINE, EDITED), 1))
    assert [h.header for _n, h in hunks] == [
        "@@ -2,7 +2,7 @@",
        "@@ -16,7 +16,7 @@",
        "@@ -30,4 +30,4 @@",
    ]
    each = backport.attempt(PRISTINE, "pkg/m.py", None)
    got = refusals.uncaptured("pkg/m.py", PRISTINE, hunks, each, "the file's reason")
    assert [(r.number, r.first, r.last) for r in got] == [(1, 2, 8)]
    assert refusals.Refused(got, "h").exit_code == 1  # every hunk applies: the capture failed
    # the others are captured alone: the refusal is about hunk 1 only
    assert capture(
        PRISTINE, udiff.place(PRISTINE, udiff.FilePatch("m", "m", [hunks[1][1]]))[0], "m"
    )


def test_hunks_that_capture_alone_but_not_together_are_named_together() -> None:
    hunks = list(enumerate(refusals.hunks_of("pkg/m.py", PRISTINE, EDITED), 1))
    got = refusals.uncaptured("pkg/m.py", PRISTINE, hunks[1:], lambda _text: None, "why")
    assert [r.number for r in got] == [2, 3]
    assert all(r.reason.endswith("(each can alone): why") for r in got)
