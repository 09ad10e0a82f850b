"""A window judged against the gate table (patcher.serving.gates: GATES): each set gate's
verdict, passed, failed or undecided, with the words the report shows. A ratio gate compares
with the control hosts' window when there is one, else with the host's own baseline; with a
confidence level the row's own evidence function decides, and at the window's last look an
undecided gate fails as "not enough evidence", which says so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from patcher.serving import gates, stats
from patcher.serving.gates import (
    BASELINE,
    CEILING,
    CONTROL,
    RATIO,
    Gates,
    Look,
    Row,
    shown,
    tail,
)
from patcher.serving.measures import Measures


@dataclass(frozen=True)
class Gate:
    name: str
    ok: bool
    value: float | None
    threshold: float
    detail: str
    compared_with: str | None = None  # CONTROL or BASELINE, for a ratio gate
    quantity: str = ""  # what was judged (Row.quantity), in words
    unit: str = ""  # and in which unit (Row.unit)
    evidence: stats.Evidence | None = None
    pending: bool = False  # undecided, and the window may still grow (judge's `last`)
    # The report's chart of the gate: the window's per-interval series it reads (Row.series)
    # and its threshold in that series' unit (a ratio's: the limit x the reference's value).
    series: str = ""
    line: float | None = None

    @property
    def extend(self) -> bool:
        return self.pending

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "ok": self.ok,
            "value": None if self.value is None else round(self.value, 4),
            "threshold": self.threshold,
            "detail": self.detail,
        }
        if self.compared_with is not None:
            out["compared_with"] = self.compared_with
        if self.quantity:
            out["quantity"], out["unit"] = self.quantity, self.unit
        if self.evidence is not None:
            out["evidence"] = self.evidence.to_json()
        if self.series:
            out["series"] = self.series
            out["line"] = None if self.line is None else float(f"{self.line:.5g}")
        return out


def judge(
    before: Measures | None,
    after: Measures,
    thresholds: Gates,
    control: Measures | None = None,
    last: bool = True,
) -> list[Gate]:
    """Every gate that is set, in GATES order. `control`: the control hosts' window (the
    reference of the ratio gates; else `before`). With `thresholds.confidence`, a gate whose
    evidence is short is EXTEND (`Gate.extend`) unless `last` (the window cannot grow any
    more), where it fails: "not enough evidence"."""
    ref, against = (control, CONTROL) if control is not None else (before, BASELINE)
    out = []
    for row in gates.GATES:  # read when judged: the table is the one source
        limit = thresholds.limit(row.key)
        if limit is None:
            continue
        gate = _one(row, limit, after, ref, against, thresholds, last)
        out.append(replace(gate, series=row.series, line=_line(row, limit, ref)))
    return out


def _line(row: Row, limit: float, ref: Measures | None) -> float | None:
    """The threshold where the gate's series is drawn: the limit itself, or for a ratio the
    limit times the reference's value over its whole window (None: the reference has none)."""
    if row.kind != RATIO:
        return limit
    base = row.value(row, ref) if ref is not None else None
    return None if base is None else limit * base


def _missing(row: Row, limit: float, thresholds: Gates, why: str, against: str | None) -> Gate:
    ok = thresholds.allow_no_traffic
    text = f"cannot be computed: {why}" + ("; allowed (--allow-no-traffic)" if ok else "")
    return Gate(row.name, ok, None, limit, text, against, row.quantity, row.unit)


