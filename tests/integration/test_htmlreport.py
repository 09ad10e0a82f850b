"""`vpatch rollout report REPORT --html FILE` and `--report-html FILE` as a user runs them (the
real CLI), and the golden reports' pages (tests/cases/rollout/html/) as headless Chromium
renders them (tests/support/browser.py): the verdicts and the charts in the DOM it built, a
screenshot that is not blank, no request made; a hostile host name stays text. Each measure
is shown able to see what it guards against: a page that loads a URL is caught, a blank page
reads as blank."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import vpatch
from tests.support import browser, htmlfacts

CASES = Path(__file__).resolve().parents[1] / "cases" / "rollout" / "html"


def _report(tmp_path: Path, case: str) -> Path:
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(json.loads((CASES / f"{case}.json").read_text())["report"]))
    return path


def test_rollout_report_writes_the_page_of_a_report(tmp_path: Path) -> None:
    report, page = _report(tmp_path, "baseline_kept_with_gaps"), tmp_path / "out.html"
    res = vpatch("rollout", "report", report, "--html", page)
    assert res.code == 0 and res.err == "", res.err
    assert res.out == f"wrote {page} (1 host(s))\n"
    f = htmlfacts.facts(page.read_text())
    assert f.charts == 3 and f.verdicts == ["ok", "kept", "kept"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([report.name, page.name])  # no temp file left beside it


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["report", "{missing}", "--html", "{page}"], "No such file"),
        (["report", "{notjson}", "--html", "{page}"], "not JSON"),
        (["report", "{apply}", "--html", "{page}"], "not the report of a `vpatch rollout`"),
        (["report", "{good}"], "needs one REPORT and --html FILE"),
        (["report", "{good}", "{good}", "--html", "{page}"], "needs one REPORT"),
        (["report", "{good}", "--html", "{page}", "--json"], "writes HTML, not a --json"),
        (["report", "{good}", "--html", "{nodir}"], "cannot open its directory"),
        (["report", "{good}", "--html", "{link}"], "is a symbolic link"),
        (["spec.toml", "--host", "h", "--html", "{page}"], "--html goes with"),
        (["spec.toml", "--host", "h", "--report-html", "{link}"], "is a symbolic link"),
        (["spec.toml", "--host", "h", "--report-html", "{nodir}"], "cannot open its directory"),
    ],
    ids=[
        "missing",
        "not-json",
        "not-a-rollout",
        "no-html",
        "two-reports",
        "json",
        "no-dir",
        "html-link",
        "html-on-rollout",
        "report-html-link",
        "report-html-no-dir",
    ],
)
def test_bad_input_is_one_error_and_hint_exit_2_nothing_written(
    tmp_path: Path, argv: list[str], words: str
) -> None:
    """Nothing contacted (the rollout's checks come before its targets: `--host h` names no
    host that exists), nothing written, the link's target untouched."""
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link.html").symlink_to(victim)
    (tmp_path / "notjson.json").write_text("{")
    (tmp_path / "apply.json").write_text('{"command": "apply", "ok": true, "hosts": []}')
    names = {
        "missing": tmp_path / "missing.json",
        "notjson": tmp_path / "notjson.json",
        "apply": tmp_path / "apply.json",
        "good": _report(tmp_path, "baseline_kept_with_gaps"),
        "page": tmp_path / "page.html",
        "nodir": tmp_path / "no" / "such" / "page.html",
        "link": tmp_path / "link.html",
    }
    before = sorted(os.listdir(tmp_path))
    res = vpatch("rollout", *(a.format(**names) for a in argv))
    lines = res.err.strip().splitlines()
    assert res.code == 2, res.err
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert words in lines[0], lines
    assert "Traceback" not in res.err
    assert sorted(os.listdir(tmp_path)) == before and victim.read_text() == "keep\n"


def test_the_pages_render_in_chromium_with_verdicts_and_charts(tmp_path: Path) -> None:
    """Each golden report's page, as Chromium builds and draws it."""
    for case in sorted(p.stem for p in CASES.glob("*.json")):
        want = json.loads((CASES / f"{case}.json").read_text())["expect"]
        page = tmp_path / f"{case}.html"
        assert vpatch("rollout", "report", _report(tmp_path, case), "--html", page).code == 0
        shown = browser.render(page, width=1000, height=1400)
        assert shown.requested == [], (case, shown.requested)
        dom = htmlfacts.facts(shown.dom)
        assert dom.charts == want["charts"] and dom.scripts == 0, case
        if "verdicts" in want:
            assert dom.verdicts == want["verdicts"], case
        text = htmlfacts.text_of(shown.dom)
        assert all(words in text for words in want["texts"]), case
        seen = browser.pixels(shown.png)
        assert sum(p != (255, 255, 255) for p in seen) > len(seen) // 100, case  # not blank
        if want["charts"]:
            assert htmlfacts.near(seen, htmlfacts.CANARY_RGB) > 100, case


def test_a_hostile_host_name_is_text_in_the_rendered_page(tmp_path: Path) -> None:
    page = tmp_path / "hostile.html"
    assert vpatch("rollout", "report", _report(tmp_path, "hostile_names"), "--html", page).code == 0
    shown = browser.render(page, width=1000, height=800)
    dom = htmlfacts.facts(shown.dom)
    assert dom.scripts == 0 and dom.urls == [] and shown.requested == []
    assert "<script>alert(1)</script>" in htmlfacts.text_of(shown.dom)
    assert "alert" not in "".join(dom.elements)


def test_the_measures_see_a_request_and_a_blank_page(tmp_path: Path) -> None:
    """The controls: a page that loads an image and a style sheet from the network is seen
    requesting both (through the resolver that resolves nothing), and an empty page's
    screenshot has no pixel that is not white; the same page under the report's
    Content-Security-Policy requests nothing."""
    from patcher.output.htmlreport import CSP

    body = '<img src="http://leak.invalid/x.png"><link rel="stylesheet" href="https://leak.invalid/a.css">'
    leak, blank, held = tmp_path / "leak.html", tmp_path / "blank.html", tmp_path / "held.html"
    leak.write_text(f"<!DOCTYPE html><html><body>{body}</body></html>")
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    csp = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    held.write_text(f"<!DOCTYPE html><html><head>{csp}</head><body>{body}</body></html>")
    got = browser.render(leak, width=400, height=300)
    assert sorted(got.requested) == ["http://leak.invalid/x.png", "https://leak.invalid/a.css"]
    assert htmlfacts.facts(leak.read_text()).urls != []
    seen = browser.pixels(browser.render(blank, width=400, height=300).png)
    assert len(seen) == 400 * 300 and all(p == (255, 255, 255) for p in seen)
    assert browser.render(held, width=400, height=300).requested == []
