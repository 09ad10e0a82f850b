"""patcher/output/inert.py: what a host or a journal wrote reaches the operator's terminal inert.
Golden cases for the sanitizer, then every human printer given hostile strings: no raw control,
ESC or bidi character comes out, and --json keeps the raw text (escaped by json)."""

from __future__ import annotations

import io
import json

import pytest

from patcher.authoring import handedit
from patcher.commands import _ensureview
from patcher.output import report
from patcher.output.inert import clean, line
from patcher.result import FileChange, HostResult, PatchResult, ProbeResult, RunResult

GOLDEN = [
    ("plain text\twith tab\n", "plain text\twith tab\n"),
    ("\x1b[2J\x1b]0;owned\x07", "\\x1b[2J\\x1b]0;owned\\x07"),
    ("carriage\rreturn", "carriage\\x0dreturn"),
    ("nul\x00 del\x7f c1\x9b", "nul\\x00 del\\x7f c1\\x9b"),
    (
        "x = 1  # \u202e } \u2066if admin:\u2069 \u202c",
        "x = 1  # \\u202e } \\u2066if admin:\\u2069 \\u202c",
    ),
    ("\u202a\u202b\u202d\u2067\u2068", "\\u202a\\u202b\\u202d\\u2067\\u2068"),
    ("lrm\u200e rlm\u200f alm\u061c", "lrm\\u200e rlm\\u200f alm\\u061c"),
    ("zw\u200b\u200c\u200d bom\ufeff wj\u2060", "zw\\u200b\\u200c\\u200d bom\\ufeff wj\\u2060"),
    ("ls\u2028ps\u2029", "ls\\u2028ps\\u2029"),
    ("naïve café 日本 ✓", "naïve café 日本 ✓"),  # ordinary text stays as it is
]

HOSTILE = "evil\x1b[31m\u202eid\u2066\r"
RAW = ("\x1b", "\u202e", "\u2066", "\r")


@pytest.mark.parametrize(("raw", "shown"), GOLDEN)
def test_golden(raw: str, shown: str) -> None:
    assert clean(raw) == shown
    assert line(raw) == shown.replace("\n", "\\n")


def test_every_escaped_character_is_visible_and_nothing_else_changes() -> None:
    for c in map(chr, range(0x3000)):
        got = clean(c)
        if got != c:
            assert got.startswith("\\") and got.isprintable() and got.isascii()
    assert line("a\nb") == "a\\nb" and clean("a\nb") == "a\nb"


def hostile_run() -> RunResult:
    host = HostResult(target="h" + HOSTILE, error="agent said " + HOSTILE, python=HOSTILE)
    host.warnings = ["journal line 3: " + HOSTILE]
    host.restart_required = [{"pid": 1, "cmdline": HOSTILE}]
    p = PatchResult("id" + HOSTILE, "pkg" + HOSTILE, "1" + HOSTILE, "drifted", HOSTILE)
    p.files = [FileChange("/env/" + HOSTILE, "a" * 64, "b" * 64, "+x = 1  " + HOSTILE + "\n")]
    p.probes = [ProbeResult(HOSTILE, False, HOSTILE)]
    host.patches = [p]
    return RunResult(command="status", ok=False, hosts=[host, HostResult(target="ok", ok=True)])


def test_human_reports_are_inert_and_json_keeps_the_raw_text() -> None:
    result = hostile_run()
    out, err, ensure_out, ensure_err = (io.StringIO() for _ in range(4))
    report.render_human(result, show_diff=True, out=out)
    report.render_problems(result, err)
    _ensureview.render_ensure(result, ensure_out, ensure_err)
    for text in (out.getvalue(), err.getvalue(), ensure_err.getvalue()):
        assert "\\u202e" in text, text
        assert not any(c in text for c in RAW), ascii(text)
    doc = io.StringIO()
    report.render_json(result, doc)
    raw = json.loads(doc.getvalue())
    assert raw["hosts"][0]["target"] == "h" + HOSTILE
    assert raw["hosts"][0]["patches"][0]["id"] == "id" + HOSTILE
    assert "\x1b" not in doc.getvalue()  # json escapes ESC itself


def test_the_diff_of_a_host_file_is_inert() -> None:
    f = handedit.FileDiff(
        "pkg/m" + HOSTILE,
        "/env/pkg/m.py",
        "modified",
        "s" * 64,
        "r" * 64,
        handedit.WHEEL,
        "x = 1\n",
        "x = 1  # \u202e hidden\x1b[8m\n",
    )
    scan = handedit.HostScan("h" + HOSTILE, "1.0", [f])
    out = io.StringIO()
    handedit.render("pkg", [scan], out)
    text = out.getvalue()
    assert "\\u202e hidden\\x1b[8m" in text and not any(c in text for c in RAW), ascii(text)
    assert (
        "# \u202e hidden\x1b[8m" in handedit.to_json("pkg", [scan])["groups"][0]["files"][0]["diff"]
    )
