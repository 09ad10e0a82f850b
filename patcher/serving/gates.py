"""The gate table: every gate a rollout can set is one row of GATES, and the row carries all
of it: its `[metrics]` key, which way it bounds, what it judges (quantity and unit), which
latency histogram and quantile it reads, how its value is read from a window and which
function weighs the evidence. So a new gate is one row here and one `[metrics]` key in
patcher/specs/model.py and validate.py (a p95 of a latency already measured: nothing else).

Two ways to judge, one table:
- without `--confidence` (and without control hosts) a gate compares the window's numbers
  with its threshold, as a point: the window's acceptance, the after/before ratio of tokens/s,
  a latency quantile against seconds; a latency ratio by its counts (the canary's share of
  requests over ratio x the reference's quantile, at most the reference's share over it);
- with a confidence level, a gate decides only on enough evidence: a proportion, a latency
  ratio from the bucket counts (the canary's requests over the bound against the reference's
  over its quantile), a tokens/s ratio from per-interval samples against the control hosts'
  samples of the same window (else the baseline's: after vs before), and says EXTEND while
  the evidence is short. By which tests is the rule's (`Look`, Gates.rule): the sequential
  rule's intervals valid at every look (patcher.serving.sequential), or the fixed rule's
  Wilson, Newcombe and rank tests at the error's per-look share (patcher.serving.stats).
Ratio gates compare with a reference: the control hosts when the rollout has some (traffic
that changed during the window changed theirs too), else the host's own baseline; every
judged gate says which (`compared_with`), and what it judged (`quantity`, `unit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from patcher.serving import histogram, sequential, stats
from patcher.serving.measures import Measures
from patcher.serving.model import E2E, ITL, TPOT, TTFT

CONTROL, BASELINE = "control", "baseline"
# How a gate with a confidence level is judged at each look (Gates.rule, `--rule`): by an
# anytime-valid sequence (patcher.serving.sequential), or by the fixed-sample tests of
# patcher.serving.stats at the error's Bonferroni share per look.
SEQUENTIAL, FIXED = "sequential", "fixed"
RULES = (SEQUENTIAL, FIXED)
ABSOLUTE, RATIO, CEILING = "absolute", "ratio", "ceiling"


def pct(x: float) -> str:
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + " %"


def _share(x: float) -> str:
    """A tail share: a percent, with two digits where it is under 1 % (0.04 %, not 0 %)."""
    return f"{x * 100:.2g} %" if 0 < x < 0.01 else pct(x)


def _x(x: float) -> str:
    return f"{x:.2f}x"


def _s(x: float) -> str:
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def shown(row: Row, value: float, limit: float) -> str:
    """The measure as the gate's detail prints it: where its rounding reads the same as the
    limit's (1.504x against 1.5x: "1.50x > 1.50x"), four digits more say which side it is."""
    text = row.show(value)
    if value != limit and text == row.show(limit):
        text += f" ({value:.4g})"
    return text


@dataclass(frozen=True)
class Look:
    """How a gate with a confidence level is judged at one look: at `confidence` (the fixed
    rule's per-look share, Gates.level), by `rule`, and whether the reference is the control
    hosts' window scraped at the same ticks (`paired`: interval i of each is the same time).
    Each kind of evidence asks it for its test, so a row names one evidence function for
    both rules."""

    confidence: float
    rule: str = FIXED
    paired: bool = False

    def proportion(self, successes: float, trials: float, limit: float, at_least: bool) -> Ev:
        if self.rule == SEQUENTIAL:
            return sequential.proportion(successes, trials, limit, at_least, self.confidence)
        test = stats.proportion_at_least if at_least else stats.proportion_at_most
        return test(successes, trials, limit, self.confidence)

    def two_at_most(self, s1: float, n1: float, s2: float, n2: float) -> Ev:
        """Is p1 at most p2?"""
        if self.rule == SEQUENTIAL:
            return sequential.proportions_at_most(s1, n1, s2, n2, self.confidence)
        return stats.proportions_at_most(s1, n1, s2, n2, self.confidence)

    def rates(self, x: Sequence[float], y: Sequence[float], limit: float, at_least: bool) -> Ev:
        """Per-interval rates x against `limit` times y's."""
        if self.rule == SEQUENTIAL:
            cs = sequential.ratio_cs(x, y, self.paired, self.confidence)
            if cs is None:  # too few intervals yet
                return stats.Evidence(stats.EXTEND, min(len(x), len(y)), test="t-mixture")
            low, high, n = cs
            return Ev(sequential.decide(low, high, limit, at_least), n, low, high, test="t-mixture")
        if len(x) < stats.MIN_SAMPLES or len(y) < stats.MIN_SAMPLES:  # too few intervals yet
            return stats.Evidence(stats.EXTEND, min(len(x), len(y)), test="mann-whitney")
        test = stats.samples_at_least if at_least else stats.samples_at_most
        return test(x, y, limit, self.confidence)


