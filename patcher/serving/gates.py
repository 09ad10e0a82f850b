"""The gate table: every gate a rollout can set is one row of GATES (its `[metrics]` key,
which way it bounds, how it is measured and judged), so a new gate is one row here, one
measure in patcher/serving/measures.py and one `[metrics]` key in patcher/specs/model.py.

Two ways to judge, one table:
- without `--confidence` (and without control hosts) a gate compares the window's numbers
  with its threshold, as a point: the window's acceptance, the after/before ratio of tokens/s;
- with a confidence level, a gate decides only on enough evidence: a proportion by its
  Wilson interval, a rate or a latency by a rank test over per-interval samples against the
  control hosts' samples of the same window (else the baseline's: after vs before), and says
  EXTEND while the evidence is short (patcher.serving.stats).
Ratio gates compare with a reference: the control hosts when the rollout has some (traffic
that changed during the window changed theirs too), else the host's own baseline; every
judged gate says which (`compared_with`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from patcher.serving import histogram, stats
from patcher.serving.measures import QUANTILES, Measures
from patcher.serving.model import ITL, TTFT

CONTROL, BASELINE = "control", "baseline"
ABSOLUTE, RATIO, CEILING = "absolute", "ratio", "ceiling"


def pct(x: float) -> str:
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + " %"


def _x(x: float) -> str:
    return f"{x:.2f}x"


def _s(x: float) -> str:
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def _shown(row: Row, value: float, limit: float) -> str:
    """The measure as the gate's detail prints it: where its rounding reads the same as the
    limit's (1.504x against 1.5x: "1.50x > 1.50x"), four digits more say which side it is."""
    text = row.show(value)
    if value != limit and text == row.show(limit):
        text += f" ({value:.4g})"
    return text


@dataclass(frozen=True)
class Row:
    """One gate. `key`: the `[metrics]` key and the Gates field; `at_least`: the threshold is
    a floor (else a ceiling); `kind`: ABSOLUTE (the window's value), RATIO (over the
    reference's), CEILING (a latency quantile under a number of seconds); `value`: the point
    value from a window; `why`: the Measures.why key that says why it is missing."""

    name: str
    key: str
    at_least: bool
    kind: str
    value: Callable[[Measures], float | None]
    show: Callable[[float], str]
    why: str
    latency: str = ""  # the latency histogram a latency gate reads (model.TTFT, ...)


def _p99(key: str) -> Callable[[Measures], float | None]:
    return lambda m: m.latency.get(key, {}).get("p99")


GATES: tuple[Row, ...] = (
    Row(
        "acceptance",
        "min_acceptance_rate",
        True,
        ABSOLUTE,
        lambda m: m.acceptance_rate,
        pct,
        "acceptance",
    ),
    Row(
        "mean_acceptance_length",
        "min_mean_acceptance_length",
        True,
        ABSOLUTE,
        lambda m: m.mean_acceptance_length,
        lambda x: f"{x:.2f}",
        "acceptance",
    ),
    Row(
        "tokens_per_s_ratio",
        "min_tokens_per_s_ratio",
        True,
        RATIO,
        lambda m: m.tokens_per_s,
        _x,
        "tokens_per_s",
    ),
    Row("error_rate", "max_error_rate", False, ABSOLUTE, lambda m: m.error_rate, pct, "error_rate"),
    Row("ttft_p99_ratio", "max_ttft_p99_ratio", False, RATIO, _p99(TTFT), _x, TTFT, TTFT),
    Row("itl_p99_ratio", "max_itl_p99_ratio", False, RATIO, _p99(ITL), _x, ITL, ITL),
    Row("ttft_p99", "max_ttft_p99_s", False, CEILING, _p99(TTFT), _s, TTFT, TTFT),
    Row("itl_p99", "max_itl_p99_s", False, CEILING, _p99(ITL), _s, ITL, ITL),
)
KEYS = tuple(r.key for r in GATES)
_LABELS = {"tokens_per_s": "tokens/s", TTFT: "TTFT p99", ITL: "inter-token latency p99"}


