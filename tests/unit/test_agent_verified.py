"""protocol.VERIFIED (issue 39 item 3): which applied specs were written with their checks
pending and never verified (journal.unverified), and a compaction that keeps the `verified`
line of every transaction it keeps, and only those (compact.live)."""

from __future__ import annotations

import json

from patcher.agent import compact, journal, protocol

P = "/env/lib/python3.11/site-packages/servekit/config.py"
A, B, C = "1" * 64, "2" * 64, "3" * 64


def _apply(txn: str, before: str, after: str, pending: bool = True) -> dict[str, object]:
    e = {"action": "apply", "txn": txn, "path": P, "spec": "x", "before": before, "after": after}
    return {**e, "verify": protocol.PENDING} if pending else e


def _rollback(txn: str) -> dict[str, object]:
    return {"action": "rollback", "txn": txn, "path": P, "spec": "x", "before": B, "after": A}


def _raw(entries: list[dict[str, object]]) -> bytes:
    return b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in entries)


def _unverified(entries: list[dict[str, object]]) -> list[list[str]]:
    verified: list[journal.Entry] = []
    parsed = journal.parse(_raw(entries), [], [], verified)
    return journal.unverified(parsed, verified, journal.fold(parsed, {}))


def test_a_pending_write_is_unverified_until_its_verified_line() -> None:
    written = [_apply("t1", A, B), protocol.marker("t1")]
    assert _unverified(written) == [["x", "t1"]]
    assert _unverified([*written, protocol.verified_entry("t1", "x")]) == []
    assert _unverified([*written, protocol.verified_entry("t0", "x")]) == [["x", "t1"]]
    assert _unverified([_apply("t1", A, B, pending=False), protocol.marker("t1")]) == []
    rolled = [*written, _rollback("t2"), protocol.marker("t2")]
    assert _unverified(rolled) == []  # not applied any more: nothing to verify


def test_compaction_keeps_the_verified_line_of_a_kept_transaction_only() -> None:
    entries = [
        _apply("t1", A, B),
        protocol.marker("t1"),
        protocol.verified_entry("t1", "x"),
        _rollback("t2"),
        protocol.marker("t2"),
        _apply("t3", A, C),
        protocol.marker("t3"),
        protocol.verified_entry("t3", "x"),
    ]
    got = compact.live(_raw(entries))
    assert got is not None
    kept = [json.loads(line) for line in got[0]]
    assert [(e["action"], e["txn"]) for e in kept] == [
        ("apply", "t3"),
        ("commit", "t3"),
        ("verified", "t3"),
    ]
    assert _unverified(kept) == []