Ev = stats.Evidence


@dataclass(frozen=True)
class Row:
    """One gate, all it takes in one place. `key`: the `[metrics]` key and the Gates field;
    `at_least`: the threshold is a floor (else a ceiling); `kind`: ABSOLUTE (the window's
    value), RATIO (over the reference's), CEILING (a latency quantile under a number of
    seconds); `quantity` and `unit`: what the gate judges, in words, for the report;
    `value`: the point value from a window; `evidence`: the statistical answer with
    `--confidence` (None: no samples to test); `why`: the Measures.why key that says why the
    value is missing; `latency`, `quantile` and `observations`: the histogram a latency gate
    reads (model.LATENCIES), the quantile it judges (0.99 for a p99) and what the histogram
    counts (requests, or engine steps); `series`: the key of a window's per-interval series
    (Measures.series) that shows this gate's measure, for the report's chart of it."""

    name: str
    key: str
    at_least: bool
    kind: str
    quantity: str
    unit: str
    value: Callable[[Row, Measures], float | None]
    evidence: Callable[[Row, float, Measures, Measures | None, Look], stats.Evidence | None]
    show: Callable[[float], str]
    why: Callable[[Row, Measures], str]
    latency: str = ""
    quantile: float | None = None
    observations: str = ""  # what one observation of the histogram is: "requests", "steps"
    series: str = ""

    @property
    def tail(self) -> float:
        """The share of requests a latency quantile leaves above it (p99: 1 %)."""
        return 1 - (self.quantile if self.quantile is not None else 1.0)


# ---------------------------------------------------------------------------------------------
# Values, evidence and reasons, one function per kind of measure (a row names its own)


def _said(key: str) -> Callable[[Row, Measures], str]:
    """Why a window has no value, as the measures said it (Measures.why[key])."""
    return lambda row, m: m.why.get(key, "")


# Why a latency histogram is missing, where more can be said than that the endpoint lacks it.
ABSENT = {
    TPOT: "the endpoint exports no request-level time-per-output-token histogram (vLLM 0.12 "
    "on: vllm:request_time_per_output_token_seconds); e2e latency / output tokens per request "
    "cannot be derived from histograms (latency and token counts are exported apart, so "
    "which request had which is lost)",
}


def _latency_why(row: Row, m: Measures) -> str:
    b = m.buckets.get(row.latency)
    if b is None:
        return ABSENT.get(row.latency, "the endpoint exports no such histogram")
    if histogram.count(b) <= 0:
        return f"no {row.observations} observed in the {m.seconds:.1f} s window"
    return ""


def _acceptance_rate(row: Row, m: Measures) -> float | None:
    return m.acceptance_rate


def _acceptance_evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, look: Look
) -> stats.Evidence | None:
    if after.drafts <= 0 or after.acceptance_rate is None:
        return None
    # A draft's tokens are accepted together or not (a rejection ends the draft), so a
    # draft, not a token, is the independent trial: n = drafts, the conservative n.
    return look.proportion(after.acceptance_rate * after.drafts, after.drafts, limit, True)


def _mean_length(row: Row, m: Measures) -> float | None:
    return m.mean_acceptance_length


