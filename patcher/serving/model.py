"""The one counter model: which series of an engine's Prometheus endpoint mean what, per
engine (a PROFILES row: vLLM, SGLang) and release, and one scrape read into `Counters`: its
series one by one (endpoint x metric x label set), and their sums over engines, models and
endpoints, taken once each series is reduced by Prometheus' increase rule (`since`,
`increases`). A scrape over a bound (MAX_*) is refused before it sizes anything.
`vpatch verify --metrics` (patcher.serving.metrics) and the rollout's gates (patcher.rollout,
patcher.serving.gates) both read scrapes here.

A name a release renamed is a tuple, the names in the order they are looked for: the first
one the scrape has is the one read (vLLM's inter-token latency histogram is
`vllm:inter_token_latency_seconds` since 0.11, `vllm:time_per_output_token_seconds` before).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from patcher.serving import histogram

# The latency histograms a gate may read, by the key the gate table uses. Each has its unit:
# TTFT: seconds to a request's first token; TPOT: a request's decode time over its output
# tokens after the first (one observation per finished request); ITL: seconds between two
# outputs of a request, one observation per engine *step* (under speculative decoding a step
# emits up to 1 + k tokens, so this is not a per-token latency); E2E: a request's seconds.
TTFT, TPOT, ITL, E2E = "ttft", "tpot", "itl", "e2e"
LATENCIES = (TTFT, TPOT, ITL, E2E)


@dataclass(frozen=True)
class Profile:
    """What an engine's counters are called. `accepted_from_generation`: the engine exports
    no accepted-token counter (SGLang): accepted = generation tokens - verify rounds (each
    round emits its accepted drafts plus one token of its own)."""

    name: str
    prefix: str
    generation: str
    drafts: str | None
    draft_tokens: str | None
    accepted: str | None
    finished: str | None  # all finished requests
    finished_reason: str | None  # the label that says how (vLLM), with ERROR_REASONS
    errors: str | None  # a counter of aborted/failed requests of its own (SGLang)
    latency: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    accepted_from_generation: bool = False
    per_position: str | None = None  # accepted tokens by draft position (`position` label)


ERROR_REASONS = frozenset({"abort", "error"})

# vLLM: vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py (`verify --metrics`
# reads the spec-decode ones, with the per-position counter, through these names too).
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
VLLM = Profile(
    name="vllm",
    prefix="vllm:",
    generation="vllm:generation_tokens_total",
    drafts=VLLM_DRAFTS,
    draft_tokens=VLLM_DRAFT_TOKENS,
    accepted=VLLM_ACCEPTED,
    finished="vllm:request_success_total",
    finished_reason="finished_reason",
    errors=None,
    latency={
        TTFT: ("vllm:time_to_first_token_seconds",),
        # decode time / (output tokens - 1) per finished request, 0 for one token: 0.12.0 on
        # (vllm/v1/metrics/stats.py, loggers.py); the 0.10 code has only the per-step ITL.
        TPOT: ("vllm:request_time_per_output_token_seconds",),
        ITL: (
            "vllm:inter_token_latency_seconds",  # 0.11 on
            "vllm:time_per_output_token_seconds",  # before 0.11
        ),
        E2E: ("vllm:e2e_request_latency_seconds",),
    },
    per_position=VLLM_PER_POS,
)

# SGLang: python/sglang/srt/metrics/collector.py. No accepted- or draft-token counter: a
# verify round is a draft; the acceptance rate needs draft tokens, which only a gauge shows.
SGLANG = Profile(
    name="sglang",
    prefix="sglang:",
    generation="sglang:generation_tokens_total",
    drafts="sglang:spec_verify_calls_total",
    draft_tokens=None,
    accepted=None,
    finished="sglang:num_requests_total",
    finished_reason=None,
    errors="sglang:num_aborted_requests_total",
    latency={
        TTFT: ("sglang:time_to_first_token_seconds",),
        # no request-level per-output-token histogram: a TPOT gate says it cannot be computed
        ITL: ("sglang:inter_token_latency_seconds",),
        E2E: ("sglang:e2e_request_latency_seconds",),
    },
    accepted_from_generation=True,
)

PROFILES = {p.name: p for p in (VLLM, SGLANG)}


# One series of a scrape: (quantity, which series). The quantity is a Counters field
# (QUANTITIES), `position N` (accepted tokens at draft position N) or a LATENCIES key (a
# histogram: all its buckets are one series); which series is the endpoint's tag (`tagged`)
# and the metric's name and labels (`le` left out), so the same labels on two endpoints
# are two series.
SeriesKey = tuple[str, str]
QUANTITIES = ("drafts", "draft_tokens", "accepted", "generation_tokens", "finished", "errors")
POSITION = "position "


@dataclass(frozen=True)
class Counters:
    """The counters of a scrape, summed over engines, models and endpoints (the fields), and
    the series they are the sum of (`series`, `hists`: one value per endpoint x metric x
    label set), which `since` reduces one by one before summing: one engine's restart resets
    that engine's series only. A Counters made from sums alone (by hand, or a golden case's
    JSON without series) reads each sum as one series.

    `spec_decode`: the server exposes spec-decode counters at all (a server without
    speculation has none). `latency`: the latency histograms found, by LATENCIES key
    (cumulative buckets). `derived_accepted`: accepted tokens are generation tokens - drafts
    (Profile.accepted_from_generation), computed from the sums once the series are reduced."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    generation_tokens: float = 0.0
    finished: float = 0.0
    errors: float = 0.0
    spec_decode: bool = False
    latency: tuple[tuple[str, histogram.Buckets], ...] = ()
    # Accepted tokens by draft position (`verify --metrics` shows the rate of each); not
    # compared or summed by the rollout (a window's gates never read them).
    per_position: tuple[float, ...] = field(default=(), compare=False)
    series: Mapping[SeriesKey, float] = field(default_factory=dict, compare=False, repr=False)
    hists: Mapping[SeriesKey, histogram.Buckets] = field(
        default_factory=dict, compare=False, repr=False
    )
    derived_accepted: bool = field(default=False, compare=False)

    def values(self) -> tuple[float, ...]:
        return (
            self.drafts,
            self.draft_tokens,
            self.accepted,
            self.generation_tokens,
            self.finished,
            self.errors,
        )

    def buckets(self, key: str) -> histogram.Buckets | None:
        return dict(self.latency).get(key)

    def empty(self) -> bool:
        """Nothing counted and no series: what `plus` starts from (`Counters()`)."""
        return not (
            self.series or self.hists or self.latency or self.per_position or any(self.values())
        )

    def own(self) -> tuple[Mapping[SeriesKey, float], Mapping[SeriesKey, histogram.Buckets]]:
        """The series this is the sum of (each sum one series when none were kept)."""
        if self.series or self.hists:
            return self.series, self.hists
        s = {(q, ""): v for q, v in zip(QUANTITIES, self.values(), strict=True)}
        s.update({(f"{POSITION}{i}", ""): v for i, v in enumerate(self.per_position)})
        return s, {(k, ""): b for k, b in self.latency}

    def reset_since(self, before: Counters) -> bool:
        """A series lower than before (a counter, or any bucket of a histogram, or its
        bounds changed): the engine that exports it restarted. A series gone or new is not
        a reset (`since` says how each counts)."""
        now_s, now_h = self.own()
        then_s, then_h = before.own()
        if any(k in then_s and v < then_s[k] for k, v in now_s.items()):
            return True
        return any(k in then_h and histogram.went_down(b, then_h[k]) for k, b in now_h.items())

    def since(self, before: Counters) -> Counters:
        """The increase from an earlier scrape of the same endpoints, series by series, then
        summed (Prometheus' `sum(increase(...))` over two samples, without extrapolation):

        - a series lower than before restarted in between: all it counts now is new (from
          zero), the other series' increases are unaffected;
        - a series absent before counts its whole value (it started from zero in between: a
          label set an engine creates on first use, an engine that came back);
        - a series absent now counts nothing (what it counted before is in earlier windows).

        The sums only: an increase keeps no series (`increases` walks a whole window)."""
        s, h = before.own()
        return _increase(self, s, h)

    def plus(self, other: Counters) -> Counters:
        """Two increases added (their sums), or two endpoints' scrapes joined: their series
        united, a series both have added (`tagged` keeps two endpoints' series apart)."""
        if other.empty() or self.empty():
            one = self if other.empty() else other
            return replace(one, spec_decode=self.spec_decode or other.spec_decode)
        a_s, a_h = self.own()
        b_s, b_h = other.own()
        s = dict(a_s)
        for k, v in b_s.items():
            s[k] = s.get(k, 0.0) + v
        h = dict(a_h)
        for k, b in b_h.items():
            h[k] = histogram.merge([h[k], b]) if k in h else b
        derived = self.derived_accepted or other.derived_accepted
        return of_series(s, h, self.spec_decode or other.spec_decode, derived)

    def tagged(self, tag: str) -> Counters:
        """The same counters, each series named as `tag`'s (an endpoint, a control host):
        joined with `plus`, the same labels on two endpoints stay two series."""
        s, h = self.own()
        return replace(
            self,
            series={(q, f"{tag} {sid}"): v for (q, sid), v in s.items()},
            hists={(k, f"{tag} {sid}"): b for (k, sid), b in h.items()},
        )

    @classmethod
    def of(cls, data: dict[str, Any]) -> Counters:
        """From `to_json`. Without `series` (the sums alone, as older files hold them): each
        sum is one series."""
        data = dict(data)
        lat = data.pop("latency", None) or {}
        series = data.pop("series", None)
        hists = data.pop("histograms", None)
        derived = bool(data.pop("accepted_from_generation", False))
        if series is not None or hists is not None:
            s = {
                (str(q), str(sid)): float(v)
                for q, d in (series or {}).items()
                for sid, v in d.items()
            }
            h = {
                (str(k), str(sid)): _buckets(v)
                for k, d in (hists or {}).items()
                for sid, v in d.items()
            }
            return of_series(s, h, bool(data.get("spec_decode", False)), derived)
        return replace(
            cls(**data),
            latency=_lat({k: _buckets(v) for k, v in lat.items()}),
            derived_accepted=derived,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "generation_tokens": self.generation_tokens,
            "finished": self.finished,
            "errors": self.errors,
            "spec_decode": self.spec_decode,
            "latency": {k: _pairs(v) for k, v in self.latency},
        }
        if self.derived_accepted:
            out["accepted_from_generation"] = True
        if self.series or self.hists:
            series: dict[str, dict[str, float]] = {}
            for (q, sid), v in self.series.items():
                series.setdefault(q, {})[sid] = v
            hists: dict[str, dict[str, list[list[float | str]]]] = {}
            for (k, sid), b in self.hists.items():
                hists.setdefault(k, {})[sid] = _pairs(b)
            out.update(series=series, histograms=hists)
        return out


