"""When the agent ends its session with an answer (patcher/agent/chain.py `ends`,
protocol.LAST): only where the caller said it sends nothing more and everything that ran went
well; a chain decides by its own last request. Pure cases."""

from __future__ import annotations

from typing import Any

import pytest

from patcher.agent import chain

OK: dict[str, Any] = {"ok": True}
INSPECT = {"op": "inspect", "packages": {}}
COMMIT = {"op": "commit"}
CLOSING = {"op": "inspect", "packages": {}, "last": True}
CHECKS_OK = {"ok": True, "checks": [{"name": "a", "ok": True}]}
CHECKS_BAD = {"ok": True, "checks": [{"name": "a", "ok": True}, {"name": "b", "ok": False}]}

CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("a plain request", INSPECT, OK, False),
    ("last, went well", dict(INSPECT, last=True), OK, True),
    ("last must be true itself", dict(INSPECT, last=1), OK, False),
    ("last, an error", dict(INSPECT, last=True), {"ok": False, "kind": "os"}, False),
    ("last, incomplete: a repair follows", dict(INSPECT, last=True), dict(OK, incomplete=1), False),
    ("last, a check failed", {"op": "verify", "last": True}, CHECKS_BAD, False),
    ("last, every check passed", {"op": "verify", "last": True}, CHECKS_OK, True),
    (
        "a guess that hit, its chain ran well and ends with last",
        dict(INSPECT, then_if={"fp": [COMMIT, CLOSING]}),
        dict(OK, fingerprint="fp", then=[OK, OK]),
        True,
    ),
    (
        "a guess that missed: the commit follows (the request's own last does not count)",
        dict(INSPECT, last=True, then_if={"fp": [COMMIT, CLOSING]}),
        dict(OK, fingerprint="other"),
        False,
    ),
    (
        "a chain cut short by a failed commit",
        dict(INSPECT, then_if={"fp": [COMMIT, CLOSING]}),
        dict(OK, fingerprint="fp", then=[{"ok": False}]),
        False,
    ),
    (
        "a chain whose checks failed: the undo follows",
        dict(INSPECT, then_if={"fp": [COMMIT, {"op": "verify", "last": True}]}),
        dict(OK, fingerprint="fp", then=[OK, CHECKS_BAD]),
        False,
    ),
    (
        "a chain without last at its end",
        dict(INSPECT, then_if={"fp": [COMMIT, INSPECT]}),
        dict(OK, fingerprint="fp", then=[OK, OK]),
        False,
    ),
    (
        "then: the two-step path's commit and its closing inspect",
        dict(COMMIT, then=[CLOSING]),
        dict(OK, then=[OK]),
        True,
    ),
    ("then, empty", dict(COMMIT, last=True, then=[]), dict(OK, then=[]), False),
    ("not a request", [], OK, False),
]


@pytest.mark.parametrize(
    ("request_", "answer", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_ends(request_: Any, answer: dict[str, Any], expected: bool) -> None:
    assert chain.ends(request_, answer) is expected
