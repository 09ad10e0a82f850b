"""patcher.serving.sequential: its mixtures against numerical integration, its intervals
against recorded values (tests/cases/serving/sequential.json), and, by seeded simulation,
what makes them worth having: looked at after every interval of a long window, an interval
misses the truth in at most 1 - confidence of the windows (no Bonferroni split)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from patcher.serving import sequential, stats
from tests.support import mixtures

CASES = Path(__file__).resolve().parents[1] / "cases" / "serving" / "sequential.json"
RUNS, LOOKS = 200, 60  # windows per property, looks per window (a long --max-window)
ALLOWED = int(0.05 * RUNS)  # at confidence 0.95


def _dec(o: Any) -> Any:
    if o in ("inf", "-inf"):
        return math.inf if o == "inf" else -math.inf
    if isinstance(o, list):
        return [_dec(v) for v in o]
    return o


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CASES.read_text())
    return doc


def test_the_beta_mixture_is_its_integral(cases: dict[str, Any]) -> None:
    for s, n, p in cases["mixture"]:
        assert sequential.log_mixture(s, n, p) == pytest.approx(
            mixtures.beta_mixture(s, n, p), abs=1e-6
        )


def _t2(xs: list[float]) -> float:
    n = len(xs)
    mean = sum(xs) / n
    return mean**2 / (sum((x - mean) ** 2 for x in xs) / (n - 1) / n)


def test_the_t_mixtures_are_their_integrals(cases: dict[str, Any]) -> None:
    for xs in cases["t_samples"]:
        for g in (1.0, sequential.G):
            got = sequential.log_t_mixture(_t2(xs), len(xs), len(xs) - 1, g)
            assert got == pytest.approx(mixtures.t_mixture(xs, g), abs=1e-6)
    for x, y in cases["t_two_samples"]:
        nx, ny = len(x), len(y)
        mx, my = sum(x) / nx, sum(y) / ny
        ss = sum((v - mx) ** 2 for v in x) + sum((v - my) ** 2 for v in y)
        nu, ne = nx + ny - 2, nx * ny / (nx + ny)
        t2 = (mx - my) ** 2 / (ss / nu / ne)
        for g in (1.0, sequential.G):
            got = sequential.log_t_mixture(t2, ne, nu, g)
            assert got == pytest.approx(mixtures.t2_mixture(x, y, g), abs=1e-6)


def test_the_radius_is_where_the_mixture_reaches_its_bound(cases: dict[str, Any]) -> None:
    for (n, nu, c), want in ((c["in"], _dec(c["out"])) for c in cases["radius"]):
        got = sequential.t_radius(n, nu, c)
        assert got == pytest.approx(want)
        if math.isfinite(got):
            assert sequential.log_t_mixture(got**2, n, nu) == pytest.approx(-math.log(1 - c))


@pytest.mark.parametrize(
    ("key", "fn"),
    [
        ("proportion", sequential.proportion_cs),
        ("poisson", sequential.poisson_ratio_cs),
        ("sign", sequential.sign_cs),
        ("ratio", sequential.log_ratio_cs),
    ],
)
def test_intervals_match_the_recorded_cases(
    cases: dict[str, Any], key: str, fn: Callable[..., Any]
) -> None:
    for c in cases[key]:
        assert list(fn(*c["in"])) == pytest.approx(_dec(c["out"]), rel=1e-9, abs=1e-12)


def test_the_sign_sequence_keeps_the_medians_that_its_coin_allows() -> None:
    """Ten log ratios all above 0: a fair coin's ten heads push the mixture past 20, so
    every median under the smallest is out (0 among them); with one below 0, nine heads do
    not, and 0 is kept."""
    d = [0.1 + i / 100 for i in range(10)]
    assert sequential.sign_cs(d, 0.95) == (min(d), max(d))
    low, _high = sequential.sign_cs([-0.05, *d[1:]], 0.95)
    assert low == -0.05 < 0


def test_an_interval_holds_its_ends_at_the_bound() -> None:
    """The ends of a proportion's interval are where its mixture reaches 1 / (1 - C)."""
    low, high = sequential.proportion_cs(30, 200, 0.95)
    for end in (low, high):
        assert sequential.log_mixture(30, 200, end) == pytest.approx(-math.log(0.05), abs=1e-6)
    assert sequential.proportion_cs(30, 200, 0.99)[0] < low  # more confidence, wider