def of_series(
    series: Mapping[SeriesKey, float],
    hists: Mapping[SeriesKey, histogram.Buckets],
    spec_decode: bool,
    derived_accepted: bool = False,
) -> Counters:
    """Counters whose sums are those of `series` and `hists` (histograms of one key merged
    over their bounds' union: histogram.merge)."""
    totals: dict[str, float] = {}
    for (q, _sid), v in series.items():
        totals[q] = totals.get(q, 0.0) + v
    by_key: dict[str, list[histogram.Buckets]] = {}
    for (k, _sid), b in hists.items():
        by_key.setdefault(k, []).append(b)
    return replace(
        _summed(totals, spec_decode, derived_accepted),
        latency=_lat({k: histogram.merge(bs) for k, bs in by_key.items()}),
        series=series,
        hists=hists,
        derived_accepted=derived_accepted,
    )


def _summed(totals: Mapping[str, float], spec_decode: bool, derived_accepted: bool) -> Counters:
    """Counters of summed quantities (no series, no latency)."""
    d = [totals.get(q, 0.0) for q in QUANTITIES]
    if derived_accepted:  # accepted = generation - drafts (the drafts' own tokens out)
        d[2] = max(0.0, d[3] - d[0]) if d[0] > 0 else 0.0
    positions = [int(q[len(POSITION) :]) for q in totals if q.startswith(POSITION)]
    per_pos = tuple(
        totals.get(f"{POSITION}{i}", 0.0) for i in range(max(positions, default=-1) + 1)
    )
    return Counters(
        d[0],
        d[1],
        d[2],
        d[3],
        d[4],
        d[5],
        spec_decode,
        per_position=per_pos,
    )