@dataclass(frozen=True)
class Gates:
    """The thresholds a host's window must meet (a GATES key -> its value; absent: not
    checked), `allow_no_traffic`, and `confidence` (None: point judgements)."""

    limits: tuple[tuple[str, float], ...] = ()
    allow_no_traffic: bool = False
    confidence: float | None = None
    # How many times a window may be judged (its length, then each extension): every look
    # tests at (1 - confidence) / looks (Bonferroni), so that looking again and again until
    # something is significant keeps the whole window's error under 1 - confidence.
    looks: int = 1

    @property
    def level(self) -> float | None:
        """The confidence each look tests at."""
        if self.confidence is None:
            return None
        return 1 - (1 - self.confidence) / max(1, self.looks)

    def limit(self, key: str) -> float | None:
        return dict(self.limits).get(key)

    @classmethod
    def make(
        cls,
        allow_no_traffic: bool = False,
        confidence: float | None = None,
        looks: int = 1,
        **limits: float | None,
    ) -> Gates:
        unknown = set(limits) - set(KEYS)
        if unknown:
            raise TypeError(f"no such gate: {sorted(unknown)}")
        kept = tuple((k, float(v)) for k in KEYS if (v := limits.get(k)) is not None)
        return cls(kept, allow_no_traffic, confidence, looks)

    @classmethod
    def of(
        cls,
        tables: Iterable[Any],
        overrides: dict[str, float | None] | None = None,
        allow_no_traffic: bool = False,
        confidence: float | None = None,
        looks: int = 1,
    ) -> Gates:
        """The specs' `[metrics]` tables (each may be None), the strictest of each threshold
        (every spec of the rollout is on the same server), the command line's overrides."""
        rows = [t for t in tables if t is not None]
        limits: dict[str, float | None] = {}
        for r in GATES:
            vals = [v for t in rows if (v := getattr(t, r.key, None)) is not None]
            limits[r.key] = (max if r.at_least else min)(vals) if vals else None
        for k, v in (overrides or {}).items():
            if v is not None:
                limits[k] = v
        return cls.make(allow_no_traffic, confidence, looks, **limits)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: self.limit(k) for k in KEYS}
        out["allow_no_traffic"] = self.allow_no_traffic
        out["confidence"] = self.confidence
        out["looks"] = self.looks
        return out


@dataclass(frozen=True)
class Gate:
    name: str
    ok: bool
    value: float | None
    threshold: float
    detail: str
    compared_with: str | None = None  # CONTROL or BASELINE, for a ratio gate
    evidence: stats.Evidence | None = None
    pending: bool = False  # undecided, and the window may still grow (judge's `last`)

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
        if self.evidence is not None:
            out["evidence"] = self.evidence.to_json()
        return out


def judge(
    before: Measures | None,
    after: Measures,
    gates: Gates,
    control: Measures | None = None,
    last: bool = True,
) -> list[Gate]:
    """Every gate that is set, in GATES order. `control`: the control hosts' window (the
    reference of the ratio gates; else `before`). With `gates.confidence`, a gate whose
    evidence is short is EXTEND (`Gate.extend`) unless `last` (the window cannot grow any
    more), where it fails: "not enough evidence"."""
    ref, against = (control, CONTROL) if control is not None else (before, BASELINE)
    out = []
    for row in GATES:
        limit = gates.limit(row.key)
        if limit is None:
            continue
        out.append(_one(row, limit, after, ref, against, gates, last))
    return out


def _missing(row: Row, limit: float, gates: Gates, why: str, against: str | None) -> Gate:
    ok = gates.allow_no_traffic
    text = f"cannot be computed: {why}" + ("; allowed (--allow-no-traffic)" if ok else "")
    return Gate(row.name, ok, None, limit, text, against)