def test_a_gate_decides_on_the_side_its_whole_interval_is() -> None:
    assert sequential.decide(0.5, 0.6, 0.4, at_least=True) == "pass"
    assert sequential.decide(0.1, 0.3, 0.4, at_least=True) == "fail"
    assert sequential.decide(0.3, 0.5, 0.4, at_least=True) == "extend"
    assert sequential.decide(0.001, 0.009, 0.01, at_least=False) == "pass"
    assert sequential.decide(0.02, 0.05, 0.01, at_least=False) == "fail"
    assert sequential.ratio_cs([1.0], [1.0], True, 0.95) is None  # one interval: no spread


def _misses(windows: Iterator[Iterator[bool]]) -> int:
    """Windows whose interval missed the truth at any look (a window stops at its first)."""
    return sum(any(w) for w in windows)


def _proportion_misses(interval: Callable[[float, float, float], tuple[float, float]]) -> int:
    """Windows of 20 trials an interval at p = 0.3, judged after each: how many missed."""
    rng = random.Random(52)

    def window() -> Iterator[bool]:
        s = n = 0
        for _ in range(LOOKS):
            s += sum(rng.random() < 0.3 for _ in range(20))
            n += 20
            low, high = interval(s, n, 0.95)
            yield not low <= 0.3 <= high

    return _misses(window() for _ in range(RUNS))


def test_a_proportion_looked_at_every_interval_keeps_its_error() -> None:
    assert _proportion_misses(sequential.proportion_cs) <= ALLOWED


def test_two_tail_shares_looked_at_every_interval_keep_their_error() -> None:
    """Two hosts' requests over a bound (1 % each, 100 requests an interval, binomial): the
    ratio of the shares, as Poisson counts of two exposures, misses 1.0 in at most 5 %."""
    rng = random.Random(53)

    def window() -> Iterator[bool]:
        s1 = s2 = n = 0
        for _ in range(LOOKS):
            s1 += sum(rng.random() < 0.01 for _ in range(100))
            s2 += sum(rng.random() < 0.01 for _ in range(100))
            n += 100
            low, high = sequential.poisson_ratio_cs(s1, s2, 1.0, 0.95)
            yield not low <= 1.0 <= high

    assert _misses(window() for _ in range(RUNS)) <= ALLOWED


def test_a_paired_rate_ratio_looked_at_every_interval_keeps_its_error() -> None:
    """Canary and control at the same ticks, the load moving both (it cancels), each
    interval's own noise: the ratio's interval misses 1.0 in at most 5 % of the windows."""
    rng = random.Random(54)

    def window() -> Iterator[bool]:
        x: list[float] = []
        y: list[float] = []
        for k in range(LOOKS):
            load = 2.0 if k > LOOKS // 2 else 1.0
            x.append(load * 1000 * math.exp(rng.gauss(0, 0.05)))
            y.append(load * 1000 * math.exp(rng.gauss(0, 0.05)))
            got = sequential.ratio_cs(x, y, True, 0.95)
            yield got is not None and not got[0] <= 1.0 <= got[1]

    assert _misses(window() for _ in range(RUNS)) <= ALLOWED


def test_a_paired_ratio_under_bursts_looked_at_every_interval_keeps_its_error() -> None:
    """Bursts on either host alone (a fifth of the intervals, 1.3..2x): the log ratios are
    far from Gaussian but symmetric, which the sign sequence beside the t asks for."""
    rng = random.Random(57)

    def burst() -> float:
        return rng.uniform(1.3, 2.0) if rng.random() < 0.2 else 1.0

    def window() -> Iterator[bool]:
        x: list[float] = []
        y: list[float] = []
        for _ in range(LOOKS):
            x.append(1000 * burst() * math.exp(rng.gauss(0, 0.05)))
            y.append(1000 * burst() * math.exp(rng.gauss(0, 0.05)))
            got = sequential.ratio_cs(x, y, True, 0.95)
            yield got is not None and not got[0] <= 1.0 <= got[1]

    assert _misses(window() for _ in range(RUNS)) <= ALLOWED


