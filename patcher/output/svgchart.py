"""The HTML report's pictures as inline SVG text (patcher/output/htmlreport.py): a line chart
of a window's per-interval series, canary against its reference, with the gate's threshold as
a line, and the phases of a host's rollout on a timeline. Pure: numbers and words in, SVG
text out. Every word is escaped here (it may come from a host or an inventory), and every
number is a finite float before it becomes a coordinate, so nothing in a report can become
markup."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 14, 34  # the plot's margins: axis labels, legend


def num(v: Any) -> float | None:
    """A JSON number that can be drawn (not a bool, not NaN or infinite), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


@dataclass(frozen=True)
class Line:
    """One series of a chart: its name in the legend, its CSS class, its points (x, y);
    y None where the interval had no value (the line breaks there)."""

    label: str
    css: str
    points: Sequence[tuple[float, float | None]]


def _segments(points: Sequence[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """The runs of points that have a value: each one polyline."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((x, y))
    return [r for r in runs if r]


def _range(values: Sequence[float]) -> tuple[float, float]:
    """The y axis: from 0 (or the lowest value, if negative) to a little over the highest."""
    lo, hi = min([0.0, *values]), max([0.0, *values])
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi + (hi - lo) * 0.08


@dataclass(frozen=True)
class _Frame:
    """The plot's scales: data (x0..x1, y0..y1) to pixels."""

    x0: float
    x1: float
    y0: float
    y1: float

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def py(self, y: float) -> float:
        ph = HEIGHT - TOP - BOTTOM
        return TOP + ph - (y - self.y0) / (self.y1 - self.y0) * ph


def chart(
    title: str,
    lines: Sequence[Line],
    threshold: float | None,
    show: Callable[[float], str],
    threshold_label: str = "threshold",
) -> str:
    """A line chart (x: seconds into the window) of `lines`, with `threshold` as a dashed
    horizontal line; `show` writes a y value for the axis. One <polyline> per run of points
    with a value; a single point is drawn as a dot."""
    xs = [x for ln in lines for x, _y in ln.points]
    ys = [y for ln in lines for _x, y in ln.points if y is not None]
    if threshold is not None:
        ys.append(threshold)
    f = _Frame(0.0, max([1.0, *xs]), *_range(ys))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/>',
        *_axes(f, show),
    ]
    if threshold is not None:
        t = f.py(threshold)
        out.append(
            f'<line class="threshold" x1="{LEFT}" x2="{LEFT + pw}" y1="{t:.1f}" y2="{t:.1f}"/>'
            f'<text class="threshold-label" x="{LEFT + pw - 4}" y="{t - 4:.1f}" '
            f'text-anchor="end">{escape(threshold_label)} {escape(show(threshold))}</text>'
        )
    for ln in lines:
        out += _drawn(f, ln)
    out += _legend(lines)
    out.append("</svg>")
    return "\n".join(out)


def _axes(f: _Frame, show: Callable[[float], str]) -> list[str]:
    """Five y ticks with grid lines, five x ticks in seconds."""
    out = []
    right, below = WIDTH - RIGHT, HEIGHT - BOTTOM + 14
    for i in range(5):
        v = f.y0 + (f.y1 - f.y0) * i / 4
        y = f.py(v)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(show(v))}</text>"
        )
    for i in range(5):
        v = f.x0 + (f.x1 - f.x0) * i / 4
        out.append(
            f'<text class="tick" x="{f.px(v):.1f}" y="{below}" text-anchor="middle">'
            f"{v:.3g} s</text>"
        )
    return out


def _drawn(f: _Frame, ln: Line) -> list[str]:
    """A series: a polyline per run of points with a value, a dot for a lone point."""
    out = []
    for run in _segments(ln.points):
        if len(run) == 1:
            (x, y) = run[0]
            out.append(f'<circle class="{ln.css}" cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="3"/>')
            continue
        pts = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in run)
        out.append(f'<polyline class="{ln.css}" points="{pts}"/>')
    return out


def _legend(lines: Sequence[Line]) -> list[str]:
    """Each series' name under the x axis, after a stroke of its style."""
    out, lx, y = [], LEFT, HEIGHT - 6
    for ln in lines:
        out.append(
            f'<line class="{ln.css}" x1="{lx}" x2="{lx + 18}" y1="{y}" y2="{y}"/>'
            f'<text class="legend" x="{lx + 22}" y="{y + 4}">{escape(ln.label)}</text>'
        )
        lx += 30 + 7 * len(ln.label)
    return out


def _when(text: Any) -> datetime | None:
    """A phase's `started` (ISO 8601 UTC, `Z`), else None."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _bar_label(x: float, w: float, y: float, width: int, text: str) -> str:
    """A bar's length, after its end, or before its start where the end leaves no room."""
    if x + w + 60 <= width:
        return f'<text class="tick" x="{x + w + 4:.1f}" y="{y}">{escape(text)}</text>'
    return f'<text class="tick" x="{x - 4:.1f}" y="{y}" text-anchor="end">{escape(text)}</text>'


def timeline(phases: Sequence[dict[str, Any]]) -> str:
    """The phases of a host's rollout as bars on one time axis from its first phase's start:
    each bar as long as the step took, green where it passed, red where it failed. Phases
    without a readable start or length are left out (the table beside it lists them all)."""
    rows = []
    for p in phases:
        at, took = _when(p.get("started")), num(p.get("seconds"))
        if at is not None and took is not None and took >= 0:
            rows.append((str(p.get("step", "?")), p.get("ok") is True, at, took))
    if not rows:
        return '<p class="none">no phase with a start time to draw</p>'
    first = min(at for _s, _ok, at, _t in rows)
    starts = [(at - first).total_seconds() for _s, _ok, at, _t in rows]
    end = max([1e-3, *(s + t for s, (_n, _ok, _at, t) in zip(starts, rows, strict=True))])
    left, bar, width = 130, 18, WIDTH
    pw = width - left - RIGHT
    height = TOP + len(rows) * (bar + 6) + 24
    out = [
        f'<svg class="timeline" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="phases">',
        "<title>phases</title>",
    ]
    for i, ((step, ok, _at, took), s) in enumerate(zip(rows, starts, strict=True)):
        y = TOP + i * (bar + 6)
        x, w = left + s / end * pw, max(2.0, took / end * pw)
        css = "ok" if ok else "failed"
        out.append(
            f'<text class="tick" x="{left - 6}" y="{y + 13}" text-anchor="end">{escape(step)}'
            f'</text><rect class="phase {css}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
            f'height="{bar}"><title>{escape(step)}: {took:.3g} s</title></rect>'
            + _bar_label(x, w, y + 13, width, f"{took:.3g} s")
        )
    y = height - 8
    out.append(
        f'<text class="tick" x="{left}" y="{y}">0 s</text>'
        f'<text class="tick" x="{left + pw}" y="{y}" text-anchor="end">{end:.3g} s</text></svg>'
    )
    return "\n".join(out)
