"""What a window of scrapes showed: the measures the gates judge (patcher.serving.gates) and
the report shows. A window is a series of scrapes (time, Counters); its totals are the sum
of each interval's increase, each series (engine x label set) reduced on its own before the
sum (model.increases: a series that went down restarted and counts from zero, Prometheus'
`sum(increase())`), its tokens/s samples one value per interval: what a rank test compares
with a control's samples over the same window. Latency is kept as the window's bucket counts
per histogram (`buckets`): a gate reads whatever quantile its row names from them, and
compares two windows by their counts (patcher.serving.gates), never by per-interval quantiles
(a few requests an interval put those on bucket edges)."""

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

    def to_json(self) -> dict[str, Any]:
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
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


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
    )


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
