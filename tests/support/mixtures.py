"""Reference values of patcher.serving.sequential's mixtures by numerical integration: the
integral each closed form stands for, computed by quadrature over the prior (no closed form
used), so a slip in the algebra of a Beta-function ratio or of the t mixture's Bayes factor
shows as a disagreement. And the seeded simulations of the property tests: neutral windows
looked at after every interval, counting those whose interval ever missed the truth."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from patcher.serving import sequential


def beta_mixture(successes: float, trials: float, p: float, steps: int = 20000) -> float:
    """log of E_{q ~ Beta(A, B)}[q^s (1-q)^f] / (p^s (1-p)^f), the Beta(1/2, 1/2) prior as
    q = sin^2(theta) (its density times dq is (2/pi) dtheta: a smooth integrand), by the
    midpoint rule on theta in (0, pi/2)."""
    assert sequential.A == sequential.B == 0.5
    s, f = successes, trials - successes
    h = (math.pi / 2) / steps
    total = 0.0
    own = s * math.log(p) + f * math.log1p(-p)
    for i in range(steps):
        th = (i + 0.5) * h
        q = math.sin(th) ** 2
        total += math.exp(s * math.log(q) + f * math.log1p(-q) - own) * (2 / math.pi) * h
    return math.log(total)


def t_mixture(xs: Sequence[float], g: float, steps: int = 4000) -> float:
    """log of the one-sample Bayes factor of mean 0 against effect delta = mu / sigma ~
    N(0, g), sigma's prior 1/sigma on both sides: the delta integral done in closed form
    (a Gaussian), the sigma integral by quadrature on log sigma."""
    n, s1, s2 = len(xs), math.fsum(xs), math.fsum(x * x for x in xs)

    def h1(sig: float) -> float:
        # prod N(x; delta sigma, sigma^2) averaged over delta ~ N(0, g)
        a = n + 1 / g
        return (
            -n * math.log(sig)
            - s2 / (2 * sig * sig)
            + (s1 / sig) ** 2 / (2 * a)
            - 0.5 * math.log(g * a)
        )

    def h0(sig: float) -> float:
        return -n * math.log(sig) - s2 / (2 * sig * sig)

    return _log_int(h1) - _log_int(h0)


def _log_int(logf: Callable[[float], float], steps: int = 4000) -> float:
    """log of the integral of exp(logf(sigma)) d log sigma over sigma in e^-12..e^12."""
    lo, hi = -12.0, 12.0
    width = (hi - lo) / steps
    vals = [logf(math.exp(lo + (i + 0.5) * width)) for i in range(steps)]
    top = max(vals)
    return top + math.log(math.fsum(math.exp(v - top) for v in vals) * width)


def t2_mixture(x: Sequence[float], y: Sequence[float], g: float) -> float:
    """log of the two-sample Bayes factor: y ~ N(m, s^2), x ~ N(m + delta s, s^2), m's prior
    flat, s's 1/s, delta = 0 against delta ~ N(0, g). The (m, delta) integral in closed form
    (a 2-d Gaussian; m alone under delta = 0), s's by quadrature on log s."""
    nx, ny = len(x), len(y)
    n = nx + ny
    sx, sy = math.fsum(x), math.fsum(y)
    sq = math.fsum(v * v for v in x) + math.fsum(v * v for v in y)

    def h1(s: float) -> float:
        pmm, pmd, pdd = n / s**2, nx / s, nx + 1 / g
        bm, bd = (sx + sy) / s**2, sx / s
        det = pmm * pdd - pmd * pmd
        quad = (pdd * bm * bm - 2 * pmd * bm * bd + pmm * bd * bd) / det
        return (
            -n * math.log(s)
            - sq / (2 * s * s)
            + math.log(2 * math.pi)
            - 0.5 * math.log(det)
            + quad / 2
            - 0.5 * math.log(2 * math.pi * g)
        )

    def h0(s: float) -> float:
        p, b = n / s**2, (sx + sy) / s**2
        return (
            -n * math.log(s) - sq / (2 * s * s) + 0.5 * math.log(2 * math.pi / p) + b * b / (2 * p)
        )

    return _log_int(h1) - _log_int(h0)