def _increase(
    now: Counters, seen: Mapping[SeriesKey, float], seen_h: Mapping[SeriesKey, histogram.Buckets]
) -> Counters:
    """`now`'s increase over the series' values `seen` before (Counters.since's rules)."""
    s, h = now.own()
    totals: dict[str, float] = {}
    for (q, sid), v in s.items():
        then = seen.get((q, sid))
        inc = v if then is None or v < then else v - then
        totals[q] = totals.get(q, 0.0) + inc
    by_key: dict[str, list[histogram.Buckets]] = {}
    for (k, sid), b in h.items():
        old = seen_h.get((k, sid))
        by_key.setdefault(k, []).append(b if old is None else histogram.delta(b, old))
    return replace(
        _summed(totals, now.spec_decode, now.derived_accepted),
        latency=_lat({k: histogram.merge(bs) for k, bs in by_key.items()}),
        derived_accepted=now.derived_accepted,
    )


def increases(scrapes: Sequence[Counters]) -> list[Counters]:
    """The increase of each interval between consecutive scrapes of a window (`since`'s
    rules), where a series missing from a scrape is compared, when it is back, with its last
    value seen in the window: higher, the increase since then (it was only not shown);
    lower, it restarted (counted from zero). A series that vanishes keeps what it counted
    until its last scrape. A series first seen after the window's first scrape counts its
    whole value (from zero)."""
    if not scrapes:
        return []
    s0, h0 = scrapes[0].own()
    seen, seen_h = dict(s0), dict(h0)
    out = []
    for c in scrapes[1:]:
        out.append(_increase(c, seen, seen_h))
        s, h = c.own()
        seen.update(s)
        seen_h.update(h)
    return out


