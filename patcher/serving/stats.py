"""The statistics a rollout gate decides with: a proportion by its Wilson interval, two
proportions (a latency tail, canary against control) by Newcombe's interval of their
difference, a rate by a Mann-Whitney rank test over per-interval samples. Written here (scipy is not
a dependency) and pinned by golden cases in tests/cases/serving/.

Each judgement answers one of three things: PASS (the evidence says the threshold is met),
FAIL (it says the threshold is missed), or EXTEND (not enough evidence either way: measure
longer). A window that still says EXTEND at `--max-window` fails as "not enough evidence":
no evidence never reads as good. Every answer carries its numbers (n, the interval or the
p-value) so that a report can be checked by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

PASS, FAIL, EXTEND = "pass", "fail", "extend"
# Fewer samples a side than this and a rank test does not decide: the normal approximation
# of U is poor below it (and three intervals a side can never reach p < 0.05 anyway).
MIN_SAMPLES = 5
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Evidence:
    """One gate's statistical answer and the numbers behind it."""

    decision: str  # PASS | FAIL | EXTEND
    n: float  # trials (proportion) or samples (smaller side of a rank test)
    low: float | None = None  # the interval, for a proportion
    high: float | None = None
    p: float | None = None  # the one-sided p-value that decided, for a rank test
    # "wilson" | "newcombe" | "mann-whitney"; anytime-valid (patcher.serving.sequential):
    # "mixture" | "mixture-ratio" | "t-mixture" (the last two: low/high a ratio's interval)
    test: str = ""
    n_ref: float | None = None  # the reference's trials, for two proportions

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "decision": self.decision,
            "test": self.test,
            "n": self.n,
            "low": _r(self.low),
            "high": _r(self.high),
            "p": _r(self.p),
        }
        if self.n_ref is not None:
            out["n_ref"] = self.n_ref
        return out

    def numbers(self) -> str:
        """'n=812, 95 % interval 0.66..0.73' or 'n=10/10, p=0.003': the report's brackets."""
        what = _SHOWN.get(self.test)
        if what and self.low is not None and self.high is not None:
            n = f"{self.n:g}/{self.n_ref:g}" if self.n_ref is not None else f"{self.n:g}"
            f = ".3g" if what == "ratio" else ".3f"  # a ratio may be far from 1
            return f"n={n}, {what} {self.low:{f}}..{self.high:{f}}"
        if self.p is not None:
            return f"n={self.n:g}, p={self.p:.3g}"
        return f"n={self.n:g}"


# What an interval is of, by test: the words the report's brackets give it.
_SHOWN = {
    "wilson": "interval",
    "mixture": "interval",
    "newcombe": "difference",
    "mixture-ratio": "ratio",
    "t-mixture": "ratio",
}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def z_two_sided(confidence: float) -> float:
    """The normal quantile of a two-sided interval at `confidence` (0.95 -> 1.95996...)."""
    return _NORMAL.inv_cdf(0.5 + confidence / 2)


