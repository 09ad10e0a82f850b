"""How soon, and how often wrongly, the rollout gates decide: today's rule (the fixed-sample
tests from --window on, each look at its Bonferroni share) against the sequential rule (the
anytime-valid intervals of patcher/serving/sequential.py, from the first scrape), on the same
simulated windows. A row of `make bench`.

    python -m bench.verdicts                     # 2,000 windows a scenario, table on stdout
    python -m bench.verdicts --runs 200 --out verdicts.json

Each run draws one window of scrapes, --scrape-every 6 s (a 120 s --window's 20 intervals):
the baseline's 20 intervals, and up to MAX_SCRAPES (a --max-window of 360 s, 3x) after the
patch, with the control host's intervals at the same ticks where the scenario has one. Both
rules judge the SAME window through patcher.serving.judging.judge, as the rollout does at each
look: today's from scrape 20 on (confidence 0.95 over 41 looks: each at 0.0012), the
sequential rule from scrape 1 (no --window given); at MAX_SCRAPES an undecided window fails as
not enough evidence. Scenarios (tokens/s gate: min_tokens_per_s_ratio 0.9):

- regress20             the patch serves 0.8x; after/before, steady load          (bad)
- regress5              0.95x: within the 0.9 the gate tolerates                  (good)
- neutral               1.0x                                                      (good)
- load_doubled_control  0.8x, the load doubles at a random scrape of the window,
                        canary and control alike; against a control host           (bad)
- bursty                1.0x, over-dispersed traffic: a fifth of the intervals of
                        each host burst 1.3..2x on their own; after/before          (good)
- neutral_control       1.0x against a control host, the load doubling as above    (good)
- bursty_control        bursty as above, against a control host (bursts per host)  (good)
- latency_buckets       TTFT 2x slower, gate max_ttft_p99_ratio 1.3 on vLLM's
                        TTFT bucket bounds, 100 requests an interval, vs control  (bad)
- latency_neutral       the same, TTFT unchanged                                  (good)
- acceptance15          acceptance 15 % against min_acceptance_rate 0.4, 60
                        drafts of 3 tokens an interval                            (bad)

Per scenario and rule: false_fail (a good patch failed on evidence), false_pass (a bad one
kept), undecided (not enough evidence at MAX_SCRAPES: rolled back, said so), median and p90
scrapes to the verdict. Per-interval noise of tokens/s: 5 % (lognormal) per host, the
simulation's assumption; the rates are of this model, the comparison is of the rules.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from patcher.rollout import decide
from patcher.serving import histogram, judging
from patcher.serving.gates import FIXED, SEQUENTIAL, Gates
from patcher.serving.measures import Measures
from patcher.serving.model import TTFT

RUNS = 2000
SCRAPE_S = 6.0
WINDOW_SCRAPES = 20  # --window 120 at --scrape-every 6
MAX_SCRAPES = 60  # --max-window 360: 3x
LOOKS = 1 + MAX_SCRAPES - WINDOW_SCRAPES  # today's Bonferroni split (settings.looks)
CONFIDENCE = 0.95
RULES = {"today": FIXED, "sequential": SEQUENTIAL}
TOKENS_PER_S, NOISE = 2000.0, 0.05
# vLLM's TTFT histogram bounds (seconds): the quantization a latency gate reads through.
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
TTFT_BOUNDS += (5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.inf)
REQUESTS = 100.0  # requests an interval on each host
TTFT_MEDIAN, TTFT_SIGMA = 0.3, 0.6


@dataclass
class Interval:
    """One interval of one host: tokens/s, drafts, accepted tokens, TTFT bucket counts."""

    tps: float
    drafts: float = 0.0
    accepted: float = 0.0
    ttft: tuple[float, ...] = ()  # per bucket, not cumulative


@dataclass
class Window:
    """A run's draw: the baseline (None: the gates compare with the control), the canary's
    intervals after the patch, the control host's at the same ticks (or none)."""

    before: list[Interval] | None
    after: list[Interval]
    control: list[Interval] | None


@dataclass(frozen=True)
class Scenario:
    name: str
    good: bool  # the patch meets its gates: failing it is a false failure
    gates: dict[str, float]
    draw: Callable[[random.Random], Window]


def _tps(rng: random.Random, effect: float, load: float = 1.0, bursty: bool = False) -> float:
    burst = rng.uniform(1.3, 2.0) if bursty and rng.random() < 0.2 else 1.0
    return TOKENS_PER_S * effect * load * burst * math.exp(rng.gauss(0, NOISE))