def _pairs(b: histogram.Buckets) -> list[list[float | str]]:
    return [[_bound(x), c] for x, c in b]


def _buckets(v: Any) -> histogram.Buckets:
    return tuple(sorted((float(b), float(c)) for b, c in v))


def _bound(b: float) -> float | str:
    return "+Inf" if math.isinf(b) else b


def _lat(d: Mapping[str, histogram.Buckets]) -> tuple[tuple[str, histogram.Buckets], ...]:
    return tuple((k, d[k]) for k in LATENCIES if k in d)


# Bounds on what one endpoint's scrape may hold: over any of them the scrape is refused
# (ScrapeRefused: that scrape fails with the reason, a gate says it, `verify --metrics` says
# it), before the text is parsed where the bound can be read off the text, so that nothing
# an endpoint sends sizes what the controller builds. vLLM's own scrapes hold a few thousand
# lines, a few dozen buckets per histogram and as many positions as speculative tokens.
MAX_CHARS = 16 * 1024 * 1024  # the agent's fetch bound (patcher/agent/fetch.py), in characters
MAX_LINES = 250_000  # samples and comments: the series a scrape may hold
MAX_LINE = 64 * 1024  # one line's characters: what the parser reads a label value from
MAX_LABEL_VALUE = 4096  # a label value of a series read
MAX_BUCKETS = 1024  # `le` bounds of one histogram series
MAX_POSITION = 63  # the highest draft `position` label value


class ScrapeRefused(ValueError):
    """A scrape over one of the bounds above; the message says which and by how much."""


def check_bounds(text: str) -> None:
    """Raise ScrapeRefused when the text is over a bound that can be read without parsing."""
    if len(text) > MAX_CHARS:
        raise ScrapeRefused(f"the scrape is {len(text)} characters, more than {MAX_CHARS}")
    lines = text.count("\n") + 1
    if lines > MAX_LINES:
        raise ScrapeRefused(f"the scrape has {lines} lines, more than {MAX_LINES}")
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if end - start > MAX_LINE:
            raise ScrapeRefused(
                f"line {text.count(chr(10), 0, start) + 1} has {end - start} characters, "
                f"more than {MAX_LINE}"
            )
        start = end + 1


def _series_id(name: str, labels: Mapping[str, str]) -> str:
    """`name{k="v",...}` (sorted, `le` left out): one series of an endpoint."""
    for k, v in labels.items():
        if len(v) > MAX_LABEL_VALUE:
            raise ScrapeRefused(
                f"{name}'s label {k[:64]!r} has a {len(v)}-character value, more than "
                f"{MAX_LABEL_VALUE}"
            )
    inner = ",".join(f"{k}={v!r}" for k, v in sorted(labels.items()) if k != "le")
    return f"{name}{{{inner}}}"


