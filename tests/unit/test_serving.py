"""The serving room, pure: the statistics against values recorded from a reference
implementation, histogram quantiles by Prometheus' rule, the counter model per engine, and
the gate table's decisions on recorded series (tests/cases/serving/)."""

from __future__ import annotations

import dataclasses
import json
import math
import types
from pathlib import Path
from typing import Any

import pytest

from patcher.errors import UsageError
from patcher.rollout import canary, settings
from patcher.serving import gates, histogram, judging, stats
from patcher.serving.measures import measure_series
from patcher.serving.model import (
    E2E,
    ITL,
    LATENCIES,
    SGLANG,
    TPOT,
    TTFT,
    VLLM,
    Counters,
    parse,
    parse_all,
)
from patcher.specs import validate
from patcher.specs.model import MetricsThresholds, field_names
from tests.support import servingcases

INF = math.inf
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("path", servingcases.gate_cases(), ids=lambda p: p.stem)
def test_gates(path: Path) -> None:
    case = servingcases.load(path)
    assert servingcases.run_gates(case) == case["expect"], case["why"]


def test_traffic_that_changed_fools_before_after_and_not_the_control() -> None:
    """The same windows: with the control the slow patch fails and the neutral one passes;
    after/before says the opposite of both (why control hosts exist)."""
    got = {p.stem: servingcases.run_gates(servingcases.load(p)) for p in servingcases.gate_cases()}
    assert not got["load_doubled_slow_patch_vs_control"]["ok"]
    assert got["load_doubled_slow_patch_before_after"]["ok"]
    assert got["load_halved_neutral_patch_vs_control"]["ok"]
    assert not got["load_halved_neutral_patch_before_after"]["ok"]
    assert got["load_doubled_slow_patch_vs_control"]["compared_with"] == ["control"]
    assert got["load_doubled_slow_patch_before_after"]["compared_with"] == ["baseline"]


def test_short_evidence_extends_then_fails_with_its_reason() -> None:
    cases = {p.stem: servingcases.load(p) for p in servingcases.gate_cases()}
    ext = servingcases.run_gates(cases["noisy_window_extends"])
    assert ext["extend"] and ext["detail"].startswith("undecided: ")
    end = servingcases.run_gates(cases["noisy_window_at_max_fails_not_enough_evidence"])
    assert not end["ok"] and not end["extend"] and "not enough evidence" in end["detail"]
    assert "p=" in end["detail"] and "n=6" in end["detail"]


def test_mann_whitney_matches_the_recorded_reference() -> None:
    for c in servingcases.load(servingcases.CASES / "mann_whitney.json")["cases"]:
        t = stats.mann_whitney(c["x"], c["y"])
        assert t.u == c["u"], c["name"]
        assert t.p_greater == pytest.approx(c["p_greater"], rel=1e-9), c["name"]
        assert t.p_less == pytest.approx(c["p_less"], rel=1e-9), c["name"]


def test_wilson_matches_the_recorded_reference() -> None:
    for c in servingcases.load(servingcases.CASES / "wilson.json")["cases"]:
        low, high = stats.wilson(c["successes"], c["trials"], c["confidence"])
        assert (low, high) == pytest.approx((c["low"], c["high"]), rel=1e-9, abs=1e-12), c


def test_newcombe_matches_the_recorded_reference() -> None:
    """The interval of a difference of two proportions (a latency tail, canary against
    control), against a reference implementation and the examples of Newcombe's paper."""
    for c in servingcases.load(servingcases.CASES / "newcombe.json")["cases"]:
        low, high = stats.newcombe(c["s1"], c["n1"], c["s2"], c["n2"], c["confidence"])
        assert low == pytest.approx(c["low"], abs=1e-12), c
        assert high == pytest.approx(c["high"], abs=1e-12), c


def test_a_rank_test_on_too_few_samples_never_decides() -> None:
    ev = stats.samples_at_least([1.0] * 4, [100.0] * 4, 0.95, 0.95)
    assert ev.decision == stats.EXTEND and ev.n == 4
    assert stats.samples_at_least([1.0] * 5, [100.0] * 5, 0.95, 0.95).decision == stats.FAIL
    same = stats.mann_whitney([3.0] * 6, [3.0] * 6)
    assert (same.p_greater, same.p_less) == (1.0, 1.0)


def test_midranks_share_tied_ranks() -> None:
    assert stats.midranks([5.0, 1.0, 5.0, 3.0]) == ([3.5, 1.0, 3.5, 2.0], [1, 1, 2])


B = ((0.1, 10.0), (0.25, 50.0), (0.5, 90.0), (1.0, 100.0), (INF, 100.0))


def test_histogram_quantile_follows_prometheus() -> None:
    assert histogram.quantile(0.5, B) == pytest.approx(0.25)  # 0.1 + 0.15 * 40/40
    assert histogram.quantile(0.99, B) == pytest.approx(0.95)  # 0.5 + 0.5 * 9/10
    assert histogram.quantile(0.05, B) == pytest.approx(0.05)  # lowest bucket from 0
    assert histogram.quantile(0.99, ((0.1, 1.0), (INF, 10.0))) == 0.1  # in +Inf: last bound
    assert histogram.quantile(0.5, ((0.1, 0.0), (INF, 0.0))) is None  # no observations
    assert histogram.quantile(0.5, ((0.1, 3.0), (0.2, 3.0))) is None  # no +Inf bucket
    assert histogram.quantile(0.5, ((INF, 3.0),)) is None


def test_histogram_deltas_and_resets() -> None:
    later = tuple((b, c * 3) for b, c in B)
    assert histogram.delta(later, B) == tuple((b, c * 2) for b, c in B)
    assert histogram.delta(B, later) == B  # went down: a restart, the later scrape alone
    assert histogram.quantiles(0.5, [B, later, later]) == [pytest.approx(0.25)]
    above, total = histogram.share_above(0.75, B)  # half of the (0.5, 1.0] bucket's 10
    assert (above, total) == (pytest.approx(5.0), 100.0)
    assert histogram.share_above(2.0, B) == (0.0, 100.0)


def _hist(name: str, engine: str, counts: list[float]) -> str:
    bounds = ["0.05", "0.1", "0.5", "+Inf"]
    lines = [f"# TYPE {name} histogram"]
    lines += [
        f'{name}_bucket{{engine="{engine}",le="{b}"}} {c}'
        for b, c in zip(bounds, counts, strict=True)
    ]
    lines += [
        f'{name}_count{{engine="{engine}"}} {counts[-1]}',
        f'{name}_sum{{engine="{engine}"}} 1',
    ]
    return "\n".join(lines)


def _vllm(engine: str, gen: float, itl: str = "vllm:inter_token_latency_seconds") -> str:
    return "\n".join(
        [
            "# TYPE vllm:generation_tokens counter",
            f'vllm:generation_tokens_total{{engine="{engine}"}} {gen}',
            "# TYPE vllm:spec_decode_num_drafts counter",
            f'vllm:spec_decode_num_drafts_total{{engine="{engine}"}} 10',
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="{engine}"}} 30',
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="{engine}"}} 21',
            "# TYPE vllm:request_success counter",
            f'vllm:request_success_total{{engine="{engine}",finished_reason="stop"}} 9',
            f'vllm:request_success_total{{engine="{engine}",finished_reason="abort"}} 1',
            _hist("vllm:time_to_first_token_seconds", engine, [1, 5, 9, 10]),
            _hist(itl, engine, [50, 90, 100, 100]),
            "",
        ]
    )


def test_vllm_counters_and_latency_histograms() -> None:
    c = parse(_vllm("0", 100))
    assert c.values() == (10, 30, 21, 100, 10, 1) and c.spec_decode
    assert c.buckets(TTFT) == ((0.05, 1.0), (0.1, 5.0), (0.5, 9.0), (INF, 10.0))
    older = parse(_vllm("0", 100, itl="vllm:time_per_output_token_seconds"))  # before 0.11
    assert older.buckets(ITL) == c.buckets(ITL) and c.buckets(ITL) is not None


def test_several_endpoints_of_a_host_are_summed() -> None:
    both = parse_all([_vllm("0", 100), _vllm("1", 50)])
    assert both.generation_tokens == 150 and both.drafts == 20 and both.errors == 2
    assert both.buckets(TTFT) == ((0.05, 2.0), (0.1, 10.0), (0.5, 18.0), (INF, 20.0))
    assert parse_all([]) == Counters()


def test_sglang_profile_reads_its_own_names() -> None:
    text = "\n".join(
        [
            "# TYPE sglang:generation_tokens counter",
            'sglang:generation_tokens_total{model_name="m"} 300',
            "# TYPE sglang:spec_verify_calls counter",
            'sglang:spec_verify_calls_total{model_name="m"} 100',
            "# TYPE sglang:num_requests counter",
            'sglang:num_requests_total{model_name="m"} 20',
            "# TYPE sglang:num_aborted_requests counter",
            'sglang:num_aborted_requests_total{model_name="m"} 2',
            _hist("sglang:time_to_first_token_seconds", "0", [1, 5, 9, 10]),
            "",
        ]
    )
    c = parse(text, SGLANG)
    assert (c.generation_tokens, c.drafts, c.accepted, c.finished, c.errors) == (
        300,
        100,
        200,
        20,
        2,
    )
    assert c.spec_decode and c.buckets(TTFT) is not None
    assert parse(text, VLLM) == Counters()  # vLLM's names are not there
    m = measure_series([(0.0, Counters(spec_decode=True)), (10.0, c)])
    assert m.mean_acceptance_length == 3.0 and m.acceptance_rate is None
    assert "no draft tokens" in m.why["acceptance"]


def test_every_gate_is_one_row_with_one_metrics_key() -> None:
    """GATES is the one source: the spec's `[metrics]` fields (both models), the thresholds
    a report shows and the gate lists of docs/rollout.md and docs/spec.md are checked
    against it, and every row says what it judges, in which unit; a latency row names its
    histogram and a quantile that its name and key carry (`_p99` is 0.99)."""
    keys = gates.keys()
    names = [r.name for r in gates.GATES]
    assert len(set(keys)) == len(keys) == len(set(names))
    assert set(keys) == set(field_names(MetricsThresholds))
    assert set(keys) == set(validate.MetricsThresholds.model_fields)
    assert set(keys) <= set(gates.Gates.make().to_json())
    rollout_md = (DOCS / "rollout.md").read_text()
    spec_md = (DOCS / "spec.md").read_text()
    for r in gates.GATES:
        assert r.quantity and r.unit, r.name
        assert f"| `{r.name}` |" in rollout_md and f"`{r.key}`" in rollout_md, r.name
        assert f"`{r.key}`" in spec_md, r.key
        if r.latency:
            assert r.latency in LATENCIES and r.quantile is not None and r.observations
            p = f"_p{r.quantile * 100:g}"
            assert p in r.name and p in r.key, r.name
    g = gates.Gates.of(
        [MetricsThresholds(max_itl_p99_s=0.05), MetricsThresholds(max_itl_p99_s=0.1)]
    )
    assert g.limit("max_itl_p99_s") == 0.05  # a ceiling: the strictest is the lowest


def _e2e_window(within: float, over: float) -> Any:
    """One window of e2e latency: `within` requests under 1 s, `over` between 1 and 2.5 s."""
    b0 = ((1.0, 0.0), (2.5, 0.0), (INF, 0.0))
    b1 = ((1.0, within), (2.5, within + over), (INF, within + over))
    return measure_series(
        [(0.0, Counters(latency=((E2E, b0),))), (10.0, Counters(latency=((E2E, b1),)))]
    )


def test_a_p95_gate_is_one_row_judged_on_p95(monkeypatch: pytest.MonkeyPatch) -> None:
    """A p95 end-to-end latency ceiling added as one row (latency_rows at 0.95) and its
    `[metrics]` key: the thresholds, the table's keys and the judgement follow, and it is
    judged on the window's p95, not its p99 (94 of 100 requests under 1 s, 6 in 1..2.5 s:
    p95 1.25 s, p99 2.25 s; a 2 s ceiling holds for the one and not the other)."""
    # a name no real gate has: the table may gain a real p95 row without this test noticing
    ratio, ceiling = gates.latency_rows("trial_e2e", E2E, "seconds", "requests", quantile=0.95)
    assert (ceiling.name, ceiling.key, ratio.key) == (
        "trial_e2e_p95",
        "max_trial_e2e_p95_s",
        "max_trial_e2e_p95_ratio",
    )
    monkeypatch.setattr(gates, "GATES", (*gates.GATES, ceiling))
    assert "max_trial_e2e_p95_s" in gates.keys()
    spec = types.SimpleNamespace(max_trial_e2e_p95_s=2.0)  # the spec's new key, as a table reads
    g = gates.Gates.of([spec])
    assert g.to_json()["max_trial_e2e_p95_s"] == 2.0
    w = _e2e_window(94, 6)
    [got] = judging.judge(None, w, g)
    assert got.ok and got.value == pytest.approx(1.25) and got.name == "trial_e2e_p95", got
    assert got.detail == "1.25 s <= 2.00 s" and got.unit == "seconds"
    [p99] = judging.judge(None, w, gates.Gates.make(max_e2e_p99_s=2.0))
    assert not p99.ok and p99.value == pytest.approx(2.25)
    # with evidence: the share over 2 s (2 of 100, interpolated) against 5 %, not 1 %
    [ev] = judging.judge(None, _e2e_window(9400, 600), gates.Gates.of([spec], confidence=0.95))
    assert ev.ok and ev.evidence is not None and ev.evidence.high is not None
    assert 0.02 < ev.evidence.high < 0.05