def _one(
    row: Row,
    limit: float,
    after: Measures,
    ref: Measures | None,
    against: str,
    thresholds: Gates,
    last: bool,
) -> Gate:
    cmp = against if row.kind == RATIO else None
    value = _value(row, after, ref, against)
    if isinstance(value, str):
        return _missing(row, limit, thresholds, value, cmp)
    suffix = f" vs {against}" if cmp else ""
    counts = tail(row, limit, after, ref) if row.kind == RATIO and row.latency and ref else None
    what = (row.quantity, row.unit)
    if thresholds.confidence is None:
        # A latency ratio is judged by the counts (its share over the bound, Tail.ok); any
        # other gate by its value against the limit.
        ok = counts.ok if counts else value >= limit if row.at_least else value <= limit
        sign = (">=" if ok else "<") if row.at_least else ("<=" if ok else ">")
        text = f"{shown(row, value, limit)} {sign} {row.show(limit)}{suffix}"
        if counts:
            text += f" ({counts.text(row, limit, against)})"
            if ok != (value <= limit):  # a quantile in +Inf: its highest finite bound
                text += "; a quantile in the +Inf bucket reads as the highest finite bound"
        return Gate(row.name, ok, value, limit, text, cmp, *what)
    level = thresholds.level or thresholds.confidence
    ev = row.evidence(row, limit, after, ref, Look(level, thresholds.rule, against == CONTROL))
    if ev is None:  # no statistic for this measure: the point judgement, said so
        ok = value >= limit if row.at_least else value <= limit
        sign = (">=" if ok else "<") if row.at_least else ("<=" if ok else ">")
        text = f"{shown(row, value, limit)} {sign} {row.show(limit)}{suffix} (no samples to test)"
        return Gate(row.name, ok, value, limit, text, cmp, *what)
    numbers = ev.numbers()
    if row.kind == CEILING and ev.low is not None and ev.high is not None:
        # what the interval is of
        numbers = f"n={ev.n:g} {row.observations}, share over it {ev.low:.3f}..{ev.high:.3f}"
    if counts:
        numbers = f"{counts.text(row, limit, against)}; {numbers}"
    said = _Said(shown(row, value, limit), row.show(limit) + suffix, numbers, thresholds.confidence)
    ok, text = _decided(row, ev, said, last)
    pending = ev.decision not in (stats.PASS, stats.FAIL) and not last
    return Gate(row.name, ok, value, limit, text, cmp, *what, ev, pending=pending)


def _value(row: Row, after: Measures, ref: Measures | None, against: str) -> float | str:
    """The row's value in the window (over the reference's, for a ratio), or why there is
    none: the window's, or the reference's, has no such number."""
    value = row.value(row, after)
    missing = row.why(row, after) or f"no {row.name} in the window"
    if row.kind == RATIO:
        base = row.value(row, ref) if ref is not None else None
        if base is None or base <= 0:
            why = f"no {row.quantity} from the control hosts" if against == CONTROL else ""
            why = why or f"no baseline {row.quantity}"
            return why + (f" ({row.why(row, ref)})" if ref is not None else "")
        return missing if value is None else value / base
    return missing if value is None else value


class _Said(NamedTuple):
    """A judged gate's words: its value and limit as shown (the limit with " vs control"),
    the evidence's numbers, the confidence asked for."""

    value: str
    limit: str
    numbers: str
    confidence: float


def _decided(row: Row, ev: stats.Evidence, said: _Said, last: bool) -> tuple[bool, str]:
    """(passed, detail) of a gate judged on evidence: passed, failed, or undecided (at the
    window's last look: not enough evidence, a failure that says so)."""
    if ev.decision == stats.PASS:
        sign = ">=" if row.at_least else "<="
        return True, f"{said.value} {sign} {said.limit} ({said.numbers})"
    if ev.decision == stats.FAIL:
        sign = "<" if row.at_least else ">"
        return False, f"{said.value} {sign} {said.limit} ({said.numbers})"
    if last:
        return False, (
            f"not enough evidence: {said.value} against {said.limit} "
            f"({said.numbers}, confidence {said.confidence:g})"
        )
    return False, f"{said.value} against {said.limit}: undecided ({said.numbers})"


def undecided(results: Sequence[Gate]) -> bool:
    """Whether the window should go on: a gate's evidence is short and none failed."""
    return any(g.extend for g in results) and not any(not g.ok and not g.extend for g in results)


def gates_detail(results: Sequence[Gate]) -> tuple[bool, str]:
    """(all passed, one line): the failed gates first, they are what the operator reads."""
    if not results:
        return True, "no gate set (the spec's [metrics] table or --min-acceptance ...)"
    failed = [g for g in results if not g.ok]
    parts = [f"{g.name} {g.detail}" for g in failed + [g for g in results if g.ok]]
    head = "undecided: " if undecided(results) else "serves worse: " if failed else ""
    return not failed, head + "; ".join(parts)