def _mean_length_evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, look: Look
) -> stats.Evidence | None:
    if after.drafts <= 0 or after.draft_tokens <= 0 or after.acceptance_rate is None:
        return None
    k = after.draft_tokens / after.drafts
    ev = look.proportion(after.acceptance_rate * after.drafts, after.drafts, (limit - 1) / k, True)
    lo, hi = ev.low, ev.high
    return stats.Evidence(
        ev.decision,
        ev.n,
        None if lo is None else 1 + k * lo,
        None if hi is None else 1 + k * hi,
        test=ev.test,
    )


def _tokens_per_s(row: Row, m: Measures) -> float | None:
    return m.tokens_per_s


def _rate_evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, look: Look
) -> stats.Evidence | None:
    """The canary's per-interval tokens/s ranked against the reference's."""
    if ref is None:
        return None
    return look.rates(after.samples, ref.samples, limit, row.at_least)


def _error_rate(row: Row, m: Measures) -> float | None:
    return m.error_rate


def _error_evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, look: Look
) -> stats.Evidence | None:
    return look.proportion(after.errors, after.finished, limit, False)


def _quantile(row: Row, m: Measures) -> float | None:
    """The row's quantile of the window's histogram (Prometheus' rule), for the report and
    the point judgement; the decision with evidence comes from the bucket counts."""
    b = m.buckets.get(row.latency)
    return histogram.quantile(row.quantile, b) if b and row.quantile is not None else None


def _ceiling_evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, look: Look
) -> stats.Evidence | None:
    """A quantile under `limit` seconds is a proportion: at most the row's tail share of the
    requests above `limit` (p99 <= 0.5 s: at most 1 % over 0.5 s), by its Wilson interval."""
    b = after.buckets.get(row.latency)
    if not b:
        return None
    above, total = histogram.share_above(limit, b)
    return look.proportion(above, total, row.tail, False)


@dataclass(frozen=True)
class Tail:
    """A latency ratio gate's comparison from bucket counts: `bound` = the ratio times the
    reference's quantile (`ref_q`); the canary's requests over `bound` against the
    reference's over `ref_q` (its tail share, up to the interpolation inside a bucket)."""

    ref_q: float
    bound: float
    above: float
    n: float
    ref_above: float
    ref_n: float

    @property
    def ok(self) -> bool:
        """The point judgement: the canary's share over the bound at most the reference's."""
        return self.above * self.ref_n <= self.ref_above * self.n

    def text(self, row: Row, limit: float, against: str) -> str:
        p = f"p{(row.quantile or 0) * 100:g}"
        return (
            f"{_share(self.above / self.n)} of {self.n:g} {row.observations} "
            f"over {_s(self.bound)} "
            f"({_x(limit)} the {against}'s {p} {_s(self.ref_q)}); the {against}'s "
            f"{_share(self.ref_above / self.ref_n)} of {self.ref_n:g} over its {p}"
        )


def tail(row: Row, limit: float, after: Measures, ref: Measures) -> Tail | None:
    """The counts a latency ratio gate compares; None when either window has no requests."""
    a, r = after.buckets.get(row.latency), ref.buckets.get(row.latency)
    if not a or not r or row.quantile is None:
        return None
    ref_q = histogram.quantile(row.quantile, r)
    if ref_q is None:
        return None
    bound = limit * ref_q
    above, n = histogram.share_above(bound, a)
    ref_above, ref_n = histogram.share_above(ref_q, r)
    if n <= 0 or ref_n <= 0:
        return None
    return Tail(ref_q, bound, above, n, ref_above, ref_n)


def _tail_evidence(
    row: Row, limit: float, after: Measures, ref: Measures | None, look: Look
) -> stats.Evidence | None:
    """Canary against reference as two proportions (Newcombe): its share of requests over
    `limit` x the reference's quantile against the reference's share over that quantile.
    Counts, never a ratio of two quantiles that each sit on a bucket edge."""
    t = tail(row, limit, after, ref) if ref is not None else None
    if t is None:
        return None
    return look.two_at_most(t.above, t.n, t.ref_above, t.ref_n)


