"""The relations the journal now models (issue 25): the three-way merge that keeps hand edits
apart from vpatch's, the optional apply-entry keys (relies_on, level, base) folded by the agent
while older journals fold as before, and a failed check after --adopt taking the adoption back.
"""

from __future__ import annotations

from patcher.agent import journal, protocol
from patcher.plan import linemerge
from patcher.plan.apply import plan_apply
from patcher.plan.undo import plan_undo, undone, verify_failed
from patcher.result import ProbeResult
from tests.support import plancases

A = "".join(f"line {i}\n" for i in range(10))


def test_merge_takes_both_sides_where_they_touch_other_lines() -> None:
    ours = A.replace("line 1\n", "line 1 hand\n") + "tail\n"
    theirs = A.replace("line 7\n", "")
    merged, conflicts = linemerge.merge(A, ours, theirs)
    assert conflicts == []
    assert merged == theirs.replace("line 1\n", "line 1 hand\n") + "tail\n"


def test_merge_takes_a_change_both_sides_made_once() -> None:
    both = A.replace("line 4\n", "")
    merged, conflicts = linemerge.merge(A, both + "x\n", both)
    assert (merged, conflicts) == (both + "x\n", [])


def test_merge_refuses_one_line_changed_two_ways() -> None:
    merged, conflicts = linemerge.merge(
        A, A.replace("line 4", "line four"), A.replace("line 4\n", "")
    )
    assert merged is None and conflicts == ["line 5"]


def test_merge_refuses_an_insertion_at_the_edge_of_the_other_change() -> None:
    ours = A.replace("line 5\n", "line 5\nhand\n")
    theirs = A.replace("line 6\n", "six\n")
    assert linemerge.merge(A, ours, theirs)[0] is None


def _apply(spec: str, before: str | None, after: str, txn: str, **kw: object) -> dict[str, object]:
    e = protocol.apply_entry(
        spec=spec,
        spec_hash="d",
        package="pkg",
        version="1.0",
        file="m.py",
        path="/p/m.py",
        before=before,
        after=after,
        edits=[],
        **kw,
    )  # type: ignore[arg-type]
    return dict(e, txn=txn)


def test_old_entries_fold_as_before_and_new_keys_are_optional() -> None:
    """An entry without the new keys carries none of them, and folds exactly as before."""
    old = _apply("x", "b0", "h1", "t1")
    assert not {"relies_on", "level", "base"} & set(old)
    entries = [old, protocol.marker("t1")]
    assert journal.parse(b"".join(_line(e) for e in entries)) == entries
    st = journal.fold(entries, {"/p/m.py": "h1"})["/p/m.py"]
    assert (st["base"], st["expected"], list(st["applied"])) == ("b0", "h1", ["x"])


def test_a_new_base_moves_the_fold_base_and_relies_on_is_kept() -> None:
    entries = [
        _apply("x", "b0", "h1", "t1", level="static"),
        protocol.marker("t1"),
        _apply("x", "h1d", "h2", "t2", base="b1"),
        _apply("y", "h2", "h2", "t2", relies_on=["x"]),
        protocol.marker("t2"),
    ]
    st = journal.fold(journal.parse(b"".join(_line(e) for e in entries)), {"/p/m.py": "h2"})
    st = st["/p/m.py"]
    assert (st["base"], st["expected"]) == ("b1", "h2")
    assert st["applied"]["y"]["relies_on"] == ["x"]
    assert list(st["applied"]) == ["x", "y"]


def test_ill_formed_new_keys_cost_their_line() -> None:
    bad = [
        dict(_apply("x", "b", "a", "t"), relies_on="x"),
        dict(_apply("x", "b", "a", "t"), base=3),
    ]
    warnings: list[str] = []
    assert journal.parse(b"".join(_line(e) for e in bad), warnings) == []
    assert len(warnings) == 2


def _line(e: object) -> bytes:
    import json

    return json.dumps(e).encode() + b"\n"


def test_adopted_spec_whose_check_fails_is_taken_back() -> None:
    """--adopt writes nothing, so undoing it is its rollback entry alone; the spec is failed,
    not left `applied` (issue 25 case 8)."""
    case = plancases.load(plancases.CASES / "apply_adopt.json")
    plan = plan_apply(case.specs, case.facts, case.opts)
    sid = case.specs[0].id
    assert plan.result(sid).outcome == "applied" and plan.writes == []
    back = plan_undo(plan, {sid}, "verify failed")
    assert back.writes == []
    assert [e["action"] for e in back.entries] == [protocol.ROLLBACK]
    failed = {sid: ProbeResult("probe", False, "boom")}
    undone(plan, back, failed, verify_failed)
    assert plan.result(sid).outcome == "failed"
    folded = journal.fold(
        [dict(e, txn="t1") for e in plan.entries]
        + [protocol.marker("t1")]
        + [dict(e, txn="t2") for e in back.entries]
        + [protocol.marker("t2")],
        {},
    )
    assert all(not st["applied"] for st in folded.values())
