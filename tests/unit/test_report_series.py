"""The window's per-interval series the HTML report charts (patcher.serving.measures.series_of)
and where a gate's chart reads them (Row.series, Gate.line): each interval's values from its
own increase, bounded, and a ratio gate's threshold drawn in the series' unit."""

from __future__ import annotations

import pytest

from patcher.serving import gates, judging
from patcher.serving.measures import MAX_POINTS, SERIES_QUANTILES, measure_series
from patcher.serving.model import ITL, LATENCIES, Counters


def _scrapes(n: int, step: float = 1.0) -> list[tuple[float, Counters]]:
    """n + 1 scrapes, interval i adding 10 * (i + 1) tokens, 4 drafts of 3 tokens (i % 3
    accepted each), one finished request (none failed) and i + 1 inter-token steps under 0.1 s."""
    out, tot = [], Counters(spec_decode=True)
    out.append((0.0, tot))
    steps = 0.0
    for i in range(n):
        steps += i + 1
        tot = Counters(
            drafts=tot.drafts + 4,
            draft_tokens=tot.draft_tokens + 12,
            accepted=tot.accepted + 4 * (i % 3),
            generation_tokens=tot.generation_tokens + 10 * (i + 1),
            finished=tot.finished + 1,
            spec_decode=True,
            latency=((ITL, ((0.1, steps), (float("inf"), steps))),),
        )
        out.append(((i + 1) * step, tot))
    return out


def test_each_interval_has_its_own_values() -> None:
    m = measure_series(_scrapes(4, step=2.0))
    s = m.series
    assert s["t"] == (2.0, 4.0, 6.0, 8.0)
    assert s["tokens_per_s"] == (5.0, 10.0, 15.0, 20.0)  # 10(i+1) tokens in 2 s
    assert s["tokens_per_s"] == m.samples  # the rank test's samples, one per interval
    assert s["acceptance_rate"] == pytest.approx((0.0, 1 / 3, 2 / 3, 0.0))
    assert s["mean_acceptance_length"] == pytest.approx((1.0, 2.0, 3.0, 1.0))
    assert s["error_rate"] == (0.0, 0.0, 0.0, 0.0)
    assert "itl_p99" in s and all(v is not None for v in s["itl_p99"])
    doc = m.to_json()
    assert doc["series"]["t"] == [2.0, 4.0, 6.0, 8.0]
    assert "series" not in m.to_json(series=False)  # the journal's copy


def test_a_long_window_is_joined_into_at_most_max_points() -> None:
    """Three times MAX_POINTS intervals: every three consecutive ones joined, their tokens
    added over their span (so the joined series still averages to the window's rate)."""
    n = 3 * MAX_POINTS
    m = measure_series(_scrapes(n))
    s = m.series
    assert len(s["t"]) == MAX_POINTS and len(m.samples) == n
    assert s["t"][0] == 3.0 and s["t"][-1] == float(n)
    assert s["tokens_per_s"][0] == pytest.approx((10 + 20 + 30) / 3)
    total = sum(v or 0.0 for v in s["tokens_per_s"]) * 3
    assert total == pytest.approx(m.tokens_per_s * n if m.tokens_per_s else 0.0)
    assert m.to_json()["series"]["t"][-1] == float(n)


def test_a_window_of_one_scrape_has_no_series() -> None:
    assert measure_series([(0.0, Counters())]).series == {}


def test_every_gate_names_a_series_a_window_keeps() -> None:
    """Every row of the table is charted from one of the series a window keeps (a latency
    gate at a quantile the series lack would have no chart: none is in GATES)."""
    got = set(measure_series(_scrapes(2)).series)  # one histogram (ITL): its keys, as any's
    keys = {k for k in got if not k.startswith(ITL)}
    keys |= {f"{lat}_{q}" for lat in LATENCIES for q in SERIES_QUANTILES}
    assert {f"{ITL}_{q}" for q in SERIES_QUANTILES} <= got
    assert all(r.series in keys for r in gates.GATES), [r.series for r in gates.GATES]


def test_a_ratio_gate_draws_its_threshold_in_the_series_unit() -> None:
    """tokens/s at least 0.9x the control's: the line is 0.9 x the control's window rate; an
    absolute gate's line is its limit."""
    after = measure_series(_scrapes(4))
    ref = measure_series([(0.0, Counters()), (4.0, Counters(generation_tokens=400))])
    g = gates.Gates.make(min_tokens_per_s_ratio=0.9, min_acceptance_rate=0.3)
    acc, tps = judging.judge(None, after, g, ref)
    assert (tps.series, tps.line) == ("tokens_per_s", pytest.approx(90.0))
    assert (acc.series, acc.line) == ("acceptance_rate", 0.3)
    assert tps.to_json()["line"] == 90.0 and tps.to_json()["series"] == "tokens_per_s"
    [alone] = judging.judge(None, after, gates.Gates.make(min_tokens_per_s_ratio=0.9))
    assert alone.line is None  # no reference: no line, the chart says so
