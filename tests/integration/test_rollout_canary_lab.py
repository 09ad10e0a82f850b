"""`vpatch rollout --control 1` on the rollout lab (tests/support/rolloutlab.py): real sshd
hosts, real vLLM 0.16.0 files, real supervisord, and traffic that changes during the rollout
(the load client's stream count, changed on every host while the canary restarts).

h1 is the canary, h2 the control (the last target). A patch that costs 20 % of the tokens/s at
equal load (tests/cases/rollout/lab/lab-slow-decode.toml) is rolled back when the load
doubles in its window, though after/before it served 1.6x; a neutral patch is kept when the
load halves, though after/before it served 0.5x. Every rate is judged with the rollout's own
statistics (patcher.serving.stats over the report's per-interval samples), never with a
fixed tolerance around a timing-dependent figure. The last test renders a rollout's HTML
report in headless Chromium.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from patcher.serving import stats
from tests.conftest import REPO, VPATCH, Run, vpatch
from tests.support import browser, htmlfacts, rolloutlab

pytestmark = pytest.mark.vllm
LAB = REPO / "tests" / "cases" / "rollout" / "lab"
SLOW, NEUTRAL = LAB / "lab-slow-decode.toml", LAB / "lab-neutral.toml"
SAMPLER = LAB / "lab-slow-sampler.toml"  # twice the inter-token latency; [metrics] on latency only
CANARY = [
    "--control",
    "1",
    "--confidence",
    "0.95",
    "--window",
    "4",
    "--scrape-every",
    "0.5",
    "--max-window",
    "20",
]


@pytest.fixture(scope="module")
def lab2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rolloutlab.RolloutLab]:
    lab = rolloutlab.start(2, tmp_path_factory.mktemp("canarylab"))
    try:
        yield lab
    finally:
        lab.close()


def _until(cond: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _roll_with_load_change(
    lab: rolloutlab.RolloutLab,
    tmp_path: Path,
    spec: Path,
    streams: int,
    options: Sequence[str] = tuple(CANARY),
) -> Run:
    """The rollout of `spec` with h1's restart held while every host's load changes to
    `streams`: the baseline saw the old load, the window (canary and control) the new one."""
    began, go, held = lab.held_restart(0)
    inv = lab.inventory(tmp_path / "hosts.toml", h1=held)
    argv = [
        *VPATCH,
        "rollout",
        str(spec),
        "--inventory",
        str(inv),
        "--ssh-config",
        str(lab.ssh.ssh_config),
        "--level",
        "static",
        "--json",
        *options,
    ]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        try:
            _until(began.exists)
        except AssertionError:  # the restart never began: say what the rollout said
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the restart never began: {out[-2000:]} {err[-2000:]}") from None
        lab.set_streams(streams)
        go.touch()
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Run(proc.returncode, out, err)


def _host(run: Run, name: str) -> dict[str, Any]:
    return next(h for h in run.doc["hosts"] if h["target"] == name)


def _ratio_gate(r: dict[str, Any]) -> dict[str, Any]:
    gate: dict[str, Any] = next(g for g in r["gates"] if g["name"] == "tokens_per_s_ratio")
    return gate


def test_a_slow_patch_is_rolled_back_when_the_load_doubles_in_its_window(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    pid2, files2 = lab2.pid(1), lab2.files(1)
    try:
        res = _roll_with_load_change(lab2, tmp_path, SLOW, 8)  # 4 streams -> 8
    finally:
        lab2.set_streams(None)
    assert res.code == 1, res.out + res.err
    r = _host(res, "h1")["rollout"]
    assert (r["verdict"], r["reached"]) == ("rolled_back", "gates"), r["phases"]
    gate = _ratio_gate(r)
    assert not gate["ok"] and gate["compared_with"] == "control", gate
    assert gate["evidence"]["decision"] == "fail" and "vs control" in gate["detail"]
    assert r["compared_with"] == "control" and r["control"]["hosts"] == ["h2"]
    # What after/before would have said on the same windows: better (the doubled load).
    fooled = stats.samples_at_least(r["after"]["samples"], r["before"]["samples"], 0.9, 0.95)
    assert fooled.decision == stats.PASS, fooled
    # The control: scraped in the window, never written, restarted or leased.
    control = _host(res, "h2")
    assert control["ok"] and control["rollout"]["control"] is True
    assert control["rollout"]["scrapes"] >= len(r["after"]["samples"])
    assert lab2.pid(1) == pid2 and lab2.files(1) == files2
    assert not (lab2.hosts[1].file("vllm/_lab_decode_cost.py")).exists()
    # The canary: the patch out again (the module it added removed), restarted, healthy.
    assert not (lab2.hosts[0].file("vllm/_lab_decode_cost.py")).exists()
    assert lab2.healthy(0)


def test_the_sequential_rule_rolls_the_slow_patch_back_in_under_half_the_scrapes(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """The 20 %-slower patch, the load doubled while the canary restarts, --control 1, in the
    same lab one after the other: today's rule (--rule fixed) with a window of 20 scrapes
    (--window 10 at --scrape-every 0.5: today's default proportion, --window / 20), and the
    default sequential rule with --window 1 (a short baseline; the after-window judged from
    its second scrape). Both roll it back; the sequential rule after fewer than half the
    scrapes (counted by the report, never timed). The paired t cannot decide before four
    intervals at 0.95, so against the 8 intervals of a --window 4 the sequential rule needs
    half of them, not fewer."""
    rest = [*CANARY[: CANARY.index("--window")], *CANARY[CANARY.index("--window") + 2 :]]
    runs = {
        "fixed": [*rest, "--window", "10", "--rule", "fixed"],
        "sequential": [*rest, "--window", "1"],
    }
    got = {}
    for rule, options in runs.items():
        (tmp_path / rule).mkdir()
        try:
            res = _roll_with_load_change(lab2, tmp_path / rule, SLOW, 8, options)
        finally:
            lab2.set_streams(None)
        assert res.code == 1, res.out + res.err
        r = _host(res, "h1")["rollout"]
        assert (r["verdict"], r["rule"]) == ("rolled_back", rule), r["phases"]
        assert _ratio_gate(r)["evidence"]["decision"] == "fail", r["gates"]
        got[rule] = r["decided_after_scrapes"]
    assert 2 * got["sequential"] < got["fixed"], got


def test_a_patch_that_slows_decoding_is_rolled_back_on_the_latency_gate(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """Equal load, one gate: inter-token latency per step, p99 at most 1.3x the control's,
    judged from the window's bucket counts: the canary's share of steps over 1.3x the
    control's p99 against the control's share over it (two proportions)."""
    inv = lab2.inventory(tmp_path / "hosts.toml")
    argv = [
        "rollout",
        str(SAMPLER),
        "--inventory",
        str(inv),
        "--ssh-config",
        str(lab2.ssh.ssh_config),
        "--level",
        "static",
        "--json",
        *CANARY,
    ]
    res = vpatch(*argv)
    assert res.code == 1, res.out + res.err
    r = _host(res, "h1")["rollout"]
    assert (r["verdict"], r["reached"]) == ("rolled_back", "gates"), r["phases"]
    [gate] = r["gates"]
    assert gate["name"] == "itl_p99_ratio" and not gate["ok"], gate
    assert gate["compared_with"] == "control" and gate["evidence"]["decision"] == "fail", gate
    assert gate["evidence"]["test"] == "mixture-ratio" and gate["unit"] == "seconds per engine step"
    assert r["after"]["latency"]["itl"]["p99"] > r["control"]["latency"]["itl"]["p99"]
    # per output token too (the request-level histogram, read beside the per-step one): the
    # sampler's sleep is no speculation, every step still emits as many tokens
    assert r["after"]["latency"]["tpot"]["p50"] > r["control"]["latency"]["tpot"]["p50"]
    assert not (lab2.hosts[0].file("vllm/_lab_decode_cost.py")).exists() and lab2.healthy(0)


# ---------------------------------------------------------------------------------------------
# The HTML report of a real rollout, rendered in headless Chromium (tests/support/browser.py)


def test_a_real_rollouts_html_report_renders_its_verdict_and_charts(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    """`--report-html FILE` and `vpatch rollout report REPORT --html FILE` of the slow
    sampler's rollout (rolled back on its latency gate; acceptance and tokens/s from the
    command line add rows): the verdict and a chart per gate are in the page Chromium built,
    the screenshot shows them, and the page asked the network for nothing. Before the
    neutral patch's test, which leaves h1 patched."""
    inv = lab2.inventory(tmp_path / "hosts.toml")
    report, page = tmp_path / "rollout.json", tmp_path / "rollout.html"
    res = vpatch(
        "rollout",
        SAMPLER,
        "--inventory",
        inv,
        "--ssh-config",
        lab2.ssh.ssh_config,
        "--level",
        "static",
        "--json",
        *CANARY,
        "--min-acceptance",
        "0.01",
        "--min-throughput-ratio",
        "0.2",
        "--report",
        report,
        "--report-html",
        page,
    )
    assert res.code == 1, res.out + res.err
    h1 = next(h for h in res.doc["hosts"] if h["target"] == "h1")
    r = h1["rollout"]
    assert (r["verdict"], r["reached"]) == ("rolled_back", "gates"), r["phases"]
    names = [g["name"] for g in r["gates"]]
    assert names == ["acceptance", "tokens_per_s_ratio", "itl_p99_ratio"], r["gates"]
    # the report keeps each window's series per interval, as many as the window had
    for window in (r["before"], r["after"], r["control"]):
        series = window["series"]
        assert len(series["t"]) == len(window["samples"]) >= 2
        assert all(len(v) == len(series["t"]) for v in series.values())
    assert all(g["series"] in r["after"]["series"] and g["line"] for g in r["gates"])

    # the page written at the end is the page `rollout report` writes from the JSON report
    again = tmp_path / "again.html"
    made = vpatch("rollout", "report", report, "--html", again)
    assert made.code == 0 and again.read_bytes() == page.read_bytes(), made.err

    facts = htmlfacts.facts(page.read_text())
    assert facts.urls == [] and facts.scripts == 0
    shown = browser.render(page, width=1000, height=2400)
    assert shown.requested == []
    dom = htmlfacts.facts(shown.dom)
    # h1's two charts (the lab's stand-in serves no spec-decode counters: no acceptance in any
    # interval, its gate has a note instead); h2 is a control host: no chart, no timeline
    assert dom.charts == 2 and dom.timelines == 1
    assert "acceptance: no chart" in htmlfacts.text_of(shown.dom)
    assert 'id="host-0"' in shown.dom and "rolled_back" in htmlfacts.text_of(shown.dom)
    n = len(r["after"]["series"]["t"])
    assert dom.polyline_points.count(n) >= 2  # the canary's whole window, one line a chart
    seen = browser.pixels(shown.png)
    assert sum(p != (255, 255, 255) for p in seen) > len(seen) // 50  # not blank
    assert htmlfacts.near(seen, htmlfacts.CANARY_RGB) > 500  # the canary's lines are drawn
    assert htmlfacts.near(seen, htmlfacts.THRESHOLD_RGB) > 100  # and the thresholds
    assert re.search(r"itl_p99_ratio.{0,400}fail", htmlfacts.text_of(shown.dom), re.S)


# ---------------------------------------------------------------------------------------------
# Last: a patch kept (h1 stays patched)


def test_a_neutral_patch_is_kept_when_the_load_halves_in_its_window(
    lab2: rolloutlab.RolloutLab, tmp_path: Path
) -> None:
    pid2 = lab2.pid(1)
    try:
        res = _roll_with_load_change(lab2, tmp_path, NEUTRAL, 2)  # 4 streams -> 2
    finally:
        lab2.set_streams(None)
    assert res.code == 0, res.out + res.err
    r = _host(res, "h1")["rollout"]
    assert r["verdict"] == "kept", r
    gate = _ratio_gate(r)
    assert (
        gate["ok"] and gate["evidence"]["decision"] == "pass" and gate["compared_with"] == "control"
    )
    fooled = stats.samples_at_least(r["after"]["samples"], r["before"]["samples"], 0.9, 0.95)
    assert fooled.decision == stats.FAIL, fooled  # after/before: the halved load, "worse"
    assert (lab2.hosts[0].file("vllm/_lab_decode_cost.py")).exists()
    assert lab2.pid(1) == pid2 and not (lab2.hosts[1].file("vllm/_lab_decode_cost.py")).exists()
