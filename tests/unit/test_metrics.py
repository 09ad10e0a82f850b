"""The metrics probe's arithmetic and wording, on exposition text made by prometheus_client.

The counters here are declared the way vLLM declares them (same names, labels, `_total`
suffix added by the client); the end-to-end check against vLLM's own `SpecDecodingProm` is in
tests/integration/test_vllm_verify.py.
"""

from __future__ import annotations

import math

import prometheus_client as pc
import pytest

from patcher import cli
from patcher.errors import SpecError, UsageError
from patcher.serving import metrics
from patcher.serving.metrics import Scrape, SpecDecodeStats, Thresholds
from patcher.specs.model import MetricsThresholds, load_spec


def exposition(engines: dict[str, tuple[int, int, int, list[int]]]) -> str:
    """engine -> (drafts, draft tokens, accepted, accepted per position), as vLLM exports."""
    reg = pc.CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = pc.Counter("vllm:spec_decode_num_drafts", "d", labels, registry=reg)
    tokens = pc.Counter("vllm:spec_decode_num_draft_tokens", "t", labels, registry=reg)
    acc = pc.Counter("vllm:spec_decode_num_accepted_tokens", "a", labels, registry=reg)
    per = pc.Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos", "p", [*labels, "position"], registry=reg
    )
    for engine, (d, t, a, pos) in engines.items():
        drafts.labels("m", engine).inc(d)
        tokens.labels("m", engine).inc(t)
        acc.labels("m", engine).inc(a)
        for i, n in enumerate(pos):
            per.labels("m", engine, str(i)).inc(n)
    # Unrelated series a real /metrics also has: ignored.
    pc.Gauge("vllm:num_requests_running", "r", registry=reg).set(3)
    return pc.generate_latest(reg).decode()


def test_parse_sums_engines_and_positions() -> None:
    text = exposition({"0": (100, 300, 210, [80, 80, 50]), "1": (100, 300, 45, [40, 5, 0])})
    stats = metrics.parse(text)
    assert stats == SpecDecodeStats(200, 600, 255, (120, 85, 50))
    assert stats.acceptance_rate == pytest.approx(0.425)
    assert stats.mean_acceptance_length == pytest.approx(2.275)
    assert stats.per_position_rate == pytest.approx((0.6, 0.425, 0.25))


def test_parse_openmetrics_and_absent_counters() -> None:
    reg = pc.CollectorRegistry()
    pc.Counter("vllm:spec_decode_num_drafts", "d", registry=reg).inc(4)
    pc.Counter("vllm:spec_decode_num_draft_tokens", "t", registry=reg).inc(12)
    pc.Counter("vllm:spec_decode_num_accepted_tokens", "a", registry=reg).inc(6)
    from prometheus_client.openmetrics.exposition import generate_latest as om

    text = om(reg).decode()
    assert text.rstrip().endswith("# EOF")
    assert metrics.parse(text) == SpecDecodeStats(4, 12, 6, ())
    assert metrics.parse("# nothing here\nup 1\n") is None
    with pytest.raises(ValueError):
        metrics.parse("<html>not metrics</html>")