# ---------------------------------------------------------------------------------------------
# The table

# What each latency histogram measures, as the report names it (model.LATENCIES' units).
QUANTITIES = {
    TTFT: "time to first token, per request",
    TPOT: "time per output token, per request (decode time / output tokens after the first)",
    ITL: "inter-token latency per engine step (a step may emit several tokens)",
    E2E: "end-to-end latency, per request",
}


def latency_rows(
    name: str, latency: str, unit: str, per: str, quantile: float = 0.99
) -> tuple[Row, Row]:
    """A latency's two gates at one quantile: over the reference's (a ratio) and under a
    number of seconds; their names and keys say the quantile (`ttft_p99`, `max_ttft_p99_s`).
    `per`: what one observation of the histogram is (requests, steps)."""
    p = f"p{quantile * 100:g}"
    quantity = QUANTITIES[latency]
    return (
        Row(
            f"{name}_{p}_ratio",
            f"max_{name}_{p}_ratio",
            False,
            RATIO,
            quantity,
            unit,
            _quantile,
            _tail_evidence,
            _x,
            _latency_why,
            latency,
            quantile,
            per,
            series=f"{latency}_{p}",
        ),
        Row(
            f"{name}_{p}",
            f"max_{name}_{p}_s",
            False,
            CEILING,
            quantity,
            unit,
            _quantile,
            _ceiling_evidence,
            _s,
            _latency_why,
            latency,
            quantile,
            per,
            series=f"{latency}_{p}",
        ),
    )


GATES: tuple[Row, ...] = (
    Row(
        "acceptance",
        "min_acceptance_rate",
        True,
        ABSOLUTE,
        "acceptance rate (accepted / drafted tokens)",
        "share of drafted tokens",
        _acceptance_rate,
        _acceptance_evidence,
        pct,
        _said("acceptance"),
        series="acceptance_rate",
    ),
    Row(
        "mean_acceptance_length",
        "min_mean_acceptance_length",
        True,
        ABSOLUTE,
        "mean acceptance length (1 + accepted tokens per draft)",
        "tokens per draft",
        _mean_length,
        _mean_length_evidence,
        lambda x: f"{x:.2f}",
        _said("acceptance"),
        series="mean_acceptance_length",
    ),
    Row(
        "tokens_per_s_ratio",
        "min_tokens_per_s_ratio",
        True,
        RATIO,
        "tokens/s",
        "generation tokens per second",
        _tokens_per_s,
        _rate_evidence,
        _x,
        _said("tokens_per_s"),
        series="tokens_per_s",
    ),
    Row(
        "error_rate",
        "max_error_rate",
        False,
        ABSOLUTE,
        "aborted or failed requests / finished requests",
        "share of requests",
        _error_rate,
        _error_evidence,
        pct,
        _said("error_rate"),
        series="error_rate",
    ),
    *latency_rows("tpot", TPOT, "seconds per output token", "requests"),
    *latency_rows("ttft", TTFT, "seconds", "requests"),
    *latency_rows("itl", ITL, "seconds per engine step", "steps"),
    *latency_rows("e2e", E2E, "seconds", "requests"),
)


def keys() -> tuple[str, ...]:
    """The `[metrics]` keys, in GATES order (read when asked: the table is the one source)."""
    return tuple(r.key for r in GATES)


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
    # SEQUENTIAL: each look tests at `confidence` itself, by intervals valid at every look.
    rule: str = FIXED

    @property
    def level(self) -> float | None:
        """The confidence each look tests at."""
        if self.confidence is None:
            return None
        if self.rule == SEQUENTIAL:
            return self.confidence
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
        unknown = set(limits) - set(keys())
        if unknown:
            raise TypeError(f"no such gate: {sorted(unknown)}")
        kept = tuple((k, float(v)) for k in keys() if (v := limits.get(k)) is not None)
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
        out: dict[str, Any] = {k: self.limit(k) for k in keys()}
        out["allow_no_traffic"] = self.allow_no_traffic
        out["confidence"] = self.confidence
        out["looks"] = self.looks
        out["rule"] = self.rule
        return out