def _canonical(name: str, profile: Profile) -> str:
    """OpenMetrics exposition may escape ':' to '_' (`vllm_generation_tokens_total`)."""
    escaped = profile.prefix[:-1] + "_"
    return profile.prefix + name[len(escaped) :] if name.startswith(escaped) else name


def parse(text: str, profile: Profile = VLLM) -> Counters:
    """The counters of a Prometheus scrape under `profile`, series by series (prometheus_client's
    parser, as `verify --metrics` uses). Raises ScrapeRefused (a ValueError) when the scrape
    is over a bound, ValueError when the text is not exposition format."""
    from patcher.serving import promtext

    check_bounds(text)
    wanted = {
        n: q
        for n, q in zip(
            (
                profile.drafts,
                profile.draft_tokens,
                profile.accepted,
                profile.generation,
                profile.finished,
                profile.errors,
            ),
            QUANTITIES,
            strict=True,
        )
        if n
    }
    spec_names = {profile.drafts, profile.draft_tokens, profile.accepted, profile.per_position}
    series: dict[SeriesKey, float] = {}
    by_name: dict[str, dict[str, dict[float, float]]] = {}  # histogram -> series -> buckets
    hist_names = {f"{n}_bucket": n for names in profile.latency.values() for n in names}
    spec = False

    def add(key: SeriesKey, v: float) -> None:
        series[key] = series.get(key, 0.0) + v

    for family in promtext.families(text):
        for sample in family.samples:
            name = _canonical(sample.name, profile)
            hist = hist_names.get(name)
            quantity = wanted.get(name)
            if (hist is None and quantity is None and name != profile.per_position) or not (
                math.isfinite(sample.value)
            ):
                continue
            sid = _series_id(name, sample.labels)
            if hist is not None:
                try:
                    bound = float(sample.labels.get("le", "nan"))
                except ValueError:
                    continue
                if math.isnan(bound):
                    continue
                h = by_name.setdefault(hist, {}).setdefault(sid, {})
                if bound not in h and len(h) >= MAX_BUCKETS:
                    # the series' name only: its label values are the host's data
                    raise ScrapeRefused(f"a {name} series has more than {MAX_BUCKETS} buckets")
                h[bound] = h.get(bound, 0.0) + sample.value
                continue
            spec = spec or name in spec_names
            if quantity is None:  # accepted tokens by draft position
                pos = sample.labels.get("position", "")
                if not pos.isdecimal() or not pos.isascii():
                    continue
                if len(pos) > 4 or int(pos) > MAX_POSITION:
                    raise ScrapeRefused(
                        f"{name} has position {pos[:20]!r}, above the highest read, {MAX_POSITION}"
                    )
                add((f"{POSITION}{int(pos)}", sid), sample.value)
                continue
            add((quantity, sid), sample.value)
            if (
                profile.finished_reason
                and name == profile.finished
                and sample.labels.get(profile.finished_reason) in ERROR_REASONS
            ):
                add(("errors", sid), sample.value)
    hists: dict[SeriesKey, histogram.Buckets] = {}
    for key, names in profile.latency.items():
        found = next((n for n in names if n in by_name), None)
        if found is not None:
            for sid, h in by_name[found].items():
                hists[(key, sid)] = histogram.buckets_of(h)
    return of_series(series, hists, spec, profile.accepted_from_generation)


def parse_all(texts: Iterable[str], profile: Profile = VLLM) -> Counters:
    """Several endpoints of one host (one per data-parallel engine), joined: the series of
    each endpoint named by its place in the list (`Counters.tagged`), summed."""
    total = Counters()
    for i, text in enumerate(texts):
        total = total.plus(parse(text, profile).tagged(f"#{i}"))
    return total


def rates(series: Sequence[tuple[float, Counters]]) -> list[float]:
    """Generation tokens/s of each interval between consecutive (time, counters) scrapes:
    the rank tests' samples (each series reduced on its own: `increases`)."""
    out = []
    incs = increases([c for _t, c in series])
    for ((t0, _), (t1, _)), inc in zip(pairwise(series), incs, strict=True):
        if t1 > t0:
            out.append(inc.generation_tokens / (t1 - t0))
    return out