@pytest.mark.parametrize(
    ("counts", "th", "ok", "detail"),
    [
        (
            (100, 300, 45, (40, 5, 0)),
            Thresholds(0.4),
            False,
            "patch is loaded but speculative decoding is not paying: acceptance 15 % < 40 %; "
            "mean acceptance length 1.45, per position 0.40/0.05/0.00 "
            "(100 drafts, 300 draft tokens, 45 accepted)",
        ),
        (
            (100, 300, 210, (80, 80, 50)),
            Thresholds(0.4),
            True,
            "acceptance 70 % >= 40 %, mean acceptance length 3.10, per position 0.80/0.80/0.50 "
            "(100 drafts, 300 draft tokens, 210 accepted)",
        ),
        (
            (100, 300, 210, ()),
            Thresholds(None, 3.5),
            False,
            "patch is loaded but speculative decoding is not paying: mean acceptance length "
            "3.10 < 3.5; acceptance 70 % (100 drafts, 300 draft tokens, 210 accepted)",
        ),
        (
            (100, 300, 210, ()),
            Thresholds(),
            True,
            "acceptance 70 %, mean acceptance length 3.10 "
            "(100 drafts, 300 draft tokens, 210 accepted); no threshold set",
        ),
        (
            (100, 300, 120, ()),
            Thresholds(0.4),
            True,  # exactly at the threshold passes
            "acceptance 40 % >= 40 %, mean acceptance length 2.20 "
            "(100 drafts, 300 draft tokens, 120 accepted)",
        ),
    ],
)
def test_evaluate(
    counts: tuple[int, int, int, tuple[int, ...]], th: Thresholds, ok: bool, detail: str
) -> None:
    d, t, a, pos = counts
    assert metrics.evaluate(SpecDecodeStats(d, t, a, pos), th, loaded=True) == (ok, detail)


def test_not_loaded_does_not_claim_loaded() -> None:
    ok, detail = metrics.evaluate(SpecDecodeStats(100, 300, 45), Thresholds(0.4), loaded=False)
    assert not ok and detail.startswith("speculative decoding is not paying: acceptance 15 %")


def test_no_drafts_or_no_counters_is_inconclusive_not_passed() -> None:
    ok, detail = metrics.evaluate(SpecDecodeStats(0, 0, 0), Thresholds(), loaded=True)
    assert not ok and detail.startswith("inconclusive: no drafts counted yet")
    ok, detail = metrics.evaluate(None, Thresholds(0.4), loaded=True)
    assert not ok and "serves no speculative-decoding counters" in detail


def test_probe_wraps_fetch_and_parse_errors() -> None:
    down = Scrape("http://h/m", None, "connection failed: Connection refused", 0.01)
    pr = metrics.probe(down, None, None, loaded=True)
    assert pr.name == "metrics" and not pr.ok
    assert pr.detail == "cannot scrape http://h/m: connection failed: Connection refused"
    html = Scrape("http://h/m", "<html>hi</html>", None, 0.01)
    pr = metrics.probe(html, None, None, loaded=True)
    assert not pr.ok and pr.detail.startswith("http://h/m did not serve Prometheus text")
    good = Scrape("http://h/m", exposition({"0": (10, 30, 21, [])}), None, 0.01)
    pr = metrics.probe(good, MetricsThresholds(min_acceptance_rate=0.9), 0.5, True, 2)
    assert pr.ok and "acceptance 70 % >= 50 %" in pr.detail  # the flag beats the spec
    assert "2 process(es) of this environment started before the patch" in pr.detail


def test_thresholds_precedence() -> None:
    spec = MetricsThresholds(min_acceptance_rate=0.4, min_mean_acceptance_length=2)
    assert Thresholds.of(spec, None) == Thresholds(0.4, 2)
    assert Thresholds.of(spec, 0.0) == Thresholds(0.0, 2)
    assert Thresholds.of(None, 0.3) == Thresholds(0.3, None)


@pytest.mark.parametrize(("text", "value"), [("0.4", 0.4), ("40%", 0.4), (" 1 ", 1.0), ("0", 0.0)])
def test_parse_rate(text: str, value: float) -> None:
    assert math.isclose(metrics.parse_rate(text), value)


@pytest.mark.parametrize("text", ["1.5", "-0.1", "abc", "nan", "140%", ""])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        metrics.parse_rate(text)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://h/m", "localhost:8000/metrics", "http:///x", "gopher://h"]
)
def test_check_url_rejects(url: str) -> None:
    with pytest.raises(UsageError):
        metrics.check_url(url)


