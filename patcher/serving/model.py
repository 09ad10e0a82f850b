"""The one counter model: which series of an engine's Prometheus endpoint mean what, per
engine (a PROFILES row: vLLM, SGLang) and release, and one scrape read into `Counters`
(summed over engines, models and endpoints). `vpatch verify --metrics` (patcher.serving.metrics)
and the rollout's gates (patcher.rollout, patcher.serving.gates) both read scrapes here.

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


@dataclass(frozen=True)
class Counters:
    """The counters of one scrape, summed over engines, models and endpoints. `spec_decode`:
    the server exposes spec-decode counters at all (a server without speculation has none).
    `latency`: the latency histograms found, by LATENCIES key (cumulative buckets)."""

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

    def reset_since(self, before: Counters) -> bool:
        """A counter (or a histogram's count) lower than before: the server restarted."""
        if any(now < then for now, then in zip(self.values(), before.values(), strict=True)):
            return True
        old = dict(before.latency)
        return any(
            key in old and histogram.count(b) < histogram.count(old[key]) for key, b in self.latency
        )

    def since(self, before: Counters) -> Counters:
        """The increase from an earlier scrape of the same endpoint. Any counter lower than
        before means the server restarted in between: all it counts now is new (Prometheus'
        `increase()` rule), so the later scrape is the increase."""
        if self.reset_since(before):
            return self
        d = [now - then for now, then in zip(self.values(), before.values(), strict=True)]
        old = dict(before.latency)
        lat = tuple((k, histogram.delta(b, old[k]) if k in old else b) for k, b in self.latency)
        return Counters(d[0], d[1], d[2], d[3], d[4], d[5], self.spec_decode, lat)

    def plus(self, other: Counters) -> Counters:
        """Two endpoints of one host (data-parallel engines) summed, as engines are."""
        s = [a + b for a, b in zip(self.values(), other.values(), strict=True)]
        lat = dict(self.latency)
        for k, b in other.latency:
            lat[k] = _add(lat[k], b) if k in lat else b
        return Counters(
            s[0], s[1], s[2], s[3], s[4], s[5], self.spec_decode or other.spec_decode, _lat(lat)
        )

    @classmethod
    def of(cls, data: dict[str, Any]) -> Counters:
        data = dict(data)
        lat = data.pop("latency", None) or {}
        return replace(
            cls(**data),
            latency=_lat({k: tuple((float(b), float(c)) for b, c in v) for k, v in lat.items()}),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "generation_tokens": self.generation_tokens,
            "finished": self.finished,
            "errors": self.errors,
            "spec_decode": self.spec_decode,
            "latency": {k: [[_bound(b), c] for b, c in v] for k, v in self.latency},
        }


def _bound(b: float) -> float | str:
    return "+Inf" if math.isinf(b) else b


def _lat(d: Mapping[str, histogram.Buckets]) -> tuple[tuple[str, histogram.Buckets], ...]:
    return tuple((k, d[k]) for k in LATENCIES if k in d)


def _add(a: histogram.Buckets, b: histogram.Buckets) -> histogram.Buckets:
    """Two endpoints' histograms; bounds that differ are merged by their union (a missing
    bound counts what the next lower one counts: cumulative buckets)."""
    da, db = dict(a), dict(b)
    bounds = sorted(set(da) | set(db))

    def at(d: dict[float, float], bound: float) -> float:
        below = [v for k, v in d.items() if k <= bound]
        return max(below) if below else 0.0

    return tuple((x, at(da, x) + at(db, x)) for x in bounds)


def _canonical(name: str, profile: Profile) -> str:
    """OpenMetrics exposition may escape ':' to '_' (`vllm_generation_tokens_total`)."""
    escaped = profile.prefix[:-1] + "_"
    return profile.prefix + name[len(escaped) :] if name.startswith(escaped) else name


def parse(text: str, profile: Profile = VLLM) -> Counters:
    """The counters of a Prometheus scrape under `profile` (prometheus_client's parser, as
    `verify --metrics` uses). Raises ValueError when the text is not exposition format."""
    from patcher.serving import promtext

    wanted = {
        n: n
        for n in (
            profile.generation,
            profile.drafts,
            profile.draft_tokens,
            profile.accepted,
            profile.finished,
            profile.errors,
        )
        if n
    }
    sums = dict.fromkeys(wanted, 0.0)
    errors = 0.0
    spec = False
    by_hist: dict[str, dict[float, float]] = {}
    per_pos: dict[int, float] = {}
    hist_names = {f"{n}_bucket": n for names in profile.latency.values() for n in names}
    for family in promtext.families(text):
        for sample in family.samples:
            name = _canonical(sample.name, profile)
            if not math.isfinite(sample.value):
                continue
            if name in hist_names:
                le = sample.labels.get("le")
                try:
                    bound = float(le) if le is not None else math.nan
                except ValueError:
                    continue
                if not math.isnan(bound):
                    h = by_hist.setdefault(hist_names[name], {})
                    h[bound] = h.get(bound, 0.0) + sample.value
                continue
            if name == profile.per_position and sample.labels.get("position", "").isdigit():
                pos = int(sample.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                spec = True
                continue
            if name not in sums:
                continue
            sums[name] += sample.value
            spec = spec or name in (profile.drafts, profile.draft_tokens, profile.accepted)
            if (
                profile.finished_reason
                and name == profile.finished
                and sample.labels.get(profile.finished_reason) in ERROR_REASONS
            ):
                errors += sample.value
    if profile.errors:
        errors = sums[profile.errors]

    def got(n: str | None) -> float:
        return sums.get(n, 0.0) if n else 0.0

    drafts, generation = got(profile.drafts), got(profile.generation)
    accepted = got(profile.accepted)
    if profile.accepted_from_generation and drafts > 0:
        accepted = max(0.0, generation - drafts)
    latency = {}
    for key, names in profile.latency.items():
        found = next((n for n in names if n in by_hist), None)
        if found is not None:
            latency[key] = histogram.buckets_of(by_hist[found])
    return Counters(
        drafts,
        got(profile.draft_tokens),
        accepted,
        generation,
        got(profile.finished),
        errors,
        spec,
        _lat(latency),
        tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else (),
    )


def parse_all(texts: Iterable[str], profile: Profile = VLLM) -> Counters:
    """Several endpoints of one host (one per data-parallel engine), summed."""
    total: Counters | None = None
    for text in texts:
        c = parse(text, profile)
        total = c if total is None else total.plus(c)
    return total if total is not None else Counters()


def rates(series: Sequence[tuple[float, Counters]]) -> list[float]:
    """Generation tokens/s of each interval between consecutive (time, counters) scrapes:
    the rank tests' samples (an interval across a restart counts from zero, as `since`)."""
    out = []
    for (t0, c0), (t1, c1) in pairwise(series):
        if t1 > t0:
            out.append(c1.since(c0).generation_tokens / (t1 - t0))
    return out