def _throughput(effect: float, control: bool, bursty: bool = False) -> Callable[..., Window]:
    def draw(rng: random.Random) -> Window:
        if not control:
            before = [Interval(_tps(rng, 1.0, bursty=bursty)) for _ in range(WINDOW_SCRAPES)]
            after = [Interval(_tps(rng, effect, bursty=bursty)) for _ in range(MAX_SCRAPES)]
            return Window(before, after, None)
        at = rng.randrange(1, WINDOW_SCRAPES)  # the scrape where the load doubles
        loads = [1.0 if k < at else 2.0 for k in range(MAX_SCRAPES)]
        after = [Interval(_tps(rng, effect, load, bursty)) for load in loads]
        ctl = [Interval(_tps(rng, 1.0, load, bursty)) for load in loads]
        return Window(None, after, ctl)

    return draw


def _poisson(rng: random.Random, lam: float) -> float:
    """A Poisson count (a normal one, rounded, above 30: the bench's speed)."""
    if lam > 30:
        return float(max(0, round(rng.gauss(lam, math.sqrt(lam)))))
    k, p, limit = 0, rng.random(), math.exp(-lam)
    while p > limit:
        k, p = k + 1, p * rng.random()
    return float(k)


def _bucket_shares(scale: float) -> list[float]:
    """The share of a lognormal TTFT (median TTFT_MEDIAN x scale) in each bucket."""
    cdf = [0.0]
    for b in TTFT_BOUNDS:
        z = (math.log(b / (TTFT_MEDIAN * scale)) / TTFT_SIGMA) if math.isfinite(b) else math.inf
        cdf.append(statistics.NormalDist().cdf(z) if math.isfinite(z) else 1.0)
    return [b - a for a, b in itertools.pairwise(cdf)]


def _latency(scale: float) -> Callable[[random.Random], Window]:
    canary, control = _bucket_shares(scale), _bucket_shares(1.0)

    def host(rng: random.Random, shares: list[float]) -> Interval:
        counts = tuple(_poisson(rng, REQUESTS * s) for s in shares)
        return Interval(_tps(rng, 1.0), ttft=counts)

    def draw(rng: random.Random) -> Window:
        after = [host(rng, canary) for _ in range(MAX_SCRAPES)]
        return Window(None, after, [host(rng, control) for _ in range(MAX_SCRAPES)])

    return draw


def _acceptance(rate: float, drafts: int = 60, k: int = 3) -> Callable[[random.Random], Window]:
    def one(rng: random.Random) -> Interval:
        accepted = sum(rng.random() < rate for _ in range(drafts * k))
        return Interval(_tps(rng, 1.0), drafts=drafts, accepted=accepted)

    def draw(rng: random.Random) -> Window:
        return Window(None, [one(rng) for _ in range(MAX_SCRAPES)], None)

    return draw


RATIO = {"min_tokens_per_s_ratio": 0.9}
SCENARIOS = (
    Scenario("regress20", False, RATIO, _throughput(0.8, control=False)),
    Scenario("regress5", True, RATIO, _throughput(0.95, control=False)),
    Scenario("neutral", True, RATIO, _throughput(1.0, control=False)),
    Scenario("load_doubled_control", False, RATIO, _throughput(0.8, control=True)),
    Scenario("bursty", True, RATIO, _throughput(1.0, control=False, bursty=True)),
    Scenario("neutral_control", True, RATIO, _throughput(1.0, control=True)),
    Scenario("bursty_control", True, RATIO, _throughput(1.0, control=True, bursty=True)),
    Scenario("latency_buckets", False, {"max_ttft_p99_ratio": 1.3}, _latency(2.0)),
    Scenario("latency_neutral", True, {"max_ttft_p99_ratio": 1.3}, _latency(1.0)),
    Scenario("acceptance15", False, {"min_acceptance_rate": 0.4}, _acceptance(0.15)),
)


def measures(intervals: Sequence[Interval]) -> Measures:
    """The window of these intervals as measure_series would give it (what judge reads)."""
    seconds = SCRAPE_S * len(intervals)
    drafts = math.fsum(i.drafts for i in intervals)
    accepted = math.fsum(i.accepted for i in intervals)
    draft_tokens = 3 * drafts
    buckets: dict[str, histogram.Buckets] = {}
    if intervals and intervals[0].ttft:
        per = [math.fsum(c) for c in zip(*(i.ttft for i in intervals), strict=True)]
        cum, total = [], 0.0
        for b, c in zip(TTFT_BOUNDS, per, strict=True):
            total += c
            cum.append((b, total))
        buckets[TTFT] = tuple(cum)
    samples = tuple(i.tps for i in intervals)
    return Measures(
        seconds,
        drafts,
        accepted / draft_tokens if draft_tokens else None,
        1 + accepted / drafts if drafts else None,
        math.fsum(samples) / len(samples) if samples else None,
        None,
        draft_tokens=draft_tokens,
        accepted=accepted,
        samples=samples,
        buckets=buckets,
    )


