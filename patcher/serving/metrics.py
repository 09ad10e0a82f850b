"""The live serving probe: is speculative decoding actually paying on the serving host?

A patch that loads can still not help. The seed case: the EAGLE-3 whitelist patch loaded, and
vLLM accepted ~15 % of the drafted tokens, a 0.66x slowdown. So `verify --metrics URL` scrapes
vLLM's Prometheus endpoint (fetched by the agent ON the host, so `localhost` is the server) and
turns its spec-decode counters (read by the one counter model, patcher/serving/model.py) into
the numbers vLLM's own docs define:

    acceptance rate        = accepted tokens / draft tokens
    mean acceptance length = 1 + accepted tokens / drafts        (the bonus token included)
    per-position rate[i]   = accepted tokens at position i / drafts

Counters are cumulative since the server started, so one scrape covers the server's lifetime,
summed over engines and models. `--metrics-window SECONDS` scrapes twice, that far apart, and
judges only what happened in between (each series' increase, then summed, as Prometheus'
`sum(increase())` does: an engine whose counters went down restarted and counts from zero,
the others are unaffected; model.Counters.since): how the server does NOW, not
averaged with last week's traffic or with the hours before a config change. Parsing uses
prometheus_client's own parser, never regexes.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from dataclasses import dataclass, replace
from typing import Any

from patcher.errors import UsageError
from patcher.result import ProbeResult
from patcher.serving import model
from patcher.specs.model import MetricsThresholds
from patcher.transports import Transport

PROBE_NAME = "metrics"
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class SpecDecodeStats:
    """Spec-decode counters of one scrape, summed over every label set (engines, models)."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...] = ()

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def per_position_rate(self) -> tuple[float, ...]:
        if self.drafts <= 0:
            return ()
        return tuple(n / self.drafts for n in self.accepted_per_position)


@dataclass(frozen=True)
class Thresholds:
    min_acceptance_rate: float | None = None
    min_mean_acceptance_length: float | None = None

    @classmethod
    def of(cls, spec: MetricsThresholds | None, min_acceptance: float | None) -> Thresholds:
        """The spec's `[metrics]` table, with `--min-acceptance` taking precedence."""
        rate = spec.min_acceptance_rate if spec else None
        length = spec.min_mean_acceptance_length if spec else None
        return cls(min_acceptance if min_acceptance is not None else rate, length)


def parse(text: str) -> SpecDecodeStats | None:
    """The spec-decode counters in a scrape (the one counter model's, patcher.serving.model);
    None when the endpoint has none of them.

    Raises ValueError when the text is not Prometheus exposition format.
    """
    return _stats(model.parse(text, model.VLLM))


def _stats(c: model.Counters) -> SpecDecodeStats | None:
    if not c.spec_decode:
        return None
    return SpecDecodeStats(c.drafts, c.draft_tokens, c.accepted, c.per_position)


def pct(rate: float) -> str:
    """0.15 -> '15 %', 0.4567 -> '45.7 %' (no trailing zeros: people read these)."""
    return f"{rate * 100:.1f}".rstrip("0").rstrip(".") + " %"


def _measures(stats: SpecDecodeStats, th: Thresholds) -> tuple[list[str], list[str], str]:
    """(every measure as text, the ones below their threshold, the raw counts)."""
    rate, length = stats.acceptance_rate, stats.mean_acceptance_length
    assert length is not None
    parts: list[str] = []
    failing: list[str] = []
    if rate is None:  # drafts without a draft-token counter (SGLang): no rate to judge
        parts.append(NO_RATE)
        if th.min_acceptance_rate is not None:
            failing.append(parts[-1])
    for text, value, minimum, shown in (
        *([(f"acceptance {pct(rate)}", rate, th.min_acceptance_rate, pct)] if rate else []),
        (f"mean acceptance length {length:.2f}", length, th.min_mean_acceptance_length, _num),
    ):
        if minimum is None:
            parts.append(text)
        elif value < minimum:
            parts.append(f"{text} < {shown(minimum)}")
            failing.append(parts[-1])
        else:
            parts.append(f"{text} >= {shown(minimum)}")
    if stats.per_position_rate:
        parts.append("per position " + "/".join(f"{r:.2f}" for r in stats.per_position_rate))
    counts = (
        f"{stats.drafts:g} drafts, {stats.draft_tokens:g} draft tokens, {stats.accepted:g} accepted"
    )
    return parts, failing, counts


NO_RATE = (
    "acceptance rate cannot be computed: the engine exports no draft-token counter "
    "(SGLang: only a gauge shows draft tokens)"
)


def _num(x: float) -> str:
    return f"{x:g}"


