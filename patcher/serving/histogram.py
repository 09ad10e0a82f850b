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
    """histogram_quantile(q, b) as PromQL computes it for a classic histogram
    (`BucketQuantile`; its own test cases: tests/cases/serving/histogram_quantile.json):

    - q below 0 is -inf, above 1 +inf (whatever the buckets), NaN is None;
    - the buckets sorted by bound, those with one bound (`0.2` and `2e-1` scraped as two
      series) summed into one (`_coalesced`), the counts made monotonic (`_monotonic`: a
      sum of series scraped at slightly different moments can dip);
    - None (PromQL's NaN) without a +inf bucket, with fewer than two buckets, or without
      observations;
    - the rank q * observations falls in the first bucket whose count reaches it: the +inf
      bucket gives the highest finite bound; the lowest bucket with a bound <= 0 gives that
      bound; otherwise linear interpolation in the bucket, from 0 for the lowest one. So
      q = 0 lands in the lowest bucket: its bound when that is <= 0, else 0, and None when
      the lowest bucket is empty (0 of 0 observations in it: PromQL's 0/0)."""
    if math.isnan(q) or not 0 <= q <= 1:
        return None if math.isnan(q) else math.copysign(math.inf, q)
    ordered = _monotonic(_coalesced(sorted(b, key=lambda pair: pair[0])))
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]) or ordered[-1][1] == 0:
        return None
    rank = q * ordered[-1][1]
    i = next((k for k, (_, cum) in enumerate(ordered[:-1]) if cum >= rank), len(ordered) - 1)
    if i == len(ordered) - 1:
        return ordered[-2][0]
    bound, count = ordered[i]
    if i == 0 and bound <= 0:
        return bound
    start = 0.0
    if i > 0:
        start, below = ordered[i - 1]
        count -= below
        rank -= below
    if count == 0:
        return None  # 0/0: the lowest bucket empty and q = 0
    return start + (bound - start) * (rank / count)


# Relative differences below this between neighbouring buckets are float noise, not data
# (PromQL's smallDeltaTolerance).
SMALL_DELTA = 1e-12
_MIN_NORMAL = 2.2250738585072014e-308  # the smallest positive normal float
_MAX_FLOAT = 1.7976931348623157e308


def _coalesced(b: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted buckets with each bound once, the counts of equal bounds summed (PromQL's
    `coalesceBuckets`)."""
    out: list[tuple[float, float]] = []
    for bound, cum in b:
        if out and out[-1][0] == bound:
            out[-1] = (bound, out[-1][1] + cum)
        else:
            out.append((bound, cum))
    return out


def _monotonic(b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The counts made non-decreasing as PromQL's `ensureMonotonicAndIgnoreSmallDeltas`
    does: a count within SMALL_DELTA (relative) of the last kept one, up or down, is taken
    as that one; a lower count is raised to it (the envelope)."""
    if not b:
        return b
    out = [b[0]]
    prev = b[0][1]
    for bound, cum in b[1:]:
        if cum == prev or _almost_equal(prev, cum) or cum < prev:
            out.append((bound, prev))
        else:
            out.append((bound, cum))
            prev = cum
    return out


def _almost_equal(a: float, b: float) -> bool:
    """PromQL's `almost.Equal(a, b, SMALL_DELTA)` for counts (no NaN among them)."""
    if a == b:
        return True
    total = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or total < _MIN_NORMAL:
        return diff < SMALL_DELTA * _MIN_NORMAL
    return diff / min(total, _MAX_FLOAT) < SMALL_DELTA


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
