"""`vpatch rollout --control`: the executor (patcher/rollout/walk.py, patcher/rollout/canary.py)
over
fake hosts (tests/support/rolloutfake.py), in milliseconds: a control host scraped in the
canary's window and asked nothing else, ratio gates against it, and the window extended until
the rank test decides."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from patcher.inventory.targets import Target
from patcher.rollout import canary, decide, walk
from patcher.specs.model import PatchSpec
from tests.conftest import REPO
from tests.support import rolloutfake
from tests.support.rolloutfake import ControlHost, FakeHost

TARGET, CONTROL = Target("h1", "h1"), Target("h9", "h9")


STAMPS = rolloutfake.Stamps()
WIGGLE = 0.0002  # seconds of generation a scrape's count moves either way (fake noise)


@pytest.fixture(autouse=True)
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake engine steps, and the window's scrapes stamped with the time the fakes read
    their counters at (rolloutfake.Stamps): the rates are the fakes' own, with their seeded
    noise, however loaded the machine."""
    monkeypatch.setattr(walk, "_engine_step", rolloutfake.engine_step)
    monkeypatch.setattr(canary, "time", STAMPS)


def _specs() -> list[PatchSpec]:
    from patcher.specs import catalog

    return catalog.load_all([str(REPO / "patches" / "vllm-eagle3-mla-backport.toml")])


def _roll(
    canary_rate: float, control_rate: float, min_ratio: float
) -> tuple[dict[str, object], ControlHost, FakeHost]:
    fake = FakeHost(stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=canary_rate)
    ctl = ControlHost(target="h9", stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=control_rate)
    return _walk(fake, ctl, min_ratio=min_ratio), ctl, fake


def _walk(fake: FakeHost, ctl: ControlHost, **over: object) -> dict[str, Any]:
    """The canary's rollout against its control, windows of 0.01 s scrapes (`over`: the
    settings that differ)."""
    base: dict[str, object] = {
        "min_drafts": 0,
        "window": 0.05,
        "control": 1,
        "confidence": 0.95,
        "max_window": 2.0,
        "scrape_every": 0.01,
    }
    cfg = rolloutfake.settings(**{**base, **over})
    h = rolloutfake.host(fake, TARGET, _specs(), cfg, "r1")
    h.controls = canary.Controls([CONTROL], lambda t: ctl, cfg.metrics)
    result = walk.walk(h, threading.Event())
    assert result.rollout is not None
    return result.rollout


def test_a_canary_slower_than_its_control_is_rolled_back_and_the_control_only_scraped() -> None:
    r, ctl, fake = _roll(800.0, 1000.0, 0.95)  # 0.8x: far below, whatever the timing
    assert (r["verdict"], r["reached"]) == (decide.ROLLED_BACK, decide.GATES), r
    gate = next(g for g in r["gates"] if g["name"] == "tokens_per_s_ratio")  # type: ignore[union-attr]
    assert gate["compared_with"] == "control" and gate["evidence"]["decision"] == "fail"
    assert gate["evidence"]["n"] >= 5 and gate["evidence"]["p"] < 0.05
    assert r["compared_with"] == "control" and r["control"]["hosts"] == ["h9"]  # type: ignore[index]
    assert set(ctl.asked) == {"fetch"} and len(ctl.asked) >= 6
    assert fake.ran.count(decide.ROLLBACK) == 1


def test_a_canary_as_fast_as_its_control_is_kept() -> None:
    r, ctl, _fake = _roll(1000.0, 1000.0, 0.8)  # 1x against 0.8x: far above
    assert r["verdict"] == decide.KEPT, r
    gate = next(g for g in r["gates"] if g["name"] == "tokens_per_s_ratio")  # type: ignore[union-attr]
    assert gate["ok"] and gate["evidence"]["decision"] == "pass" and "vs control" in gate["detail"]
    assert set(ctl.asked) == {"fetch"}


def test_the_sequential_rule_rolls_a_slow_canary_back_in_fewer_scrapes() -> None:
    """The same 0.8x canary against its control, the same settings but the rule and no
    --window given: the sequential rule decides at an earlier scrape than the fixed rule,
    which cannot before --window and its rank test's five intervals a side."""
    got = {}
    for rule in ("fixed", "sequential"):
        fake = FakeHost(stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=800.0)
        ctl = ControlHost(target="h9", stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=1000.0)
        r = _walk(fake, ctl, min_ratio=0.95, rule=rule, window_given=False)
        assert r["verdict"] == decide.ROLLED_BACK, r
        gate = next(g for g in r["gates"] if g["name"] == "tokens_per_s_ratio")
        assert gate["evidence"]["decision"] == "fail", gate
        got[rule] = (r["decided_after_scrapes"], gate["evidence"]["test"])
        gates = next(p for p in r["phases"] if p["step"] == "gates")
        assert f"decided after {got[rule][0]} scrapes, {rule} rule" in gates["detail"]
    assert got["fixed"][1] == "mann-whitney" and got["sequential"][1] == "t-mixture"
    assert got["fixed"][0] >= 5 > got["sequential"][0] >= 3, got