def test_an_after_before_ratio_looked_at_every_interval_keeps_its_error() -> None:
    rng = random.Random(55)

    def window() -> Iterator[bool]:
        y = [1000 * math.exp(rng.gauss(0, 0.1)) for _ in range(20)]  # the baseline window
        x: list[float] = []
        for _ in range(LOOKS):
            x.append(1000 * math.exp(rng.gauss(0, 0.1)))
            got = sequential.ratio_cs(x, y, False, 0.95)
            yield got is not None and not got[0] <= 1.0 <= got[1]

    assert _misses(window() for _ in range(RUNS)) <= ALLOWED


def _bursty(rng: random.Random) -> float:
    """A rate with a fifth of its intervals bursting 1.3..2x (over-dispersed traffic)."""
    burst = rng.uniform(1.3, 2.0) if rng.random() < 0.2 else 1.0
    return 1000 * burst * math.exp(rng.gauss(0, 0.05))


def _bursty_windows(seed: int, runs: int = RUNS) -> list[tuple[list[float], list[float]]]:
    rng = random.Random(seed)
    return [
        ([_bursty(rng) for _ in range(LOOKS)], [_bursty(rng) for _ in range(20)])
        for _ in range(runs)
    ]


def test_an_after_before_ratio_under_bursts_looked_at_every_interval_keeps_its_error() -> None:
    """After/before with bursts on both sides: the t's Gaussian reading and the trimmed
    means' winsorized spread are both assumptions here; the intersection still misses 1.0
    in at most 5 % of the windows (3.1 % of 3,000 in a longer run: 600 here, where 200 left
    5 % only two standard errors above that rate)."""
    runs = 600

    def window(x: list[float], y: list[float]) -> Iterator[bool]:
        for k in range(1, LOOKS + 1):
            got = sequential.ratio_cs(x[:k], y, False, 0.95)
            yield got is not None and not got[0] <= 1.0 <= got[1]

    assert _misses(window(x, y) for x, y in _bursty_windows(58, runs)) <= 0.05 * runs


def test_the_trimmed_means_decide_bursty_after_before_windows_the_t_cannot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neutral bursty windows against a 0.9 floor: by the last look the interval is above
    0.9 in most windows with the trimmed means' t beside the t, in few without it."""
    windows = _bursty_windows(59)

    def above(x: list[float], y: list[float]) -> bool:
        got = sequential.ratio_cs(x, y, False, 0.95)
        return got is not None and got[0] >= 0.9

    with_trim = sum(above(x, y) for x, y in windows)
    monkeypatch.setattr(sequential, "MIN_TRIM", 10**9)
    without = sum(above(x, y) for x, y in windows)
    assert with_trim > RUNS // 2 and without < RUNS // 4, (with_trim, without)


def test_trimmed_is_yuens_by_hand(cases: dict[str, Any]) -> None:
    """1..10 cut 2 at each end: the mean of 3..8 is 5.5; winsorized 3,3,3,4,...,8,8,8 about
    5.5 sums 3 x 2.5^2 x 2 + 1.5^2 x 2 + 0.5^2 x 2 = 42.5 over the 6 kept."""
    assert sequential.trimmed([float(v) for v in range(10, 0, -1)]) == (5.5, 42.5, 6)
    assert sequential.trimmed([1.0] * (sequential.MIN_TRIM - 1)) is None
    for c in cases["trimmed"]:
        got = sequential.trimmed(c["in"])
        assert (None if got is None else list(got)) == c["out"]


def test_a_poisson_rate_ratio_looked_at_every_interval_keeps_its_error() -> None:
    rng = random.Random(56)

    def poisson(lam: float) -> int:
        k, t = 0, rng.expovariate(1.0)
        while t < lam:
            k, t = k + 1, t + rng.expovariate(1.0)
        return k

    def window() -> Iterator[bool]:
        a = b = 0
        for _ in range(LOOKS):
            a, b = a + poisson(8.0), b + poisson(4.0)  # the first host has twice the rate
            low, high = sequential.poisson_ratio_cs(a, b, 1.0, 0.95)
            yield not low <= 2.0 <= high

    assert _misses(window() for _ in range(RUNS)) <= ALLOWED


def test_a_fixed_interval_looked_at_every_interval_does_not() -> None:
    """What the property tests would catch: Wilson's interval at 0.95 (valid at one look),
    looked at after every interval of the same windows, misses far more often than 5 %."""
    assert _proportion_misses(stats.wilson) > 2 * ALLOWED
