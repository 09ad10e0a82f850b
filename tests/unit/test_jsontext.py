"""The report's fast JSON text is json.dumps(doc, indent=2) byte for byte, and RunResult's
document is asdict()'s, whatever the values (the fast paths fall back, never differ)."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest

from patcher.output import jsontext
from patcher.result import FileChange, HostResult, PatchResult, ProbeResult, RunResult


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


DOCS: list[Any] = [
    {},
    [],
    "s",
    3,
    None,
    True,
    1.5,
    {"a": {}, "b": [], "c": [{}], "d": [[]]},
    {"text": 'é\u2028\x00\x1b[31m"\\\n', "n": -12, "f": float("nan"), "i": float("inf")},
    {"t": (1, (2, 3), ()), "big": 10**30, "neg": -0.0, "tiny": 1e-300},
    {"nested": [[1, [2, [3, {"k": [None, False]}]]]]},
    {1: "int key", None: "none key", 2.5: "float key"},  # json's own: keys made strings
    {"enum": Color.RED, "sub": Name("x")},  # subclasses: json's own
    [Name("x"), {"k": Color.RED}],
]


@pytest.mark.parametrize("doc", DOCS)
def test_same_text_as_json(doc: Any) -> None:
    assert jsontext.dumps(doc) == json.dumps(doc, indent=2)


def _result() -> RunResult:
    files = [FileChange("/x/a.py", "0" * 64, "1" * 64, "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n")]
    probes = [ProbeResult("p", True, "ok ✓", 0.25)]
    patch = PatchResult("id", "pkg", None, "applied", "m", 0, files, probes)
    host = HostResult(
        "h1", True, None, None, "py (3.11)", [{"pid": 7, "cmd": ["a", "b"]}], [patch], 0.125
    )
    host.rollout = {"verdict": "kept", "phases": [{"name": "apply", "t": (1.0, 2.0)}]}
    bad = HostResult("h2", error="e\x07", hint="h", uid=0, dropped_from=None)
    return RunResult("apply", False, [host, bad], {"libcst_parses": 0})


def test_run_result_document_is_asdicts() -> None:
    r = _result()
    want = {"schema_version": 1, **dataclasses.asdict(r)}
    got = r.to_json()
    assert got == want
    assert json.dumps(got) == json.dumps(want)
    assert jsontext.dumps(got) == json.dumps(want, indent=2)
    # a copy, as asdict's: changing the document leaves the result alone
    got["hosts"][0]["restart_required"][0]["pid"] = 8
    assert r.hosts[0].restart_required[0]["pid"] == 7
