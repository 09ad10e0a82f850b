"""What a window of scrapes showed: the measures the gates judge (patcher.serving.gates) and
the report shows. A window is a series of scrapes (time, Counters); its totals are the sum
of each interval's increase, each series (engine x label set) reduced on its own before the
sum (model.increases: a series that went down restarted and counts from zero, Prometheus'
`sum(increase())`), its tokens/s samples one value per interval: what a rank test compares
with a control's samples over the same window. Latency is kept as the window's bucket counts
per histogram (`buckets`): a gate reads whatever quantile its row names from them, and
compares two windows by their counts (patcher.serving.gates), never by per-interval quantiles
(a few requests an interval put those on bucket edges).

A window also keeps its `series`: each interval's values (tokens/s, acceptance, mean
acceptance length, error rate, each latency's p99) for the report's charts
(patcher/output/htmlreport.py); at most MAX_POINTS of them, neighbours joined beyond that, so a
long window at a short --scrape-every costs the report no more. No gate reads them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from patcher.serving import histogram
from patcher.serving.model import Counters, increases

# The quantiles the report shows of each latency histogram (`latency`); no gate reads them: a
# gate reads its own row's quantile from `buckets`.
SUMMARY = {"p50": 0.5, "p99": 0.99}

# The most intervals a window's `series` keeps: beyond it, consecutive intervals are joined
# (their increases added) into at most this many, each still a true interval of the window.
# 40 draws a window's course and keeps a host's three windows near 20 kB of the report (an
# indented number is some 18 bytes; the live report is rewritten whole at every step).
MAX_POINTS = 40
# The latency quantile a window's `series` keeps per interval: the one the latency gates read
# (gates.latency_rows); a gate at another quantile has no chart (its table row stands).
SERIES_QUANTILES = {"p99": 0.99}


@dataclass(frozen=True)
class Measures:
    """What a window showed; None where it cannot be computed (said in `why`). The counts
    and samples after `why` are what the statistics need (n, per-interval values)."""

    seconds: float
    drafts: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    tokens_per_s: float | None
    error_rate: float | None
    why: dict[str, str] = field(default_factory=dict)
    draft_tokens: float = 0.0
    accepted: float = 0.0
    finished: float = 0.0
    errors: float = 0.0
    samples: tuple[float, ...] = ()  # generation tokens/s of each interval
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # key -> SUMMARY's
    buckets: dict[str, histogram.Buckets] = field(default_factory=dict)  # the window's
    # Per interval (`series_of`): "t" (seconds from the window's first scrape to the
    # interval's end), then each measure's value in it (None: not computable there).
    series: dict[str, tuple[float | None, ...]] = field(default_factory=dict)

    def to_json(self, series: bool = True) -> dict[str, Any]:
        """The report's (and the journal's) numbers; `series` False leaves the per-interval
        series out (a host's journal: --resume never judges from them)."""
        out: dict[str, Any] = {
            "seconds": round(self.seconds, 3),
            "drafts": self.drafts,
            "acceptance_rate": _round(self.acceptance_rate),
            "mean_acceptance_length": _round(self.mean_acceptance_length),
            "tokens_per_s": _round(self.tokens_per_s),
            "error_rate": _round(self.error_rate),
            "why": dict(self.why),
        }
        if self.samples or self.draft_tokens or self.finished or self.latency:
            out.update(
                draft_tokens=self.draft_tokens,
                accepted=self.accepted,
                finished=self.finished,
                errors=self.errors,
                samples=[round(s, 4) for s in self.samples],
                latency={
                    k: {q: round(v, 6) for q, v in d.items()} for k, d in self.latency.items()
                },
                buckets={
                    k: [["+Inf" if math.isinf(b) else b, c] for b, c in v]
                    for k, v in self.buckets.items()
                },
            )
        if series and self.series:
            out["series"] = {k: [_sig(v) for v in vs] for k, vs in self.series.items()}
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _sig(x: float | None) -> float | None:
    """Five significant digits: a chart's point, a 0.2 ms step latency as well as 2000 tokens/s."""
    return None if x is None else float(f"{x:.5g}")


def measure(start: Counters, end: Counters, seconds: float) -> Measures:
    """The measures of the window between two scrapes `seconds` apart."""
    return measure_series([(0.0, start), (seconds, end)])


def measure_series(series: Sequence[tuple[float, Counters]]) -> Measures:
    """The measures of a window of scrapes, (controller's time, counters) in order."""
    seconds = series[-1][0] - series[0][0] if series else 0.0
    d = Counters()
    samples: list[float] = []
    window: dict[str, histogram.Buckets] = {}
    incs = increases([c for _t, c in series])
    for ((t0, _), (t1, _)), inc in zip(pairwise(series), incs, strict=True):
        d = d.plus(inc)
        if t1 > t0:
            samples.append(inc.generation_tokens / (t1 - t0))
        for key, b in inc.latency:
            window[key] = b if key not in window else histogram.merge([window[key], b])
    spec = bool(series) and series[-1][1].spec_decode
    why: dict[str, str] = {}
    rate = length = tps = err = None
    if not spec:
        why["acceptance"] = "the endpoint serves no spec-decode counters"
    elif d.drafts <= 0:
        why["acceptance"] = f"no drafts in the {seconds:.1f} s window"
    else:
        length = 1 + d.accepted / d.drafts
        if d.draft_tokens > 0:
            rate = d.accepted / d.draft_tokens
        else:
            why["acceptance"] = "the engine counts no draft tokens (no acceptance rate)"
    if seconds <= 0:
        why["tokens_per_s"] = "an empty window"
    elif d.generation_tokens <= 0:
        why["tokens_per_s"] = f"no generation tokens in the {seconds:.1f} s window"
    else:
        tps = d.generation_tokens / seconds
    if d.finished <= 0:
        why["error_rate"] = f"no finished requests in the {seconds:.1f} s window"
    else:
        err = d.errors / d.finished
    latency: dict[str, dict[str, float]] = {}
    for key, b in window.items():
        qs = {name: histogram.quantile(q, b) for name, q in SUMMARY.items()}
        got = {name: v for name, v in qs.items() if v is not None}
        if got:
            latency[key] = got
    return Measures(
        seconds,
        d.drafts,
        rate,
        length,
        tps,
        err,
        why,
        draft_tokens=d.draft_tokens,
        accepted=d.accepted,
        finished=d.finished,
        errors=d.errors,
        samples=tuple(samples),
        latency=latency,
        buckets=window,
        series=series_of([t for t, _c in series], incs),
    )


def series_of(
    times: Sequence[float], incs: Sequence[Counters]
) -> dict[str, tuple[float | None, ...]]:
    """Each interval's values: `times` the window's scrapes, `incs` the increase between
    each two (model.increases). Over MAX_POINTS intervals, runs of consecutive ones are
    joined (increases added, their times spanned). Empty with fewer than two scrapes."""
    spans = list(zip(pairwise(times), incs, strict=True))
    if not spans:
        return {}
    size = math.ceil(len(spans) / MAX_POINTS)
    points: list[dict[str, float | None]] = []
    for i in range(0, len(spans), size):
        run = spans[i : i + size]
        inc = Counters()
        for _t, c in run:
            inc = inc.plus(c)
        points.append(_point(run[0][0][0], run[-1][0][1], inc, times[0]))
    keys = list(dict.fromkeys(k for p in points for k in p))
    return {k: tuple(p.get(k) for p in points) for k in keys}


def _point(t0: float, t1: float, inc: Counters, origin: float) -> dict[str, float | None]:
    """One interval's values (None where its counts cannot give one)."""
    sec = t1 - t0
    out: dict[str, float | None] = {
        "t": round(t1 - origin, 3),
        "tokens_per_s": inc.generation_tokens / sec if sec > 0 else None,
        "acceptance_rate": inc.accepted / inc.draft_tokens if inc.draft_tokens > 0 else None,
        "mean_acceptance_length": 1 + inc.accepted / inc.drafts if inc.drafts > 0 else None,
        "error_rate": inc.errors / inc.finished if inc.finished > 0 else None,
    }
    for key, b in inc.latency:
        for name, q in SERIES_QUANTILES.items():
            out[f"{key}_{name}"] = histogram.quantile(q, b)
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def extras_of(data: dict[str, Any]) -> dict[str, Any] | None:
    """The counts and samples of a Measures' to_json() (a journal's or a report's), as
    Measures keywords; None when one is malformed. Absent (an older journal): none."""
    out: dict[str, Any] = {}
    for k in ("draft_tokens", "accepted", "finished", "errors"):
        if k in data:
            if not _num(data[k]):
                return None
            out[k] = float(data[k])
    samples = data.get("samples", [])
    if not isinstance(samples, list) or not all(_num(v) for v in samples):
        return None
    out["samples"] = tuple(float(v) for v in samples)
    lat = data.get("latency", {})
    raw = data.get("buckets", {})  # (an older journal's `latency_samples` are not read)
    if not all(isinstance(d, dict) for d in (lat, raw)):
        return None
    try:
        out["latency"] = {
            str(k): {str(q): float(v) for q, v in d.items() if _num(v)} for k, d in lat.items()
        }
        out["buckets"] = {
            str(k): tuple((math.inf if b == "+Inf" else float(b), float(c)) for b, c in v)
            for k, v in raw.items()
        }
    except (TypeError, ValueError, AttributeError):
        return None
    return out
