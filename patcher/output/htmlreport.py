"""A rollout's report as one HTML page people look at (`vpatch rollout report REPORT --html
FILE`, `vpatch rollout --report-html FILE`): per host its verdict and the evidence for it (each
gate's quantity, unit, value, threshold, p and decision), a chart per gate of the window's
per-interval series, canary against the control hosts (or its own baseline), with the gate's
threshold, and its phases on a timeline.

Pure: the report's JSON document in (patcher/rollout/walk.py's `rollout` per host), HTML text
out. The page is self-contained: inline CSS, inline SVG (patcher/output/svgchart.py), no
script, no font, no image, and a Content-Security-Policy that lets it load nothing, so opening
it contacts nothing. Everything taken from the report is escaped: host names, spec ids and
details come from inventories and hosts, and a report is only a file anyone could have edited.
A value of the wrong type is shown as missing, never as markup."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from patcher.output.svgchart import Line, chart, num, timeline

CSP = "default-src 'none'; style-src 'unsafe-inline'"

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b1f24; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #c9d1d9; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f3f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 4px; font-weight: 600;
  color: #fff; background: #b42318; } .verdict.good { background: #1a7f37; }
.verdict.neutral { background: #57606a; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #b42318; font-weight: 600; }
.detail, .none { color: #57606a; } .error { color: #b42318; }
section.host { border-top: 2px solid #d0d7de; margin-top: 24px; }
svg { display: block; margin: 4px 0 14px; background: #fff; }
svg .plot { fill: #fbfcfd; stroke: #c9d1d9; } svg .grid { stroke: #eaeef2; }
svg .tick, svg .legend, svg .threshold-label { font: 11px system-ui, sans-serif; fill: #424a53; }
svg polyline { fill: none; stroke-width: 2; }
svg .canary { stroke: #0969da; fill: #0969da; }
svg .reference { stroke: #bc4c00; fill: #bc4c00; stroke-dasharray: 5 3; }
svg polyline.canary, svg polyline.reference, svg line.canary, svg line.reference { fill: none; }
svg .threshold { stroke: #8250df; stroke-width: 1.5; stroke-dasharray: 2 3; }
svg .threshold-label { fill: #8250df; }
svg .phase.ok { fill: #2da44e; } svg .phase.failed { fill: #cf222e; }
"""


def _str(v: Any, default: str = "") -> str:
    return v if isinstance(v, str) else default


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def shower(unit: str, ratio: bool = False) -> Callable[[float], str]:
    """How a value of the gate's unit reads: a share as a percent, seconds as ms or s, a
    ratio as `1.02x`, anything else with four significant digits."""
    if ratio:
        return lambda x: f"{x:.3g}x"
    if unit.startswith("share"):
        return lambda x: f"{x * 100:.3g} %"
    if unit.startswith("seconds"):
        return lambda x: f"{x * 1000:.3g} ms" if abs(x) < 1 else f"{x:.3g} s"
    return lambda x: f"{x:.4g}"


def render(doc: dict[str, Any]) -> str:
    """The page of a rollout's report (its `--json` document)."""
    hosts = [_dict(h) for h in _list(doc.get("hosts"))]
    runs = sorted({_str(_dict(h.get("rollout")).get("run")) for h in hosts} - {""})
    title = "vpatch rollout" + (f" {', '.join(runs)}" if runs else "")
    ok = doc.get("ok") is True
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p>rollout: <span class="verdict {"good" if ok else "bad"}" id="rollout-ok">'
        f"{'ok' if ok else 'not ok'}</span> &middot; {len(hosts)} host(s)</p>",
        _summary(hosts),
        *(_host(i, h) for i, h in enumerate(hosts)),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _verdict_of(h: dict[str, Any]) -> tuple[str, str]:
    """(the host's verdict word, its CSS class)."""
    r = h.get("rollout")
    if not isinstance(r, dict):
        return ("failed" if h.get("error") else "not started"), "bad"
    if r.get("control") is True:
        return "control", "neutral"
    word = _str(r.get("verdict")) or ("running" if _list(r.get("phases")) else "not started")
    return word, "good" if r.get("patched") is True else "bad"


