"""`patcher.serving.histogram.quantile` against PromQL's histogram_quantile, on the classic
cases of Prometheus' own test file transcribed as data (tests/cases/serving/
histogram_quantile.json): q outside [0, 1], q = 0, bucket counts that dip, one bound scraped as
several series, no observations. The count of cases goes to the run's summary."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from patcher.serving import histogram
from tests.support.cases import CASES

_CASES: list[dict[str, Any]] = json.loads(
    (CASES / "serving" / "histogram_quantile.json").read_text()
)["cases"]


def _number(raw: Any) -> float:
    return float(raw)  # "+Inf", "-Inf", "NaN" as float() reads them


def _buckets(case: dict[str, Any]) -> histogram.Buckets:
    return tuple((_number(le), _number(v)) for le, v in case["buckets"])


def _same(got: float | None, want: float) -> bool:
    if math.isnan(want):
        return got is None
    if got is None:
        return False
    if math.isinf(want):
        return got == want
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


def test_every_classic_case_of_prometheus(record_property: pytest.RecordProperty) -> None:
    wrong = []
    for case in _CASES:
        got = histogram.quantile(_number(case["q"]), _buckets(case))
        if not _same(got, _number(case["expect"])):
            wrong.append(f"{case['source']}: {got}, want {case['expect']}")
    record_property(
        "conformance",
        f"PromQL histogram_quantile: {len(_CASES) - len(wrong)} of {len(_CASES)} classic "
        f"cases of histograms.test the same, {len(wrong)} different",
    )
    assert not wrong, "\n".join(wrong)


def test_the_rules_promql_adds() -> None:
    """The rules the transcribed cases did not hold before: q out of range is an infinity,
    a count that dips is raised to the envelope, equal bounds are summed, and q = 0 over an
    empty lowest bucket is PromQL's NaN (None) where it was that bucket's bound."""
    inf = math.inf
    b = ((0.1, 10.0), (0.2, 30.0), (inf, 40.0))
    assert histogram.quantile(-0.5, b) == -inf and histogram.quantile(1.5, b) == inf
    assert histogram.quantile(-0.5, ()) == -inf  # whatever the buckets
    assert histogram.quantile(math.nan, b) is None
    dipping = ((1.0, 6.0), (2.0, 4.0), (3.0, 8.0), (inf, 10.0))  # 4 < 6: taken as 6
    assert histogram.quantile(0.7, dipping) == pytest.approx(2.5)  # 2 + 1 * (7 - 6) / 2
    twice = ((0.2, 2.0), (0.1, 1.0), (0.2, 1.0), (inf, 4.0))  # unsorted, 0.2 twice: 3 at most 0.2
    assert histogram.quantile(0.5, twice) == pytest.approx(0.15)  # 0.1 + 0.1 * (2 - 1) / 2
    assert histogram.quantile(0.0, ((0.1, 0.0), (0.2, 5.0), (inf, 5.0))) is None
    assert histogram.quantile(0.0, ((0.1, 2.0), (0.2, 5.0), (inf, 5.0))) == 0.0
    noise = ((1.0, 3.0), (2.0, 3.0 * (1 - 1e-14)), (inf, 6.0))  # float noise: no dip
    assert histogram.quantile(0.5, noise) == pytest.approx(1.0)
