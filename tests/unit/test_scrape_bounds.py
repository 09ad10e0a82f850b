"""Bounds on what a metrics endpoint sends (patcher.serving.model's MAX_*): each hostile
scrape (tests/support/hostilescrape.py) is read in a process of its own and must be refused,
with its reason, under a fixed peak memory (the process's VmHWM), never by exhausting the
controller (one hostile `position` label took 5.9 GB before the bounds)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from patcher.serving import histogram, model
from tests.conftest import REPO

# A python with prometheus_client and the package, parsing the largest scrape under every
# bound, peaks near 170 MiB; a refused scrape must stay under this.
PEAK_MIB = 512

REFUSED = {
    "huge_label": "line 2 has 10485805 characters, more than 65536",
    "long_label": "label 'model_name' has a 8192-character value, more than 4096",
    "many_buckets": "a vllm:time_to_first_token_seconds_bucket series has more than 1024 buckets",
    "million_series": "the scrape has 1000001 lines, more than 250000",
    "huge_position": "position '1000000000000', above the highest read, 63",
}


def _read(kind: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.hostilescrape", kind],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    got: dict[str, object] = json.loads(out.stdout)
    return got


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_hostile_scrape_is_refused_under_a_fixed_memory_bound(kind: str) -> None:
    got = _read(kind)
    assert isinstance(got["refused"], str) and REFUSED[kind] in got["refused"], got
    assert isinstance(got["maxrss_mib"], float) and got["maxrss_mib"] < PEAK_MIB, got


def test_a_scrape_of_100k_series_under_the_bounds_is_read() -> None:
    got = _read("series_100k")
    assert got["refused"] is None and got["series"] == 40_000, got  # 20,000 counters + histograms
    assert isinstance(got["maxrss_mib"], float) and got["maxrss_mib"] < PEAK_MIB, got


def test_bounds_are_checked_before_the_text_is_parsed() -> None:
    """Over the characters or lines bound, the parser never runs (ValueError of its own
    would say 'not exposition format'; ScrapeRefused says which bound)."""
    with pytest.raises(model.ScrapeRefused, match="characters, more than"):
        model.parse("{" * (model.MAX_CHARS + 1))
    with pytest.raises(model.ScrapeRefused, match="lines, more than"):
        model.parse("{\n" * model.MAX_LINES)


def test_merging_many_bounds_gives_the_union() -> None:
    """12,000 `le` values a side (quadratic before: minutes): the union, each count the sum of
    what each histogram counts at or below that bound."""
    a = tuple((i / 1000, float(i)) for i in range(1, 12_001))
    b = tuple((i / 1000 + 0.0005, float(i)) for i in range(1, 12_001))
    got = histogram.merge([a, b])
    assert len(got) == 24_000
    assert got[0] == (0.001, 1.0) and got[1] == (0.0015, 2.0) and got[-1] == (12.0005, 24_000.0)