def _summary(hosts: list[dict[str, Any]]) -> str:
    rows = [
        '<table class="summary"><tr><th>host</th><th>verdict</th><th>step reached</th>'
        "<th>compared with</th></tr>"
    ]
    for i, h in enumerate(hosts):
        r = _dict(h.get("rollout"))
        word, css = _verdict_of(h)
        rows.append(
            f'<tr><td><a href="#host-{i}">{escape(_str(h.get("target"), "?"))}</a></td>'
            f'<td><span class="verdict {css}">{escape(word)}</span></td>'
            f"<td>{escape(_str(r.get('reached'), '-'))}</td>"
            f"<td>{escape(_str(r.get('compared_with'), '-'))}</td></tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


def _host(i: int, h: dict[str, Any]) -> str:
    """One host's section: verdict, error and hint, gates, a chart per gate, phases."""
    name = _str(h.get("target"), "?")
    word, css = _verdict_of(h)
    out = [
        f'<section class="host" id="host-{i}"><h2>{escape(name)}</h2>',
        f'<p>verdict: <span class="verdict {css}">{escape(word)}</span></p>',
    ]
    for key in ("error", "hint"):
        if _str(h.get(key)):
            out.append(f'<p class="{key}">{key}: {escape(_str(h.get(key)))}</p>')
    r = h.get("rollout")
    if not isinstance(r, dict) or r.get("control") is True:
        for note in _list(h.get("notes")):
            out.append(f'<p class="detail">{escape(_str(note))}</p>')
        out.append("</section>")
        return "\n".join(out)
    out.append(f'<p class="detail">{escape(_options(r))}</p>')
    gates = [_dict(g) for g in _list(r.get("gates"))]
    out.append("<h3>gates</h3>")
    out.append(_gate_table(gates) if gates else '<p class="none">no gate was judged</p>')
    for g in gates:
        out.append(_gate_chart(g, r))
    out.append("<h3>phases</h3>")
    phases = [_dict(p) for p in _list(r.get("phases"))]
    out.append(timeline(phases))
    out.append(_phase_table(phases))
    out.append("</section>")
    return "\n".join(out)


def _options(r: dict[str, Any]) -> str:
    """The run and how its windows were measured and compared, in one line."""
    parts = [f"run {_str(r.get('run'), '?')}"]
    for key, fmt in (
        ("window", "window {:g} s"),
        ("scrape_every", "a scrape every {:g} s"),
        ("confidence", "confidence {:g}"),
        ("max_window", "up to {:g} s"),
    ):
        v = num(r.get(key))
        if v is not None:
            parts.append(fmt.format(v))
    control = _dict(r.get("control"))
    hosts = [h for h in _list(control.get("hosts")) if isinstance(h, str)]
    if r.get("compared_with") == "control":
        parts.append(f"compared with the control host(s) {', '.join(hosts) or '?'}")
    elif r.get("compared_with"):
        parts.append("compared with its own baseline (before the patch)")
    return "; ".join(parts)


def _gate_table(gates: list[dict[str, Any]]) -> str:
    rows = [
        '<table class="gates"><tr><th>gate</th><th>quantity</th><th>unit</th><th>value</th>'
        "<th>threshold</th><th>p</th><th>decision</th><th>detail</th></tr>"
    ]
    for g in gates:
        ratio = bool(_str(g.get("compared_with")))
        show = shower(_str(g.get("unit")), ratio)
        ev = _dict(g.get("evidence"))
        value, limit, p = num(g.get("value")), num(g.get("threshold")), num(ev.get("p"))
        passed = g.get("ok") is True
        decision = _str(ev.get("decision")) or ("pass" if passed else "fail")
        against = f" vs {_str(g.get('compared_with'))}" if ratio else ""
        rows.append(
            f"<tr><td>{escape(_str(g.get('name'), '?'))}</td>"
            f"<td>{escape(_str(g.get('quantity')))}</td><td>{escape(_str(g.get('unit')))}</td>"
            f'<td class="num">{escape(show(value)) if value is not None else "-"}</td>'
            f'<td class="num">{escape(show(limit) + against) if limit is not None else "-"}</td>'
            f'<td class="num">{f"{p:.3g}" if p is not None else "-"}</td>'
            f'<td class="{"pass" if passed else "fail"}">{escape(decision)}</td>'
            f'<td class="detail">{escape(_str(g.get("detail")))}</td></tr>'
        )
    rows.append("</table>")
    return "\n".join(rows)


def _points(window: Any, key: str) -> list[tuple[float, float | None]]:
    """A window's series `key` as (seconds into the window, value) points."""
    series = _dict(_dict(window).get("series"))
    ts, vs = _list(series.get("t")), _list(series.get(key))
    out = []
    for t, v in zip(ts, vs, strict=False):
        x = num(t)
        if x is not None:
            out.append((x, num(v)))
    return out


def _gate_chart(g: dict[str, Any], r: dict[str, Any]) -> str:
    """The gate's series per interval: the canary's window and its reference's (the control
    hosts' same window, else the host's own baseline), the threshold drawn where it applies."""
    name, key = _str(g.get("name"), "?"), _str(g.get("series"))
    against = _str(r.get("compared_with"), "baseline")
    ref = r.get("control") if against == "control" else r.get("before")
    canary = _points(r.get("after"), key) if key else []
    if not canary:
        why = "this report keeps no per-interval series of its window"
        return f'<p class="none">{escape(name)}: no chart ({why})</p>'
    if all(y is None for _x, y in canary):
        why = "no interval of the window had a value: " + _str(g.get("detail"))
        return f'<p class="none">{escape(name)}: no chart ({escape(why)})</p>'
    lines = [Line("canary (after the patch)", "canary", canary)]
    reference = _points(ref, key)
    if reference:
        who = "control hosts, same window" if against == "control" else "baseline, before"
        lines.append(Line(who, "reference", reference))
    unit = _str(g.get("unit"))
    title = f"{name}: {key} per interval ({unit})"
    ratio = bool(_str(g.get("compared_with")))
    limit = num(g.get("threshold"))
    label = f"{limit:g}x the {against}" if ratio and limit is not None else "threshold"
    return f"<h4>{escape(title)}</h4>\n" + chart(
        title, lines, num(g.get("line")), shower(unit), label
    )


def _phase_table(phases: list[dict[str, Any]]) -> str:
    rows = [
        '<table class="phases"><tr><th>step</th><th>ok</th><th>started (UTC)</th>'
        "<th>seconds</th><th>detail</th></tr>"
    ]
    for p in phases:
        took = num(p.get("seconds"))
        ok = p.get("ok") is True
        rows.append(
            f"<tr><td>{escape(_str(p.get('step'), '?'))}</td>"
            f'<td class="{"pass" if ok else "fail"}">{"ok" if ok else "failed"}</td>'
            f"<td>{escape(_str(p.get('started')))}</td>"
            f'<td class="num">{f"{took:.3f}" if took is not None else "-"}</td>'
            f'<td class="detail">{escape(_str(p.get("detail")))}</td></tr>'
        )
    rows.append("</table>")
    return "\n".join(rows)