def evaluate(
    stats: SpecDecodeStats | None, th: Thresholds, loaded: bool, window: float | None = None
) -> tuple[bool, str]:
    """(passed, detail). No counters or no drafts yet is inconclusive, which is not a pass.
    `window`: the stats are the increase over that many seconds (said in the detail)."""
    if stats is None:
        return False, (
            "inconclusive: the endpoint serves no speculative-decoding counters (is "
            "speculative decoding enabled on that server? is --metrics-profile its engine's?)"
        )
    if stats.drafts <= 0:
        if window is not None:
            return False, (
                f"inconclusive: no drafts in the {window:g} s window (the server did not "
                "speculate meanwhile); verify while it serves traffic, or widen --metrics-window"
            )
        return False, (
            "inconclusive: no drafts counted yet (the server has not speculated since it "
            "started); send it traffic, then verify again"
        )
    parts, failing, counts = _measures(stats, th)
    if window is not None:
        counts = f"in the last {window:g} s: {counts}"
    if failing:
        what = "patch is loaded but " if loaded else ""
        rest = ", ".join(p for p in parts if p not in failing)
        return False, (
            f"{what}speculative decoding is not paying: {'; '.join(failing)}; {rest} ({counts})"
        )
    unset = th.min_acceptance_rate is None and th.min_mean_acceptance_length is None
    return True, f"{', '.join(parts)} ({counts})" + ("; no threshold set" if unset else "")


@dataclass(frozen=True)
class Scrape:
    """What the agent fetched on the host: the text, or why there is none. With a window,
    `before` is the first of the two scrapes and `window` the seconds between them."""

    url: str
    text: str | None
    error: str | None
    seconds: float
    before: Scrape | None = None
    window: float | None = None
    profile: str = "vllm"  # whose counter names the endpoint serves (model.PROFILES)


def scrape(
    transport: Transport,
    url: str,
    timeout: float = DEFAULT_TIMEOUT,
    window: float | None = None,
    sleep: Any = time.sleep,
) -> Scrape:
    """One fetch per host, by the agent on that host (its `localhost` is the server's); with
    `window`, two fetches that many seconds apart (the second one is the result)."""
    if window is None:
        return _fetch(transport, url, timeout)
    first = _fetch(transport, url, timeout)
    if first.text is None:
        return first
    started = time.monotonic()
    sleep(window)
    second = _fetch(transport, url, timeout)
    elapsed = time.monotonic() - started
    return Scrape(url, second.text, second.error, first.seconds + second.seconds, first, elapsed)


def scrape_as(profile: str, transport: Transport, url: str, window: float | None) -> Scrape:
    """`scrape`, the text to be read by `profile`'s counter names (--metrics-profile)."""
    return replace(scrape(transport, url, window=window), profile=profile)


def _fetch(transport: Transport, url: str, timeout: float) -> Scrape:
    res: dict[str, Any] = transport.call({"op": "fetch", "url": url, "timeout": timeout})
    seconds = float(res.get("seconds", 0.0))
    if not res.get("ok"):
        return Scrape(url, None, f"agent refused: {res.get('error')}", seconds)
    if res.get("error"):
        return Scrape(url, None, str(res["error"]), seconds)
    return Scrape(url, str(res.get("text", "")), None, seconds)


def probe(
    got: Scrape,
    spec: MetricsThresholds | None,
    min_acceptance: float | None,
    loaded: bool,
    stale_processes: int = 0,
) -> ProbeResult:
    """The `metrics` probe of one spec on one host, read by the scrape's profile."""
    if got.text is None:
        return ProbeResult(PROBE_NAME, False, f"cannot scrape {got.url}: {got.error}", got.seconds)
    try:
        names = model.PROFILES[got.profile]
        now = model.parse(got.text, names)
        if got.before is not None and got.before.text is not None:
            now = now.since(model.parse(got.before.text, names))
        stats = _stats(now)
    except model.ScrapeRefused as exc:
        return ProbeResult(
            PROBE_NAME, False, f"{got.url} sent a scrape over vpatch's bounds: {exc}", got.seconds
        )
    except ValueError:
        # The parser's message quotes the offending line: the body is the host's data (an
        # HTML login page, a token), never echoed into reports.
        size = len(got.text.encode())
        return ProbeResult(
            PROBE_NAME,
            False,
            f"{got.url} did not serve Prometheus text ({size} bytes that do not parse as the "
            "exposition format; body not shown)",
            got.seconds,
        )
    window = round(got.window, 1) if got.window is not None else None
    ok, detail = evaluate(stats, Thresholds.of(spec, min_acceptance), loaded, window)
    if stale_processes and stats is not None and stats.drafts > 0:
        detail += (
            f" [{stale_processes} process(es) of this environment started before the patch "
            "was written: these numbers may come from pre-patch code; restart them]"
        )
    return ProbeResult(PROBE_NAME, ok, detail, got.seconds)


def check_url(url: str) -> str:
    """`--metrics URL` must be http(s) with a host: checked before any host is contacted."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--metrics {url!r} is not an http:// or https:// URL",
            "e.g. --metrics http://localhost:8000/metrics (fetched on each target host)",
        )
    return url


def parse_window(text: str) -> float:
    """`--metrics-window SECONDS`: how far apart the two scrapes are (0 < s <= 3600)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 3600:
        raise UsageError(
            f"--metrics-window {text!r} is not a number of seconds between 0 and 3600",
            "e.g. --metrics-window 60 (judge the last minute of traffic)",
        )
    return value


def parse_rate(text: str) -> float:
    """`--min-acceptance`: a fraction (0.4) or a percentage (40%)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise UsageError(
            f"--min-acceptance {text!r} is not a rate between 0 and 1",
            "e.g. --min-acceptance 0.4 (or 40%)",
        )
    return value
