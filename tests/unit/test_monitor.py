"""Bare `vpatch status` as a monitor (patcher/plan/monitor.py), pinned by data: tests/cases/status/.

A case is a host as bare status sees it: the journal's specs (`from_plan`: a planner case in
tests/cases/plan/, run through `status_journal`, so the monitor reads the planner's own
words), the baked specs (`baked`: the inspect answer's list), the last rollout step and the
unverified writes; `expect` names every state the host is in and bare status's exit code.
Every row of the table (monitor.STATES, rendered into docs/reference/json.md) has a case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patcher.commands import _docgen
from patcher.plan import monitor
from patcher.result import host_ok
from tests.support import feedcases, plancases

CASES = feedcases.STATUS


def _paths() -> list[Path]:
    return sorted(CASES.glob("*.json"))


@pytest.mark.parametrize("path", _paths(), ids=lambda p: p.stem)
def test_status_case(path: Path) -> None:
    raw = json.loads(path.read_text())
    host = feedcases.status_host(raw)
    unverified = feedcases.unverified(raw)
    states = monitor.states(host, unverified)
    assert states == raw["expect"]["states"], [(p.id, p.outcome, p.message) for p in host.patches]
    code = monitor.exit_code(states)
    assert code == raw["expect"]["exit"]
    host.attention = monitor.attention(host, unverified)
    assert host_ok("status", host) == (code == 0), host.attention
    for a in host.attention:  # what needs a person says what to run
        assert a.todo == monitor.BY_NAME[a.state].todo and a.todo and a.message
    if "upgraded" in states and "from_plan" in raw:  # the new release's hashes, not the old
        case = plancases.load(plancases.CASES / f"{raw['from_plan']}.json")
        [st] = case.facts.journal.values()
        [f] = host.patches[0].files
        assert (f.before_sha256, f.after_sha256) == (st.record_sha256, st.current)


def test_every_state_has_a_case_and_a_row_in_the_docs() -> None:
    seen: set[str] = set()
    for path in _paths():
        seen.update(json.loads(path.read_text())["expect"]["states"])
    assert seen == set(monitor.BY_NAME), set(monitor.BY_NAME) ^ seen
    table = _docgen.status_states()
    for st in monitor.STATES:
        assert f"| `{st.name}` | {st.exit} |" in table
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "json.md").read_text()
    assert "<!-- vpatch:status-states -->" in page
    assert all((st.exit == 0) == (st.todo == "") for st in monitor.STATES)
