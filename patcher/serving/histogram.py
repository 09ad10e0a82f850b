"""Quantiles from a Prometheus histogram's bucket deltas, by Prometheus' own
`histogram_quantile` rule, so that a p99 here is the p99 a Grafana panel over the same
window shows:

- the buckets are cumulative counts by upper bound `le`, the last one `+Inf`;
- the rank sought is q * the +Inf bucket's count; the first bucket whose count reaches it
  holds the quantile, linearly interpolated between its lower and upper bound (the lowest
  bucket's lower bound is 0 when its upper bound is positive);
- a quantile that falls in the +Inf bucket is the highest finite upper bound (nothing more
  is known of it); no observations: no quantile (None).

A window's histogram is the later scrape's buckets minus the earlier one's (a bucket that
went down means the server restarted: the later scrape alone, Prometheus' `increase()`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), by bound


def buckets_of(counts: Mapping[float, float]) -> Buckets:
    """{le: count} (summed over engines) as sorted pairs."""
    return tuple(sorted(counts.items()))


def went_down(end: Buckets, start: Buckets) -> bool:
    """Bounds that differ (another release, a reconfigured server) or any bucket lower than
    before: the engine that exports the histogram restarted in between."""
    if [b for b, _ in end] != [b for b, _ in start]:
        return True
    return any(e < s for (_, e), (_, s) in zip(end, start, strict=True))


def delta(end: Buckets, start: Buckets) -> Buckets:
    """The window's buckets: the later scrape alone when the histogram restarted in between
    (went_down), else the difference bucket by bucket."""
    if went_down(end, start):
        return end
    return tuple((b, e - s) for (b, e), (_, s) in zip(end, start, strict=True))


def merge(parts: Iterable[Buckets]) -> Buckets:
    """Histograms of several series (engines, endpoints, intervals) summed. Bounds that
    differ are merged by their union: a series counts, at a bound it lacks, what its next
    lower bound counts (cumulative buckets; a count lower than the bucket below it is read as
    that bucket's). Each series' buckets become steps at its bounds, the steps are summed by
    bound and the union of bounds is sorted once: O(n log n) in all the buckets, however many
    series and bounds."""
    steps: dict[float, float] = {}
    for b in parts:
        prev = 0.0
        for bound, cum in b:
            cum = max(cum, prev)
            steps[bound] = steps.get(bound, 0.0) + (cum - prev)
            prev = cum
    out = []
    total = 0.0
    for bound in sorted(steps):
        total += steps[bound]
        out.append((bound, total))
    return tuple(out)


def count(b: Buckets) -> float:
    """Observations in the histogram: the +Inf bucket's count (0 without one)."""
    return b[-1][1] if b and math.isinf(b[-1][0]) else 0.0


def quantile(q: float, b: Buckets) -> float | None:
    """histogram_quantile(q, b): None without observations or without a +Inf bucket."""
    if not b or not math.isinf(b[-1][0]) or not 0 <= q <= 1:
        return None
    total = b[-1][1]
    if total <= 0:
        return None
    if len(b) < 2:  # only +Inf: nothing is known of where the observations lie
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for i, (bound, cum) in enumerate(b):
        if cum >= rank:
            if math.isinf(bound):
                return b[i - 1][0]
            if i == 0 and bound <= 0:
                return bound
            lower = prev_bound if i > 0 else 0.0
            inside = cum - prev_count
            if inside <= 0:
                return bound
            return lower + (bound - lower) * (rank - prev_count) / inside
        prev_bound, prev_count = bound, cum
    return b[-2][0]


def share_above(limit: float, b: Buckets) -> tuple[float, float]:
    """(observations above `limit`, all observations), the count above read from the buckets
    with the same linear interpolation inside the bucket that holds `limit`: how a latency
    ceiling becomes a proportion (p99 <= limit is "at most 1 % above limit")."""
    total = count(b)
    if total <= 0:
        return 0.0, 0.0
    prev_bound, prev_count = 0.0, 0.0
    for bound, cum in b:
        if math.isinf(bound):
            return total - prev_count, total  # above the last finite bound
        if limit <= bound:
            lower = prev_bound
            width = bound - lower
            frac = 1.0 if width <= 0 else max(0.0, (limit - lower) / width)
            below = prev_count + (cum - prev_count) * frac
            return total - below, total
        prev_bound, prev_count = bound, cum
    return 0.0, total


def quantiles(q: float, series: Sequence[Buckets]) -> list[float]:
    """The quantile of each interval between consecutive scrapes (those with observations)."""
    out = []
    for start, end in pairwise(series):
        v = quantile(q, delta(end, start))
        if v is not None:
            out.append(v)
    return out
