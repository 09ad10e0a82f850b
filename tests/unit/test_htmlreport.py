"""The rollout's HTML report, pure (patcher/output/htmlreport.py): golden reports in
(tests/cases/rollout/html/), the facts of the page out: the verdicts shown, one chart per gate
with a series, the points of each line, the phases drawn; only the page's own elements, no
script, nothing it would load, and every string of the report as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patcher.output import htmlreport, svgchart
from tests.support import htmlfacts

CASES = Path(__file__).resolve().parents[1] / "cases" / "rollout" / "html"
# Every element the page is made of: anything else came from the report.
ALLOWED = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "span",
    "table", "tr", "th", "td", "a", "section", "svg", "rect", "line", "text", "polyline",
    "circle",
}  # fmt: skip


def _cases() -> list[Path]:
    return sorted(CASES.glob("*.json"))


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.stem)
def test_golden_report_in_page_facts_out(path: Path) -> None:
    case = json.loads(path.read_text())
    page = htmlreport.render(case["report"])
    f = htmlfacts.facts(page)
    want: dict[str, Any] = case["expect"]
    assert set(f.elements) <= ALLOWED, set(f.elements) - ALLOWED
    assert f.scripts == 0 and f.urls == [], f.urls
    for key in ("verdicts", "charts", "timelines", "polyline_points"):
        if key in want:
            assert getattr(f, key) == want[key], key
    assert page.count("<circle") == want.get("circles", page.count("<circle"))
    assert page.count('<rect class="phase') == want["bars"]
    text = htmlfacts.text_of(page)
    for words in want["texts"]:
        assert words in text, words


def test_a_hostile_string_never_becomes_markup() -> None:
    """The report's strings reach the page escaped: attribute values and text alike."""
    case = json.loads((CASES / "hostile_names.json").read_text())
    page = htmlreport.render(case["report"])
    assert "<script" not in page and "onload=" not in page.replace("onload=alert", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'onmouseover="' not in page and "<b " not in page and "<img" not in page


def test_every_point_drawn_is_a_number() -> None:
    """A coordinate is only ever a finite number: a string, a bool, NaN or infinity in a
    series is a missing value."""
    assert [svgchart.num(v) for v in (1, 2.5, True, "3", float("nan"), float("inf"), None)] == [
        1.0,
        2.5,
        None,
        None,
        None,
        None,
        None,
    ]


def test_the_page_loads_nothing() -> None:
    """Its Content-Security-Policy allows no source at all, but inline style: even a page
    someone edits to add an image or a script loads nothing."""
    page = htmlreport.render({"command": "rollout", "ok": True, "hosts": []})
    assert f'content="{htmlreport.CSP}"' in page and "default-src 'none'" in htmlreport.CSP
    assert "script-src" not in htmlreport.CSP and "img-src" not in htmlreport.CSP


def test_units_read_as_people_write_them() -> None:
    assert htmlreport.shower("share of drafted tokens")(0.153) == "15.3 %"
    assert htmlreport.shower("seconds per engine step")(0.0292) == "29.2 ms"
    assert htmlreport.shower("seconds")(2.5) == "2.5 s"
    assert htmlreport.shower("generation tokens per second", ratio=True)(0.9) == "0.9x"
    assert htmlreport.shower("tokens per draft")(2.3456) == "2.346"