def wilson(successes: float, trials: float, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion: unlike the normal (Wald) interval it stays
    inside 0..1 and is honest at 0 or all successes and at small n."""
    if trials <= 0:
        return 0.0, 1.0
    z = z_two_sided(confidence)
    p = min(1.0, max(0.0, successes / trials))
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials)) / (1 + z2n)
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion_at_least(
    successes: float, trials: float, minimum: float, confidence: float
) -> Evidence:
    """PASS when the whole interval is at or above `minimum`, FAIL when it is all below."""
    low, high = wilson(successes, trials, confidence)
    decision = PASS if low >= minimum else FAIL if high < minimum else EXTEND
    return Evidence(decision, trials, low, high, test="wilson")


def proportion_at_most(
    successes: float, trials: float, maximum: float, confidence: float
) -> Evidence:
    """PASS when the whole interval is at or below `maximum`, FAIL when it is all above."""
    low, high = wilson(successes, trials, confidence)
    decision = PASS if high <= maximum else FAIL if low > maximum else EXTEND
    return Evidence(decision, trials, low, high, test="wilson")


def newcombe(s1: float, n1: float, s2: float, n2: float, confidence: float) -> tuple[float, float]:
    """The interval of p1 - p2 by Newcombe's hybrid score method (his method 10): each
    proportion's Wilson interval, combined. It keeps Wilson's honesty at 0, at all
    successes and at small n, where the normal interval of a difference does not."""
    p1 = min(1.0, max(0.0, s1 / n1)) if n1 > 0 else 0.0
    p2 = min(1.0, max(0.0, s2 / n2)) if n2 > 0 else 0.0
    l1, u1 = wilson(s1, n1, confidence)
    l2, u2 = wilson(s2, n2, confidence)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, low), min(1.0, high)


def proportions_at_most(s1: float, n1: float, s2: float, n2: float, confidence: float) -> Evidence:
    """Is p1 at most p2 (the canary's share of requests over a bound at most the reference's)?
    PASS when the whole interval of p1 - p2 is at or below 0, FAIL when it is all above."""
    low, high = newcombe(s1, n1, s2, n2, confidence)
    decision = PASS if high <= 0 else FAIL if low > 0 else EXTEND
    return Evidence(decision, n1, low, high, test="newcombe", n_ref=n2)


def midranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """The rank of each value (1-based; tied values share the mean of their ranks) and the
    sizes of the groups of ties (for the variance's correction)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@dataclass(frozen=True)
class RankTest:
    """Mann-Whitney U of x against y: U counts the pairs where x is larger (ties half); z by
    the normal approximation with the tie correction and a continuity correction of 1/2."""

    u: float
    nx: int
    ny: int
    p_greater: float  # one-sided: x tends to be larger than y
    p_less: float  # one-sided: x tends to be smaller than y


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> RankTest:
    nx, ny = len(x), len(y)
    if nx == 0 or ny == 0:
        return RankTest(0.0, nx, ny, 1.0, 1.0)
    ranks, ties = midranks([*x, *y])
    u = sum(ranks[:nx]) - nx * (nx + 1) / 2
    n = nx + ny
    mean = nx * ny / 2
    tie = sum(t**3 - t for t in ties)
    var = nx * ny / 12 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:  # every value the same: no evidence of a difference either way
        return RankTest(u, nx, ny, 1.0, 1.0)
    sd = math.sqrt(var)
    p_greater = 1 - _NORMAL.cdf((u - mean - 0.5) / sd)
    p_less = _NORMAL.cdf((u - mean + 0.5) / sd)
    return RankTest(u, nx, ny, min(1.0, p_greater), min(1.0, p_less))


def samples_at_least(
    x: Sequence[float], y: Sequence[float], ratio: float, confidence: float
) -> Evidence:
    """Is x at least `ratio` times y? The rank test of x against y scaled by `ratio`: PASS
    when x is significantly larger than ratio*y, FAIL when significantly smaller (one-sided,
    at 1 - confidence each), EXTEND otherwise."""
    t = mann_whitney(x, [v * ratio for v in y])
    return _decide(t, confidence, larger_is_good=True)


def samples_at_most(
    x: Sequence[float], y: Sequence[float], ratio: float, confidence: float
) -> Evidence:
    """Is x at most `ratio` times y (a latency against its control)? PASS when x is
    significantly smaller than ratio*y, FAIL when significantly larger, EXTEND otherwise."""
    t = mann_whitney(x, [v * ratio for v in y])
    return _decide(t, confidence, larger_is_good=False)


def _decide(t: RankTest, confidence: float, larger_is_good: bool) -> Evidence:
    alpha = 1 - confidence
    good, bad = (t.p_greater, t.p_less) if larger_is_good else (t.p_less, t.p_greater)
    n = min(t.nx, t.ny)
    if n < MIN_SAMPLES:
        return Evidence(EXTEND, n, p=min(good, bad), test="mann-whitney")
    if bad < alpha:
        return Evidence(FAIL, n, p=bad, test="mann-whitney")
    if good < alpha:
        return Evidence(PASS, n, p=good, test="mann-whitney")
    return Evidence(EXTEND, n, p=min(good, bad), test="mann-whitney")