def test_a_window_that_cannot_decide_fails_with_not_enough_evidence() -> None:
    """A --max-window too short for five intervals a side: the rank test never decides (it
    needs stats.MIN_SAMPLES), the window extends to --max-window and the gate fails, saying
    why. (No fixed timing: the count of intervals is bounded by the windows.)"""
    fake = FakeHost(stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=950.0)
    ctl = ControlHost(target="h9", stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=1000.0)
    cfg = rolloutfake.settings(
        min_drafts=0,
        window=0.01,
        min_ratio=0.95,
        control=1,
        confidence=0.95,
        max_window=0.02,
        scrape_every=0.006,
    )
    h = rolloutfake.host(fake, TARGET, _specs(), cfg, "r1")
    h.controls = canary.Controls([CONTROL], lambda t: ctl, cfg.metrics)
    host = walk.walk(h, threading.Event())
    r = host.rollout
    # Its own word, not "serves worse": rolled back all the same (it was not proven good).
    assert r is not None and r["verdict"] == decide.NOT_ENOUGH_EVIDENCE
    assert [p["step"] for p in r["phases"]][-3:] == [
        "rollback",
        "rollback_restart",
        "rollback_health",
    ]
    gates = next(p for p in r["phases"] if p["step"] == "gates")
    assert gates["detail"].startswith("not enough evidence: tokens_per_s_ratio "), gates
    assert "serves worse" not in gates["detail"]
    gate = next(g for g in r["gates"] if g["name"] == "tokens_per_s_ratio")
    # The final evidence is final (no look follows the last one): never `extend`.
    assert gate["evidence"]["decision"] == decide.SHORT, gate
    assert "does not serve well" not in (host.hint or "")
    assert "samples a side, its test needs 5" in (host.hint or "")
    assert "--max-window, 0.02 s now" in (host.hint or "") and "--scrape-every" in (host.hint or "")
    assert r["after"]["seconds"] >= 0.02  # extended to --max-window, not stopped at --window
    assert len(r["after"]["samples"]) < 5


def test_a_control_host_that_cannot_be_scraped_fails_the_window_and_rolls_back() -> None:
    """Without the control there is nothing to compare with: the window step fails (named),
    the canary is rolled back."""
    fake = FakeHost(stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=1000.0)
    ctl = ControlHost(target="h9", stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=1000.0)
    ctl.call = lambda request, timeout=None: {"ok": True, "error": "connection refused"}  # type: ignore[method-assign]
    cfg = rolloutfake.settings(min_drafts=0, control=1, confidence=0.95, scrape_every=0.01)
    h = rolloutfake.host(fake, TARGET, _specs(), cfg, "r1")
    h.controls = canary.Controls([CONTROL], lambda t: ctl, cfg.metrics)
    r = walk.walk(h, threading.Event()).rollout
    assert r is not None and (r["verdict"], r["reached"]) == (decide.ROLLED_BACK, decide.WINDOW)
    window = next(p for p in r["phases"] if p["step"] == "window")
    assert "control host h9: cannot scrape" in window["detail"], window


def test_a_control_scrape_over_a_bound_fails_the_window_with_its_reason() -> None:
    """A control host's endpoint sending one hostile `position` label: that scrape fails,
    named, the canary is rolled back; nothing is built from the value (it used to size a
    tuple of that many floats)."""
    fake = FakeHost(stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=1000.0)
    ctl = ControlHost(target="h9", stamps=STAMPS, wiggle=WIGGLE, tokens_per_s=1000.0)
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    hostile = f'# TYPE {name} counter\n{name}_total{{position="1000000000000"}} 1\n'
    ctl._metrics = lambda: hostile  # type: ignore[method-assign]
    cfg = rolloutfake.settings(min_drafts=0, control=1, confidence=0.95, scrape_every=0.01)
    h = rolloutfake.host(fake, TARGET, _specs(), cfg, "r1")
    h.controls = canary.Controls([CONTROL], lambda t: ctl, cfg.metrics)
    r = walk.walk(h, threading.Event()).rollout
    assert r is not None and (r["verdict"], r["reached"]) == (decide.ROLLED_BACK, decide.WINDOW)
    window = next(p for p in r["phases"] if p["step"] == "window")
    assert (
        "control host h9: http://localhost:8000/metrics sent a scrape over vpatch's bounds"
        in (window["detail"])
    ), window
    assert "position '1000000000000', above the highest read, 63" in window["detail"]


def test_the_table_shows_the_control_and_names_the_comparison() -> None:
    import io

    from patcher.result import HostResult, RunResult
    from patcher.rollout.view import render_table

    r, _ctl, _fake = _roll(800.0, 1000.0, 0.95)

    canary_host = HostResult(target="h1", ok=False, rollout=r)
    control = canary.control_result("h9", [("spec", "vllm")], 12)
    out = io.StringIO()
    render_table(RunResult("rollout", False, [canary_host, control]), out)
    lines = out.getvalue().splitlines()
    assert lines[1].split()[0] == "h1" and lines[1].split()[-1] == "rolled_back"
    assert lines[2].split() == ["h9", "-", "-", "-", "control"]
    assert "compared with: the control host(s) h9 in the same windows" in out.getvalue()
    assert "0 of 1 host(s) patched" in out.getvalue()  # the control is not a host to patch
    assert control.ok and "never written, restarted or leased" in control.notes[0]
