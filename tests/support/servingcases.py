"""The golden cases of tests/cases/serving/, run through patcher.serving's pure functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patcher.serving import gates, measures
from patcher.serving.model import Counters

CASES = Path(__file__).resolve().parent.parent / "cases" / "serving"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def gate_cases() -> list[Path]:
    return sorted((CASES / "gates").glob("*.json"))


def window(scrapes: list[list[Any]] | None) -> measures.Measures | None:
    """A recorded series of scrapes, [seconds, counters] each, as a window's measures."""
    if scrapes is None:
        return None
    return measures.measure_series([(float(t), Counters.of(c)) for t, c in scrapes])


def run_gates(case: dict[str, Any]) -> dict[str, Any]:
    g = dict(case["gates"])
    confidence = g.pop("confidence", None)
    judged = gates.judge(
        window(case["baseline"]),
        window(case["after"]),
        gates.Gates.make(confidence=confidence, **g),
        window(case["control"]),
        last=case["last"],
    )
    ok, detail = gates.gates_detail(judged)
    return {
        "ok": ok,
        "extend": gates.undecided(judged),
        "detail": detail,
        "compared_with": sorted({j.compared_with for j in judged if j.compared_with}),
    }
