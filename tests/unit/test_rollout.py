"""patcher.rollout.decide: the step machine and the gates, on the golden cases (milliseconds)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from patcher.errors import UsageError
from patcher.result import HostResult, RunResult
from patcher.rollout import decide, report, resume, settings, view
from patcher.run import fleet
from patcher.serving.gates import Gates
from patcher.serving.measures import Measures
from patcher.serving.model import Counters, parse
from patcher.specs.model import MetricsThresholds
from tests.support import rolloutcases, steercases


@pytest.mark.parametrize("path", rolloutcases.step_cases(), ids=lambda p: p.stem)
def test_step_machine(path: Path) -> None:
    case = rolloutcases.load(path)
    assert rolloutcases.run_steps(case) == case["expect"]


@pytest.mark.parametrize("path", rolloutcases.gate_cases(), ids=lambda p: p.stem)
def test_gates(path: Path) -> None:
    case = rolloutcases.load(path)
    assert rolloutcases.run_gates(case) == case["expect"]


@pytest.mark.parametrize("path", rolloutcases.live_cases(), ids=lambda p: p.stem)
def test_live_report_says(path: Path) -> None:
    case = rolloutcases.load(path)
    assert rolloutcases.run_live(case) == case["expect"]


def test_there_are_cases_of_every_verdict() -> None:
    """The step machine's verdicts, --resume's own (a host changed since its step) and the
    steered ones (tests/cases/rollout/steer/walk/: promoted, aborted)."""
    seen = {rolloutcases.load(p)["expect"]["verdict"] for p in rolloutcases.step_cases()}
    seen |= {steercases.load(p)["expect"]["verdict"] for p in steercases.cases("walk")}
    resumed = {rolloutcases.load(p)["expect"]["action"] for p in rolloutcases.resume_cases()}
    if resume.RESUME_CHANGED in resumed:
        seen.add(decide.CHANGED_SINCE)
    assert seen == set(decide.VERDICTS)


def test_gates_take_the_strictest_table_and_the_overrides() -> None:
    a = MetricsThresholds(min_acceptance_rate=0.4, max_error_rate=0.05)
    b = MetricsThresholds(min_acceptance_rate=0.5, min_tokens_per_s_ratio=0.9, max_error_rate=0.01)
    g = Gates.of([a, None, b])
    lim = g.limit
    assert (lim("min_acceptance_rate"), lim("min_tokens_per_s_ratio"), lim("max_error_rate")) == (
        0.5,
        0.9,
        0.01,
    )
    over = {"min_acceptance_rate": 0.2, "min_tokens_per_s_ratio": 1.1}
    g = Gates.of([a, b], over, allow_no_traffic=True)
    assert (g.limit("min_acceptance_rate"), g.limit("min_tokens_per_s_ratio")) == (0.2, 1.1)
    assert g.allow_no_traffic
    assert Gates.of([]) == Gates()


def test_parse_reads_vllm_counters_and_error_reasons() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts counter",
            'vllm:spec_decode_num_drafts_total{engine="0"} 10',
            'vllm:spec_decode_num_drafts_total{engine="1"} 5',
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 45',
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 9',
            "# TYPE vllm:generation_tokens counter",
            'vllm:generation_tokens_total{engine="0"} 300',
            "# TYPE vllm:request_success counter",
            'vllm:request_success_total{finished_reason="stop"} 7',
            'vllm:request_success_total{finished_reason="length"} 1',
            'vllm:request_success_total{finished_reason="abort"} 1',
            'vllm:request_success_total{finished_reason="error"} 1',
            "",
        ]
    )
    assert parse(text) == Counters(15, 45, 9, 300, 10, 2, True)
    plain = parse("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total 3\n")
    assert plain == Counters(generation_tokens=3)
    with pytest.raises(ValueError):
        parse("<html>login</html>\n{{{")


def test_window_closes_on_time_or_on_enough_drafts() -> None:
    start, now = Counters(drafts=10), Counters(drafts=60)
    assert not decide.window_done(start, now, 5, 120, 100)
    assert decide.window_done(start, now, 5, 120, 50)
    assert decide.window_done(start, now, 120, 120, 100)
    assert not decide.window_done(start, now, 5, 120, 0)  # --min-drafts 0: the full window


@pytest.mark.parametrize("text", ["0", "-1", "x", "nan"])
def test_bad_ratio_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        settings.parse_ratio(text)
    assert settings.parse_ratio("95%") == 0.95


def _host(name: str, verdict: str, before: float | None, after: float | None) -> HostResult:
    ok = verdict == decide.KEPT
    h = HostResult(target=name, ok=ok, error=None if ok else "gates failed: serves worse")
    h.rollout = {
        "verdict": verdict,
        "reached": "gates",
        "before": {"acceptance_rate": None, "tokens_per_s": before},
        "after": {"acceptance_rate": 0.15 if not ok else 0.7, "tokens_per_s": after},
    }
    return h


def test_table_and_batch_lines() -> None:
    hosts = [
        _host("h1", decide.ROLLED_BACK, 200.0, 132.0),
        fleet.skipped("h2", [("s", "vllm")], "a canary host failed"),
    ]
    result = RunResult("rollout", False, hosts)
    assert view.table_rows(result) == [
        ("h1", "gates", "- -> 15 %", "200.0 -> 132.0", "rolled_back"),
        ("h2", "-", "-", "-", "skipped"),
    ]
    out, err = io.StringIO(), io.StringIO()
    view.render_table(result, out)
    assert (
        out.getvalue().splitlines()[-1] == "rollout: not ok: 0 of 2 host(s) patched; 1 not started"
    )
    view.render_problems(result, err)
    assert err.getvalue().splitlines() == [
        "error: h1: gates failed: serves worse",
        "error: h2: skipped: a canary host failed",
        "hint: run `vpatch status` on it",
    ]
    lines = io.StringIO()
    bars = view.BatchLines(["h1", "h2", "h3"], fleet.Policy(canary=1, batch=1), lines)
    bars.advance(_host("h1", decide.KEPT, 200.0, 280.0))
    bars.advance(_host("h3", decide.KEPT, 200.0, 280.0))
    bars.advance(_host("h2", decide.KEPT, 200.0, 280.0))
    assert lines.getvalue().splitlines() == [
        "rollout canary (1 host(s)): 1 kept",
        "rollout batch 2 (1 host(s)): 1 kept",
        "rollout batch 1 (1 host(s)): 1 kept",
    ]


@pytest.mark.parametrize("path", rolloutcases.resume_cases(), ids=lambda p: p.stem)
def test_resume(path: Path) -> None:
    case = rolloutcases.load(path)
    assert rolloutcases.run_resume(case) == case["expect"]


def test_there_are_resume_cases_of_every_action() -> None:
    seen = {rolloutcases.load(p)["expect"]["action"] for p in rolloutcases.resume_cases()}
    r = resume
    assert seen == {r.RESUME_CONTINUE, r.RESUME_DONE, r.RESUME_REFUSE, r.RESUME_CHANGED}


def _entry(**over: object) -> dict[str, object]:
    from patcher.agent import protocol

    return dict(
        protocol.step_entry(
            run="r1", step="apply", ok=True, specs=["s"], detail="ok", started="t", seconds=1.0
        ),
        **over,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"run": "../x"},
        {"run": ""},
        {"step": "reboot"},
        {"ok": "yes"},
        {"verdict": "fine"},
        {"specs": "s"},
        {"specs": [1]},
        {"detail": ["x"]},
        {"detail": "x" * 1001},
        {"seconds": True},
        {"seconds": "1"},
        {"measures": []},
    ],
)
def test_a_forged_step_entry_is_refused_by_both_sides(bad: dict[str, object]) -> None:
    """The agent refuses to append it, and the controller ignores it read back: one check."""
    from patcher import agent

    entry = _entry(**bad)
    steps, problems = resume.read_steps([entry])
    assert steps == [] and len(problems) == 1 and "ignored" in problems[0]
    answer = agent.handle({"op": "rollout_step", "entry": entry, "state_dir": "/nonexistent/x"})
    assert answer["ok"] is False and answer["kind"] == "input"


def test_status_reads_the_newest_well_formed_step() -> None:
    kept = _entry(verdict="kept", ts="2026-12-01T12:00:00Z")
    raw: list[Any] = [_entry(step="baseline"), kept, "j"]
    step, problems = resume.last_step(raw)
    assert step is not None
    assert (step.step, step.verdict, step.at) == ("apply", "kept", raw[1]["ts"])
    assert problems == ["rollout step 3 from the host's journal ignored: not a rollout step entry"]
    assert resume.last_step(None) == (None, [])
    not_a_list = ["the host's rollout steps are not a list; ignored"]
    assert resume.last_step({"x": 1})[1] == not_a_list


def test_measures_read_back_only_when_every_number_is_one() -> None:
    m = Measures(4.0, 200, 0.7, 3.1, 120.5, 0.0, {})
    assert resume.measures_of(m.to_json()) == m
    assert resume.measures_of(dict(m.to_json(), tokens_per_s="fast")) is None
    assert resume.measures_of(dict(m.to_json(), seconds=None)) is None
    assert resume.measures_of(dict(m.to_json(), why={"a": 1})) is None
    assert resume.measures_of("x") is None


def test_step_entries_are_journal_lines_no_fold_or_compaction_trips_on(tmp_path: Path) -> None:
    """Recorded through the real agent op into a real state dir: inspect answers the newest
    run's steps (outside the fingerprint: no plan reads them), the file fold never sees them,
    and a compaction keeps the newest STEPS_KEPT of them verbatim after the file lines."""
    from patcher import agent
    from patcher.agent import compact, journal, protocol, wire

    sdir = str(tmp_path / "state")
    before = agent.handle({"op": "inspect", "packages": {}, "state_dir": sdir})
    for run, step in (("old1", "baseline"), ("new2", "baseline"), ("new2", "apply")):
        entry = protocol.step_entry(run=run, step=step, ok=True, specs=["s"], detail=f"{step} done")
        assert agent.handle(protocol.step_request(entry, sdir)) == {"ok": True, "protocol": 2}
    got = agent.handle({"op": "inspect", "packages": {}, "state_dir": sdir})
    runs = [(e["run"], e["step"]) for e in got["rollout"]]
    assert runs == [("new2", "baseline"), ("new2", "apply")]
    assert all(e["ts"].endswith("Z") for e in got["rollout"])
    assert got["journal"] == {} and got["warnings"] == []
    assert protocol.fingerprint(got) == protocol.fingerprint(before)

    raw = (tmp_path / "state" / "journal.jsonl").read_bytes()
    steps: list[dict[str, object]] = []
    assert journal.parse(raw, [], steps) == [] and len(steps) == 3
    apply = protocol.apply_entry(
        spec="x",
        spec_hash="h",
        package="pkg",
        version="1",
        file="f.py",
        path="/p/f.py",
        before="a" * 64,
        after="b" * 64,
        edits=[],
    )
    lines = [wire.dumps(dict(apply, txn="t1")), wire.dumps(protocol.marker("t1"))]
    many = [
        wire.dumps(
            protocol.step_entry(run="r9", step="baseline", ok=True, specs=["x"], detail=str(i))
        )
        for i in range(journal.STEPS_KEPT + 5)
    ]
    live = compact.live("\n".join([lines[0], *many, lines[1]]).encode())
    assert live is not None
    kept, _names = live
    assert kept[:2] == [line.encode() for line in lines]
    assert kept[2:] == [line.encode() for line in many[-journal.STEPS_KEPT :]]


def test_a_restart_after_the_window_shows_in_the_counters() -> None:
    end = Counters(100, 300, 200, 1000, 50, 0, True)
    assert not decide.restarted_since(end, end)
    assert not decide.restarted_since(end, Counters(120, 360, 240, 1100, 55, 0, True))
    assert decide.restarted_since(end, Counters(3, 9, 6, 30, 1, 0, True))


def test_a_second_ctrl_c_does_not_wait_for_the_hosts_in_flight() -> None:
    """The first SIGINT sets `interrupted` (a rollout's hosts then stop after their step); the
    second raises at once, with the host still busy (rolloutrun then writes the report)."""
    import signal
    import threading
    import time

    from patcher.result import HostResult

    release = threading.Event()
    interrupted = threading.Event()

    main = threading.main_thread().ident
    assert main is not None

    def work(i: int) -> HostResult:
        # To the main thread, as a terminal's Ctrl-C reaches it: a process-directed signal
        # may be taken by this thread instead (the kernel's choice when the main thread is
        # off the CPU with a signal pending), whose handler then wakes no one blocked in the
        # main thread until this host returns.
        signal.pthread_kill(main, signal.SIGINT)
        assert interrupted.wait(10)
        signal.pthread_kill(main, signal.SIGINT)
        release.wait(30)
        return HostResult(target="h1", ok=True)

    # Python's own handler to start from, whatever this process inherited (a test runner
    # started in the background by a shell without job control inherits SIGINT ignored).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            fleet.run(["h1", "h2"], work, fleet.Policy(parallel=1), [], interrupted=interrupted)
        assert time.monotonic() - started < 10
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        release.set()
        signal.signal(signal.SIGINT, inherited)


def _report(tmp_path: Path, doc: object) -> str:
    import json

    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


def test_a_report_to_resume_from_is_checked_before_any_host_is_asked(tmp_path: Path) -> None:
    phases = [{"step": "baseline", "ok": True}, {"step": "apply", "ok": True}]
    host = {"target": "h1", "rollout": {"run": "abc1", "phases": phases}}
    good = {"command": "rollout", "hosts": [host, {"target": "h2", "rollout": None}]}
    got = report.load_report(_report(tmp_path, good), ["h2", "h1"])
    assert got.run == "abc1"
    assert got.steps == {"h1": [("baseline", True), ("apply", True)], "h2": None}
    bad = [
        ("{", ["h1", "h2"], "not JSON"),
        (dict(good, command="apply"), ["h1", "h2"], "not the report of a `vpatch rollout`"),
        (good, ["h1", "h3"], "other hosts than the targets given"),
        (
            dict(good, hosts=[{"target": "h1", "rollout": {"phases": [{"step": "reboot"}]}}]),
            ["h1"],
            "its phases are not rollout steps",
        ),
        (
            dict(good, hosts=[{"target": "h1", "rollout": {"run": "../x", "phases": []}}]),
            ["h1"],
            "its run is not an id",
        ),
    ]
    for doc, names, words in bad:
        with pytest.raises(UsageError) as err:
            report.load_report(_report(tmp_path, doc), names)
        assert words in err.value.message
    with pytest.raises(UsageError):
        report.load_report(str(tmp_path / "missing.json"), ["h1"])


def test_a_ctrl_c_in_the_last_step_says_nothing_is_left_to_resume() -> None:
    """Issue 39: a Ctrl-C whose hosts had all reached a verdict said "--resume continues it"
    with nothing left to resume; a host stopped between steps, or never started, still gets
    the --resume words."""
    from patcher.rollout.view import stopped_note

    def host(verdict: str | None) -> HostResult:
        h = HostResult("h1", True)
        h.rollout = None if verdict is None else {"verdict": verdict}
        return h

    done = RunResult("rollout", True, [host(decide.KEPT), host(decide.ROLLED_BACK)])
    assert "nothing is left to resume" in stopped_note("r1", "/tmp/r.json", done)
    for left in (decide.INTERRUPTED, None):
        mid = RunResult("rollout", False, [host(decide.KEPT), host(left)])
        assert "--resume /tmp/r.json continues it" in stopped_note("r1", "/tmp/r.json", mid)


def test_status_says_a_kept_whose_patch_is_gone_since() -> None:
    """`vpatch status` after a `kept` rollout and a rollback by hand: the verdict is the
    rollout's word of then; the line says the spec is not applied now, never `verdict kept`
    alone beside "nothing recorded"."""
    from patcher.result import RolloutStep

    kept = RolloutStep("r1", "gates", True, "kept", "acceptance 70 % >= 40 %", "T", ["s1", "s2"])
    assert resume.kept_now(kept, ["s1", "s2", "other"]) == kept
    now = resume.kept_now(kept, ["s2"])
    assert now is not None and now.verdict == "kept"
    assert now.detail == (
        "acceptance 70 % >= 40 %; since then s1 is not applied here (rolled back or reinstalled)"
    )
    stopped = RolloutStep("r1", "apply", True, None, "", "T", ["s1"])
    assert resume.kept_now(stopped, []) == stopped and resume.kept_now(None, []) is None


def test_a_seen_the_host_did_not_write_compares_as_nothing() -> None:
    """`seen` comes from the host (it may lie): a shape vpatch's agent never writes is no
    change and no traceback; a real one still is."""
    hostile = {"files": {"/p": "x", "/q": {"applied": ["s"]}}, "server": [[1, [2]], "y", [True]]}
    assert resume.changes(hostile, {"files": [], "server": None}, "gates") == []
    assert resume.changes({"files": 7}, "not an object", "gates") == []
    then = {"files": {"/p": {"sha256": "a", "applied": {"s": "t1"}}}, "server": [[5, "T"]]}
    assert resume.changes(then, {"files": {"/p": 3}, "server": "x"}, "gates") == [
        "s is no longer applied to /p (rolled back)",
        "the server restarted or stopped: pid 5 (started T) no longer runs",
    ]
