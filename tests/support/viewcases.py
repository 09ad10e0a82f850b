"""The golden cases of a rollout's events and live view (tests/cases/rollout/events/,
tests/cases/rollout/view/), run through patcher.rollout.events and patcher.rollout.liveview.

- `events/*.json`: a window so far (`baseline` and `after`: two scrapes each, as the gate
  cases give them; `control` likewise, optional), the `gates` and `phase` (`baseline`: not
  judged; `window`: judged with the window not over); `expect` the evidence a scrape event
  carries.
- `view/*.json`: `events` in (as the stream's lines: JSON objects), the clock `now` (ISO)
  and the terminal's `width`; `expect.screen` the live view's lines then, `expect.plain`
  the plain lines of a log for the same events, `expect.still` the lines a log then adds
  for hosts whose phase said nothing for a while.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patcher.rollout import events, liveview
from patcher.serving.gates import BASELINE, CONTROL, Gates
from patcher.serving.judging import judge
from tests.support.rolloutcases import CASES, _window


def event_cases() -> list[Path]:
    return sorted((CASES / "events").glob("*.json"))


def view_cases() -> list[Path]:
    return sorted((CASES / "view").glob("*.json"))


def run_event(case: dict[str, Any]) -> dict[str, Any]:
    """The evidence of the case's window so far, as its scrape event carries it (a `read`
    case: the event read back)."""
    if "read" in case:
        return events.from_json(case["read"]).to_json()
    after = _window(case["after"])
    if case["phase"] == events.BASELINE:
        return events.evidence_of(after).to_json()
    before = _window(case["baseline"])
    control = _window(case["control"]) if case.get("control") else None
    gates = Gates.make(**case["gates"])
    judged = judge(before, after, gates, control, last=False)
    ref, against = (control, CONTROL) if control is not None else (before, BASELINE)
    return events.evidence_of(after, judged, ref, against).to_json()


def run_view(case: dict[str, Any]) -> dict[str, Any]:
    """The screen at `now` after every event, and the plain lines of the same events; each
    event read back as a watcher reads it (events.from_json)."""
    board, plain, lines = liveview.Board(), liveview.Plain(), []
    for doc in case["events"]:
        ev = events.from_json(doc)
        liveview.fold(board, ev)
        said = plain.line(ev)
        if said is not None:
            lines.append(said)
    now = liveview.epoch(case["now"])
    screen = liveview.screen(board, now, case["width"])
    return {"screen": screen, "plain": lines, "still": plain.still(board, now)}


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc
