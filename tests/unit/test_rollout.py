"""patcher.rollout: the step machine and the gates, on the golden cases (milliseconds)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from patcher import fleet, rollout, rolloutrun
from patcher.errors import UsageError
from patcher.result import HostResult, RunResult
from patcher.spec import MetricsThresholds
from tests.support import rolloutcases


@pytest.mark.parametrize("path", rolloutcases.step_cases(), ids=lambda p: p.stem)
def test_step_machine(path: Path) -> None:
    case = rolloutcases.load(path)
    assert rolloutcases.run_steps(case) == case["expect"]


@pytest.mark.parametrize("path", rolloutcases.gate_cases(), ids=lambda p: p.stem)
def test_gates(path: Path) -> None:
    case = rolloutcases.load(path)
    assert rolloutcases.run_gates(case) == case["expect"]


def test_there_are_cases_of_every_verdict() -> None:
    seen = {rolloutcases.load(p)["expect"]["verdict"] for p in rolloutcases.step_cases()}
    assert seen == set(rollout.VERDICTS)


def test_gates_take_the_strictest_table_and_the_overrides() -> None:
    a = MetricsThresholds(min_acceptance_rate=0.4, max_error_rate=0.05)
    b = MetricsThresholds(min_acceptance_rate=0.5, min_tokens_per_s_ratio=0.9, max_error_rate=0.01)
    g = rollout.Gates.of([a, None, b])
    assert (g.min_acceptance_rate, g.min_tokens_per_s_ratio, g.max_error_rate) == (0.5, 0.9, 0.01)
    g = rollout.Gates.of([a, b], min_acceptance=0.2, min_ratio=1.1, allow_no_traffic=True)
    assert (g.min_acceptance_rate, g.min_tokens_per_s_ratio, g.allow_no_traffic) == (0.2, 1.1, True)
    assert rollout.Gates.of([]) == rollout.Gates()


def test_parse_reads_vllm_counters_and_error_reasons() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts counter",
            'vllm:spec_decode_num_drafts_total{engine="0"} 10',
            'vllm:spec_decode_num_drafts_total{engine="1"} 5',
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 45',
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 9',
            "# TYPE vllm:generation_tokens counter",
            'vllm:generation_tokens_total{engine="0"} 300',
            "# TYPE vllm:request_success counter",
            'vllm:request_success_total{finished_reason="stop"} 7',
            'vllm:request_success_total{finished_reason="length"} 1',
            'vllm:request_success_total{finished_reason="abort"} 1',
            'vllm:request_success_total{finished_reason="error"} 1',
            "",
        ]
    )
    assert rollout.parse(text) == rollout.Counters(15, 45, 9, 300, 10, 2, True)
    plain = rollout.parse("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total 3\n")
    assert plain == rollout.Counters(generation_tokens=3)
    with pytest.raises(ValueError):
        rollout.parse("<html>login</html>\n{{{")


def test_window_closes_on_time_or_on_enough_drafts() -> None:
    start, now = rollout.Counters(drafts=10), rollout.Counters(drafts=60)
    assert not rollout.window_done(start, now, 5, 120, 100)
    assert rollout.window_done(start, now, 5, 120, 50)
    assert rollout.window_done(start, now, 120, 120, 100)
    assert not rollout.window_done(start, now, 5, 120, 0)  # --min-drafts 0: the full window


@pytest.mark.parametrize("text", ["0", "-1", "x", "nan"])
def test_bad_ratio_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        rollout.parse_ratio(text)
    assert rollout.parse_ratio("95%") == 0.95


def _host(name: str, verdict: str, before: float | None, after: float | None) -> HostResult:
    ok = verdict == rollout.KEPT
    h = HostResult(target=name, ok=ok, error=None if ok else "gates failed: serves worse")
    h.rollout = {
        "verdict": verdict,
        "reached": "gates",
        "before": {"acceptance_rate": None, "tokens_per_s": before},
        "after": {"acceptance_rate": 0.15 if not ok else 0.7, "tokens_per_s": after},
    }
    return h


def test_table_and_batch_lines() -> None:
    hosts = [
        _host("h1", rollout.ROLLED_BACK, 200.0, 132.0),
        fleet.skipped("h2", [("s", "vllm")], "a canary host failed"),
    ]
    result = RunResult("rollout", False, hosts)
    assert rolloutrun.table_rows(result) == [
        ("h1", "gates", "- -> 15 %", "200.0 -> 132.0", "rolled_back"),
        ("h2", "-", "-", "-", "skipped"),
    ]
    out, err = io.StringIO(), io.StringIO()
    rolloutrun.render_table(result, out)
    assert (
        out.getvalue().splitlines()[-1] == "rollout: not ok: 0 of 2 host(s) patched; 1 not started"
    )
    rolloutrun.render_problems(result, err)
    assert err.getvalue().splitlines() == [
        "error: h1: gates failed: serves worse",
        "error: h2: skipped: a canary host failed",
        "hint: run `vpatch status` on it",
    ]
    lines = io.StringIO()
    bars = rolloutrun.BatchLines(["h1", "h2", "h3"], fleet.Policy(canary=1, batch=1), lines)
    bars.advance(_host("h1", rollout.KEPT, 200.0, 280.0))
    bars.advance(_host("h3", rollout.KEPT, 200.0, 280.0))
    bars.advance(_host("h2", rollout.KEPT, 200.0, 280.0))
    assert lines.getvalue().splitlines() == [
        "rollout canary (1 host(s)): 1 kept",
        "rollout batch 2 (1 host(s)): 1 kept",
        "rollout batch 1 (1 host(s)): 1 kept",
    ]
