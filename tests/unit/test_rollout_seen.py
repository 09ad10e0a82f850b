"""What a rollout step left on the host (patcher/agent/seen.py): stamped by the agent on each
step entry it appends, answered for now by an inspect asked `seen_for`; --resume compares the
two (patcher.rollout.resume.changes, golden cases in tests/cases/rollout/resume/)."""

from __future__ import annotations

import json
from pathlib import Path

from patcher.agent import handle, protocol, seen

APPLY = {"action": "apply", "spec": "s", "txn": "t1"}


def test_the_snapshot_keeps_the_files_of_the_rollouts_specs() -> None:
    state = {
        "/env/a.py": {"applied": {"s": APPLY, "other": {"txn": "t0"}}, "current": "a" * 64},
        "/env/b.py": {"applied": {"other": {"txn": "t0"}}, "current": "b" * 64},
        "/env/c.py": {"applied": {}, "current": "c" * 64},
    }
    procs = [{"pid": 7, "started": "T7", "cmdline": "python serve"}]
    assert seen.snapshot(state, ["s"], procs) == {
        "files": {"/env/a.py": {"sha256": "a" * 64, "applied": {"s": "t1"}}},
        "server": [[7, "T7"]],
    }
    assert seen.snapshot(state, ["s"], None) == {
        "files": {"/env/a.py": {"sha256": "a" * 64, "applied": {"s": "t1"}}}
    }


def test_the_agent_stamps_each_step_and_answers_the_same_for_now(tmp_path: Path) -> None:
    sdir = str(tmp_path / "state")
    for step in ("health", "window"):
        entry = protocol.step_entry(run="r1", step=step, ok=True, specs=["s"])
        assert handle(protocol.step_request(entry, sdir))["ok"]
    lines = [json.loads(x) for x in (tmp_path / "state" / "journal.jsonl").read_text().splitlines()]
    health, window = lines[-2:]
    assert health["seen"] == {"files": {}}  # no server: the health step's is not kept
    assert window["seen"]["files"] == {} and isinstance(window["seen"]["server"], list)
    ans = handle({"op": "inspect", "packages": {}, "state_dir": sdir, "seen_for": ["s"]})
    assert ans["ok"] and ans["seen"]["files"] == {} and isinstance(ans["seen"]["server"], list)
    assert "seen" not in handle({"op": "inspect", "packages": {}, "state_dir": sdir})


def test_a_step_entry_with_a_seen_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    entry = dict(protocol.step_entry(run="r1", step="window", ok=True, specs=["s"]), seen=[1])
    from patcher.agent import journal

    assert journal._step_error(entry) == "seen is not an object"
    assert (
        journal._step_error(dict(entry, seen={}, undecided="yes")) == "undecided is not a boolean"
    )