def test_a_latency_ratio_is_judged_from_counts_not_from_two_bucket_edges() -> None:
    """Both p99s on bucket edges (75 ms and 50 ms: "1.50x") say nothing a count does not:
    the point judgement compares the canary's share of requests over 1.5x the control's
    p99 with the control's share over it, and the report says which quantity, in which
    unit and per what it judged."""
    edges = ((0.025, 0.0), (0.05, 99.0), (0.075, 100.0), (INF, 100.0))
    zero = tuple((b, 0.0) for b, _ in edges)
    ctl = measure_series(
        [(0.0, Counters(latency=((TPOT, zero),))), (10.0, Counters(latency=((TPOT, edges),)))]
    )
    [g] = judging.judge(None, ctl, gates.Gates.make(max_tpot_p99_ratio=1.0), ctl)
    assert g.ok and g.value == 1.0 and g.compared_with == "control"
    doc = g.to_json()
    assert doc["unit"] == "seconds per output token" and "per request" in doc["quantity"]
    assert "1 % of 100 requests over" in g.detail and "the control's 1 % of 100" in g.detail


def _args(**kw: object) -> dict[str, Any]:
    """The canary options as the command hands them over (settings.make_settings' keywords)."""
    given: dict[str, Any] = dict.fromkeys(
        ("control", "confidence", "max_window", "scrape_every", "metrics_profile")
    )
    return {**given, "window": "10", **kw}


def test_canary_options_are_checked_before_any_host() -> None:
    got = settings.canary_options(**_args(control="1"))
    assert got["control"] == 1 and got["confidence"] == 0.95 and got["max_window"] == 30.0
    assert got["scrape_every"] == 0.5
    assert got["rule"] == "sequential" and got["window_given"]  # the default rule
    assert not settings.canary_options(**_args(window=None))["window_given"]
    assert settings.canary_options(**_args(rule="fixed"))["rule"] == "fixed"
    assert settings.canary_options(**_args())["confidence"] is None
    for bad in (
        {"rule": "bonferroni"},
        {"control": "-1"},
        {"confidence": "1.5"},
        {"confidence": "0.95", "max_window": "5"},
        {"scrape_every": "0"},
        {"metrics_profile": "no-such-profile"},
    ):
        with pytest.raises(UsageError):
            settings.canary_options(**_args(**bad))
    with pytest.raises(UsageError):
        canary.split([object(), object()], 2)  # type: ignore[list-item]
    a, b, c = object(), object(), object()
    assert canary.split([a, b, c], 1) == ([a, b], [c])  # type: ignore[list-item]
    assert settings.urls("http://a/metrics  http://b/metrics") == [
        "http://a/metrics",
        "http://b/metrics",
    ]


def test_each_look_at_a_window_tests_at_its_share_of_the_error() -> None:
    """A window judged at its length and then at every scrape until --max-window would,
    looked at often enough, find *something* significant: each look tests at
    (1 - confidence) / looks (Bonferroni). The same samples (p = 0.0022) pass on one look
    and stay undecided when there may be 41."""
    assert settings.looks(10, 30, 0.5, 0.95) == 41 and settings.looks(10, None, 0.5, 0.95) == 1
    assert gates.Gates(confidence=0.95, looks=10).level == pytest.approx(0.995)
    x = (105.0, 107.0, 103.0, 110.0, 104.0, 108.0, 106.0, 109.0)
    y = (100.0, 102.0, 99.0, 104.0, 101.0, 98.0, 103.0, 105.0)
    after = measure_series([(0.0, Counters()), (1.0, Counters(generation_tokens=100))])
    after = dataclasses.replace(after, samples=x)
    ref = dataclasses.replace(after, samples=y)
    once = gates.Gates.make(confidence=0.95, min_tokens_per_s_ratio=1.0)
    often = gates.Gates.make(confidence=0.95, looks=41, min_tokens_per_s_ratio=1.0)
    [g1] = judging.judge(None, after, once, ref, last=False)
    [g2] = judging.judge(None, after, often, ref, last=False)
    assert g1.ok and g1.evidence is not None and g1.evidence.p == pytest.approx(0.0022427, rel=1e-4)
    assert not g2.ok and g2.extend


def test_with_confidence_a_ratio_without_enough_intervals_is_never_a_point_judgement() -> None:
    """Two scrapes a side (one interval): far apart as the rates are, --confidence does not
    fall back to comparing the two numbers; it extends, and at the end says why it failed."""
    one = measure_series([(0.0, Counters()), (1.0, Counters(generation_tokens=100))])
    ref = measure_series([(0.0, Counters()), (1.0, Counters(generation_tokens=1000))])
    g = gates.Gates.make(confidence=0.95, min_tokens_per_s_ratio=0.9)
    [mid] = judging.judge(None, one, g, ref, last=False)
    [end] = judging.judge(None, one, g, ref, last=True)
    assert mid.extend and mid.evidence is not None and mid.evidence.n == 1
    assert not end.ok and not end.extend and "not enough evidence" in end.detail