def verdict(window: Window, gates: Gates, first: int) -> tuple[str, int]:
    """("pass" | "fail" | "undecided", the scrape that decided): judged at each scrape from
    `first` on, as the rollout's window is."""
    before = measures(window.before) if window.before is not None else None
    for k in range(first, MAX_SCRAPES + 1):
        last = k == MAX_SCRAPES
        ctl = measures(window.control[:k]) if window.control is not None else None
        judged = judging.judge(before, measures(window.after[:k]), gates, ctl, last=last)
        if not judging.undecided(judged) or last:
            if all(g.ok for g in judged):
                return "pass", k
            return ("undecided" if decide.undecided(judged) else "fail"), k
    raise AssertionError("unreachable: the last look decides")


def run(runs: int = RUNS, seed: int = 52) -> dict[str, Any]:
    rows = []
    for sc in SCENARIOS:
        rng = random.Random(f"{seed}-{sc.name}")
        windows = [sc.draw(rng) for _ in range(runs)]  # the same windows for both rules
        for rule, how in RULES.items():
            gates = replace(Gates.make(confidence=CONFIDENCE, looks=LOOKS, **sc.gates), rule=how)
            first = 1 if how == SEQUENTIAL else WINDOW_SCRAPES
            got = [verdict(w, gates, first) for w in windows]
            rows.append(_row(sc, rule, got))
    return {
        "rows": rows,
        "settings": {
            "scrape_every_s": SCRAPE_S,
            "window_scrapes": WINDOW_SCRAPES,
            "max_scrapes": MAX_SCRAPES,
            "confidence": CONFIDENCE,
            "today_looks": LOOKS,
            "seed": seed,
        },
    }


def _row(sc: Scenario, rule: str, got: list[tuple[str, int]]) -> dict[str, Any]:
    n = len(got)
    count = {v: sum(1 for g, _ in got if g == v) for v in ("pass", "fail", "undecided")}
    scrapes = sorted(k for _, k in got)
    return {
        "scenario": sc.name,
        "rule": rule,
        "runs": n,
        "good": sc.good,
        "false_fail": round(count["fail"] / n, 4) if sc.good else None,
        "false_pass": None if sc.good else round(count["pass"] / n, 4),
        "undecided": round(count["undecided"] / n, 4),
        "median_scrapes": statistics.median(scrapes),
        "p90_scrapes": scrapes[min(n - 1, math.ceil(0.9 * n) - 1)],
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def text(doc: dict[str, Any]) -> str:
    """The rows side by side: each scenario's today and sequential."""
    head = (
        f"verdicts: {doc['rows'][0]['runs']} simulated windows a scenario, scrape every "
        f"{SCRAPE_S:g} s; scrapes to a verdict (today / sequential)"
    )
    lines = [
        head,
        f"{'scenario':22} {'false fail':>17} {'false pass':>17} {'undecided':>17} "
        f"{'median':>9} {'p90':>9}",
    ]
    by = {(r["scenario"], r["rule"]): r for r in doc["rows"]}
    for sc in SCENARIOS:
        a, b = by[(sc.name, "today")], by[(sc.name, "sequential")]
        cols = [f"{_pct(a[k])} / {_pct(b[k])}" for k in ("false_fail", "false_pass", "undecided")]
        cols += [f"{a[k]:g} / {b[k]:g}" for k in ("median_scrapes", "p90_scrapes")]
        lines.append(
            f"{sc.name:22} {cols[0]:>17} {cols[1]:>17} {cols[2]:>17} {cols[3]:>9} {cols[4]:>9}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    first = __doc__.split("\n")[0]
    ap = argparse.ArgumentParser(prog="python -m bench.verdicts", description=first)
    ap.add_argument("--runs", type=int, default=RUNS, help=f"windows a scenario ({RUNS})")
    ap.add_argument("--out", type=Path, help="write the JSON document there")
    ap.add_argument("--json", action="store_true", help="the JSON document on stdout")
    args = ap.parse_args(argv)
    if args.runs < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        print("hint: e.g. --runs 200", file=sys.stderr)
        return 2
    began = time.process_time()
    doc = run(args.runs)
    doc["cpu_s"] = round(time.process_time() - began, 1)
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc) if args.json else text(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