def _one(
    row: Row,
    limit: float,
    after: Measures,
    ref: Measures | None,
    against: str,
    gates: Gates,
    last: bool,
) -> Gate:
    value = row.value(after)
    why = after.why.get(row.why, "")
    cmp = against if row.kind == RATIO else None
    if row.kind == RATIO:
        base = row.value(ref) if ref is not None else None
        if base is None or base <= 0:
            label = _LABELS.get(row.why, row.why)
            if against == CONTROL:
                why = f"no {label} from the control hosts"
            else:
                why = f"no baseline {label}"
            if ref is not None:
                why += f" ({ref.why.get(row.why, '')})"
            return _missing(row, limit, gates, why, cmp)
        if value is None:
            return _missing(row, limit, gates, why or f"no {row.name} in the window", cmp)
        value = value / base
    elif value is None:
        return _missing(row, limit, gates, why or f"no {row.name} in the window", cmp)
    suffix = f" vs {against}" if cmp else ""
    if gates.confidence is None:
        ok = value >= limit if row.at_least else value <= limit
        sign = (">=" if ok else "<") if row.at_least else ("<=" if ok else ">")
        text = f"{_shown(row, value, limit)} {sign} {row.show(limit)}{suffix}"
        return Gate(row.name, ok, value, limit, text, cmp)
    ev = _evidence(row, limit, after, ref, gates.level or gates.confidence)
    if ev is None:  # no statistic for this measure: the point judgement, said so
        ok = value >= limit if row.at_least else value <= limit
        sign = (">=" if ok else "<") if row.at_least else ("<=" if ok else ">")
        text = f"{_shown(row, value, limit)} {sign} {row.show(limit)}{suffix} (no samples to test)"
        return Gate(row.name, ok, value, limit, text, cmp)
    numbers = ev.numbers()
    if (
        row.kind == CEILING and ev.low is not None and ev.high is not None
    ):  # what the interval is of
        numbers = f"n={ev.n:g} requests, share over it {ev.low:.3f}..{ev.high:.3f}"
    if ev.decision == stats.PASS:
        sign = ">=" if row.at_least else "<="
        text = f"{_shown(row, value, limit)} {sign} {row.show(limit)}{suffix} ({numbers})"
        return Gate(row.name, True, value, limit, text, cmp, ev)
    if ev.decision == stats.FAIL:
        sign = "<" if row.at_least else ">"
        text = f"{_shown(row, value, limit)} {sign} {row.show(limit)}{suffix} ({numbers})"
        return Gate(row.name, False, value, limit, text, cmp, ev)
    if last:
        text = (
            f"not enough evidence: {_shown(row, value, limit)} against {row.show(limit)}{suffix} "
            f"({numbers}, confidence {gates.confidence:g})"
        )
        return Gate(row.name, False, value, limit, text, cmp, ev)
    text = f"{_shown(row, value, limit)} against {row.show(limit)}{suffix}: undecided ({numbers})"
    return Gate(row.name, False, value, limit, text, cmp, ev, pending=True)


def _evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, confidence: float
) -> stats.Evidence | None:
    """The statistical answer for one gate; None when the window has no samples for it."""
    if row.name == "acceptance":
        if after.drafts <= 0 or after.acceptance_rate is None:
            return None
        # A draft's tokens are accepted together or not (a rejection ends the draft), so a
        # draft, not a token, is the independent trial: n = drafts, the conservative n.
        return stats.proportion_at_least(
            after.acceptance_rate * after.drafts, after.drafts, limit, confidence
        )
    if row.name == "mean_acceptance_length":
        if after.drafts <= 0 or after.draft_tokens <= 0 or after.acceptance_rate is None:
            return None
        k = after.draft_tokens / after.drafts
        ev = stats.proportion_at_least(
            after.acceptance_rate * after.drafts, after.drafts, (limit - 1) / k, confidence
        )
        lo, hi = ev.low, ev.high
        return stats.Evidence(
            ev.decision,
            ev.n,
            None if lo is None else 1 + k * lo,
            None if hi is None else 1 + k * hi,
            test="wilson",
        )
    if row.name == "error_rate":
        return stats.proportion_at_most(after.errors, after.finished, limit, confidence)
    if row.kind == CEILING:
        b = after.buckets.get(row.latency)
        if not b:
            return None
        above, total = histogram.share_above(limit, b)
        return stats.proportion_at_most(above, total, 1 - QUANTILES["p99"], confidence)
    if row.kind == RATIO and ref is not None:
        if row.latency:
            x, y = (
                after.latency_samples.get(row.latency, ()),
                ref.latency_samples.get(row.latency, ()),
            )
        else:
            x, y = after.samples, ref.samples
        if len(x) < stats.MIN_SAMPLES or len(y) < stats.MIN_SAMPLES:  # too few intervals yet
            return stats.Evidence(stats.EXTEND, min(len(x), len(y)), test="mann-whitney")
        test = stats.samples_at_least if row.at_least else stats.samples_at_most
        return test(x, y, limit, confidence)
    return None


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