def test_a_measure_that_rounds_to_its_limit_says_which_side_it_is() -> None:
    """On the H200 a slow patch failed `itl_p99_ratio 1.50x > 1.50x`: the ratio was above 1.5
    and printed like it. A value that rounds to its limit's text shows its digits."""
    row = next(r for r in gates.GATES if r.key == "max_itl_p99_ratio")
    assert gates.shown(row, 1.5037, 1.5) == "1.50x (1.504)"
    assert gates.shown(row, 1.62, 1.5) == "1.62x" and gates.shown(row, 1.5, 1.5) == "1.50x"


@pytest.mark.parametrize("path", servingcases.series_cases(), ids=lambda p: p.stem)
def test_series_are_reduced_one_by_one_then_summed(path: Path) -> None:
    """Each series (endpoint x label set) through Prometheus' increase rule on its own, then
    summed: with `as_if` (the same engines, none restarted), every total is the same."""
    case = servingcases.load(path)
    got = servingcases.run_series(case["scrapes"])
    assert got == case["expect"], case["why"]
    if "as_if" in case:
        same = servingcases.run_series(case["as_if"])
        for key in ("generation_tokens", "drafts", "mean_acceptance_length", "finished"):
            assert got[key] == same[key], (key, case["why"])
        assert got["ttft_count"] == same["ttft_count"] and not any(same["restarted"])


def test_counters_json_keeps_its_series_and_reads_sums_alone() -> None:
    c = parse_all([_vllm("0", 100), _vllm("1", 50)])
    back = Counters.of(json.loads(json.dumps(c.to_json())))
    assert back == c and back.series == c.series and back.hists == c.hists
    old = {k: v for k, v in c.to_json().items() if k not in ("series", "histograms")}
    summed = Counters.of(old)  # a file written before series were kept: each sum one series
    assert summed == c and summed.own()[0][("drafts", "")] == 20


def test_histograms_merge_over_the_union_of_their_bounds() -> None:
    a = ((0.1, 1.0), (0.5, 3.0), (INF, 4.0))
    b = ((0.2, 2.0), (INF, 2.0))
    assert histogram.merge([a, b]) == ((0.1, 1.0), (0.2, 3.0), (0.5, 5.0), (INF, 6.0))
    assert histogram.merge([a]) == a and histogram.merge([]) == ()


def test_a_restart_is_one_series_going_down() -> None:
    """`reset_since` (the gates' "restarted after the window"): an engine whose series went
    down restarted; another engine's growth does not hide it, and a series that is gone or
    new is no restart."""
    end = parse_all([_vllm("0", 1000), _vllm("1", 50)])
    assert not end.reset_since(end)
    one_restarted = parse_all([_vllm("0", 5000), _vllm("1", 3)])  # the sum grew
    assert (
        one_restarted.reset_since(end) and one_restarted.generation_tokens > end.generation_tokens
    )
    assert not parse_all([_vllm("0", 1000)]).reset_since(end)  # endpoint #1's series gone
    assert not end.reset_since(parse_all([_vllm("0", 1000)]))  # ... and back: new
    inc = one_restarted.since(end)
    assert inc.generation_tokens == 4000 + 3  # #1's from zero: its 3
    # #1's drafts read 10 then 10: a series that did not go down shows no restart (its
    # increase 0), Prometheus' blind spot, as docs/rollout.md says.
    assert inc.drafts == 0


def test_a_counter_exported_without_total_is_read_by_its_family() -> None:
    """An engine whose counter samples lack the `_total` suffix (`# TYPE x counter` then
    `x 300`, which the exposition format allows) is read as one that has it: a counter is
    matched by its family, so it never reads 0."""
    bare = "\n".join(
        [
            "# TYPE vllm:generation_tokens counter",
            'vllm:generation_tokens{engine="0"} 300',
            "# TYPE vllm:spec_decode_num_drafts counter",
            'vllm:spec_decode_num_drafts{engine="0"} 10',
            "",
        ]
    )
    suffixed = bare.replace("tokens{", "tokens_total{").replace("drafts{", "drafts_total{")
    for text in (bare, suffixed):
        c = parse(text, VLLM)
        assert (c.generation_tokens, c.drafts) == (300, 10), text