def test_catalog_spec_carries_the_eagle3_threshold() -> None:
    spec = load_spec("patches/vllm-eagle3-mla-targets.toml")
    assert spec.metrics == MetricsThresholds(min_acceptance_rate=0.4)


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ("min_acceptance_rate = 1.5", "metrics.min_acceptance_rate"),
        ("min_mean_acceptance_length = 0.5", "metrics.min_mean_acceptance_length"),
        ("min_rate = 0.4", "metrics.min_rate"),
    ],
)
def test_metrics_table_is_validated(tmp_path: object, table: str, needle: str) -> None:
    from pathlib import Path

    base = Path("patches/vllm-eagle3-mla-targets.toml").read_text()
    bad = base.replace("min_acceptance_rate = 0.4", table)
    path = Path(str(tmp_path)) / "bad.toml"
    path.write_text(bad)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert needle in err.value.message


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--metrics", "file:///etc/passwd"], "is not an http:// or https:// URL"),
        (["--metrics", "localhost:8000/metrics"], "is not an http:// or https:// URL"),
        (["--min-acceptance", "0.4"], "--min-acceptance needs --metrics URL"),
        (["--metrics", "http://127.0.0.1:9/m", "--min-acceptance", "1.5"], "between 0 and 1"),
        (["--metrics-window", "30"], "--metrics-window needs --metrics URL"),
        (["--metrics", "http://127.0.0.1:9/m", "--metrics-window", "0"], "between 0 and 3600"),
        (["--metrics", "http://127.0.0.1:9/m", "--metrics-window", "soon"], "between 0 and 3600"),
    ],
)
def test_metrics_input_errors_are_exit_2_before_any_host(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with error/hint lines; the --python given does not exist, so reaching a host
    would have been exit 1 with "not found" instead."""
    spec = "patches/vllm-eagle3-mla-targets.toml"
    assert cli.main(["verify", spec, "--python", "/nonexistent/bin/python", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and needle in err and "\nhint: " in err


class _Texts:
    """A transport whose `fetch` answers are the given texts, in order (the server's counters
    at each scrape); records what was asked."""

    target = "fake"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.calls: list[dict[str, object]] = []

    def call(self, request: dict[str, object], timeout: float = 600) -> dict[str, object]:
        self.calls.append(request)
        return {"ok": True, "text": self.texts.pop(0), "error": None, "seconds": 0.01}

    def close(self) -> None:
        pass


def test_window_judges_only_the_traffic_in_between() -> None:
    """A server that did great for a week and badly in the last minute FAILS with a window
    (and passed on its lifetime counters): the window is about now."""
    week = exposition({"0": (1000, 3000, 2400, [900, 800, 700])})  # 80 %
    now = exposition({"0": (1100, 3300, 2430, [910, 810, 710])})  # +100 drafts, +30/300 = 10 %
    th = MetricsThresholds(min_acceptance_rate=0.4)
    lifetime = metrics.probe(metrics.scrape(_Texts(now), "http://h/m"), th, None, True)
    assert lifetime.ok, lifetime.detail
    slept: list[float] = []
    fake = _Texts(week, now)
    got = metrics.scrape(fake, "http://h/m", window=60, sleep=slept.append)
    assert slept == [60] and [c["op"] for c in fake.calls] == ["fetch", "fetch"]
    pr = metrics.probe(got, th, None, True)
    assert not pr.ok
    assert "acceptance 10 % < 40 %" in pr.detail and "per position 0.10/0.10/0.10" in pr.detail
    assert "in the last 0 s: 100 drafts, 300 draft tokens, 30 accepted" in pr.detail


def test_window_counts_a_restart_from_zero_and_idle_is_inconclusive() -> None:
    before = exposition({"0": (1000, 3000, 2400, [900, 800, 700])})
    restarted = exposition({"0": (10, 30, 6, [3, 2, 1])})  # counters went down: new process
    got = metrics.scrape(_Texts(before, restarted), "http://h/m", window=5, sleep=lambda s: None)
    pr = metrics.probe(got, None, None, True)
    assert "acceptance 20 %" in pr.detail and "10 drafts, 30 draft tokens, 6 accepted" in pr.detail
    idle = metrics.scrape(_Texts(before, before), "http://h/m", window=5, sleep=lambda s: None)
    pr = metrics.probe(idle, None, None, True)
    assert not pr.ok and pr.detail.startswith("inconclusive: no drafts in the 0 s window")

    # The first scrape failing: no second one, the error is the answer.
    class Down(_Texts):
        def call(self, request: dict[str, object], timeout: float = 600) -> dict[str, object]:
            self.calls.append(request)
            return {"ok": True, "text": None, "error": "connection refused", "seconds": 0.0}

    down = Down()
    got = metrics.scrape(down, "http://h/m", window=5, sleep=lambda s: pytest.fail("slept"))
    assert len(down.calls) == 1 and got.text is None and got.error == "connection refused"


def test_window_resets_only_the_engine_that_restarted() -> None:
    """Two engines, engine 1 restarted between the scrapes: engine 0 counts its increase,
    engine 1 what it counted since its start (each series reduced before the sum)."""
    before = exposition(
        {"0": (1000, 3000, 2400, [900, 800, 700]), "1": (500, 1500, 300, [150, 100, 50])}
    )
    after = exposition({"0": (1100, 3300, 2610, [980, 880, 750]), "1": (20, 60, 42, [16, 14, 12])})
    got = metrics.scrape(_Texts(before, after), "http://h/m", window=5, sleep=lambda s: None)
    pr = metrics.probe(got, None, None, True)
    assert "120 drafts, 360 draft tokens, 252 accepted" in pr.detail, pr.detail
    assert "per position 0.80/0.78/0.52" in pr.detail  # (80+16, 80+14, 50+12) / 120


def test_a_scrape_over_a_bound_fails_with_its_reason() -> None:
    """One hostile `position` label (it used to size a tuple: gigabytes): that scrape fails
    and says why; nothing is built from the value."""
    text = exposition({"0": (10, 30, 20, [8, 7, 5])}).replace('position="2"', 'position="9999999"')
    pr = metrics.probe(metrics.scrape(_Texts(text), "http://h/m"), None, None, True)
    assert not pr.ok
    assert pr.detail.startswith("http://h/m sent a scrape over vpatch's bounds: "), pr.detail
    assert "position '9999999', above the highest read, 63" in pr.detail


SGLANG_TEXT = "\n".join(
    [
        "# TYPE sglang:generation_tokens counter",
        'sglang:generation_tokens_total{model_name="m"} 300',
        "# TYPE sglang:spec_verify_calls counter",
        'sglang:spec_verify_calls_total{model_name="m"} 100',
        "",
    ]
)


def test_verify_reads_the_profile_it_is_told() -> None:
    """`verify --metrics --metrics-profile sglang` reads SGLang's names, as the rollout does
    from the same text: 100 verify rounds (drafts), 200 accepted (300 tokens - 1 per round).
    Read by vLLM's names the same text has no spec-decode counters at all."""
    as_sglang = Scrape("http://h/metrics", SGLANG_TEXT, None, 0.1, profile="sglang")
    pr = metrics.probe(as_sglang, None, None, loaded=True)
    assert pr.ok and "100 drafts" in pr.detail and "mean acceptance length 3.00" in pr.detail
    assert metrics.NO_RATE in pr.detail  # no draft-token counter: said, not guessed
    gated = metrics.probe(as_sglang, None, 0.4, loaded=True)  # a rate it cannot compute fails
    assert not gated.ok and metrics.NO_RATE in gated.detail, gated.detail
    as_vllm = Scrape("http://h/metrics", SGLANG_TEXT, None, 0.1)
    assert "100 drafts" not in metrics.probe(as_vllm, None, None, loaded=True).detail


def test_metrics_profile_choices_are_the_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    from patcher.serving.model import PROFILES

    for command in ("verify", "rollout"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        assert all(name in out for name in PROFILES), (command, out)
    assert cli.main(["verify", "x", "--metrics-profile", "sglang"]) == 2
    assert "--metrics-profile needs --metrics URL" in capsys.readouterr().err
