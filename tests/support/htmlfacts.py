"""Facts of an HTML page (the rollout's HTML report, patcher/output/htmlreport.py), read with
the standard library's parser: its charts and their polylines' point counts, its scripts,
every URL it would load, its text, and colours counted in a screenshot's pixels."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from html.parser import HTMLParser

CANARY_RGB = (0x09, 0x69, 0xDA)  # the canary's lines (htmlreport.STYLE: svg .canary)
THRESHOLD_RGB = (0x82, 0x50, 0xDF)  # the thresholds' lines (svg .threshold)
# Attributes that make a browser fetch what they name.
LOADS = {"src", "href", "srcset", "data", "poster", "action", "formaction", "xlink:href", "ping"}


@dataclasses.dataclass
class Facts:
    charts: int = 0  # <svg class="chart">
    timelines: int = 0  # <svg class="timeline">
    polyline_points: list[int] = dataclasses.field(default_factory=list)
    scripts: int = 0
    urls: list[str] = dataclasses.field(default_factory=list)  # what it would load
    verdicts: list[str] = dataclasses.field(default_factory=list)  # span.verdict texts
    elements: list[str] = dataclasses.field(default_factory=list)  # every tag, in order


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.facts = Facts()
        self._verdict = False
        self._style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        f = self.facts
        f.elements.append(tag)
        classes = a.get("class", "").split()
        if tag == "svg":
            f.charts += "chart" in classes
            f.timelines += "timeline" in classes
        if tag == "polyline":
            f.polyline_points.append(len(a.get("points", "").split()))
        if tag == "script":
            f.scripts += 1
        f.urls += [v for k, v in a.items() if k in LOADS and not v.startswith("#")]
        if "url(" in a.get("style", "") or "@import" in a.get("style", ""):
            f.urls.append(a["style"])
        self._verdict = tag == "span" and "verdict" in classes
        self._style = tag == "style"

    def handle_data(self, data: str) -> None:
        if self._verdict:
            self.facts.verdicts.append(data)
            self._verdict = False
        if self._style and ("url(" in data or "@import" in data):
            self.facts.urls.append(data)


def facts(page: str) -> Facts:
    r = _Reader()
    r.feed(page)
    r.close()
    return r.facts


def text_of(page: str) -> str:
    """The page's text as a reader sees it (tags dropped, character references read)."""

    class _Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.parts: list[str] = []

        def handle_data(self, data: str) -> None:
            self.parts.append(data)

    t = _Text()
    t.feed(re.sub(r"<style.*?</style>", "", page, flags=re.S))
    return " ".join(t.parts)


def near(pixels: Sequence[tuple[int, int, int]], rgb: tuple[int, int, int], tol: int = 40) -> int:
    """How many pixels are within `tol` (summed over the channels) of `rgb`."""
    r0, g0, b0 = rgb
    return sum(abs(r - r0) + abs(g - g0) + abs(b - b0) <= tol for r, g, b in pixels)
