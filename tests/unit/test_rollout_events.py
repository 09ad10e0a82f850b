"""A rollout's events and its live view: the record (patcher.rollout.events) and the view's
lines (patcher.rollout.liveview) against golden cases; the stream a rollout writes beside its
report over the fake host of tests/support/rolloutfake.py (every phase begun and ended, every
scrape of a window with its evidence, the verdict, the run's end); `vpatch rollout watch`'s
reader on it, and its answers to bad input. The same on real sshd hosts, in tmux:
tests/integration/test_rollout_watch_lab.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from patcher.errors import UsageError
from patcher.inventory.targets import Target
from patcher.output import progress
from patcher.result import RunResult
from patcher.rollout import driver, events, liveview, stream, walk, watching
from patcher.run import fleet
from tests.conftest import REPO, Env, vpatch
from tests.support import rolloutfake, viewcases
from tests.support.rolloutfake import FakeHost
from tests.support.standin_specs import SPEC_A

BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
STEERED = {"verb": "pause", "seq": 2, "user": "alice", "uid": 1000, "at": "t"}


@pytest.mark.parametrize("path", viewcases.event_cases(), ids=lambda p: p.stem)
def test_event_evidence_cases(path: Path) -> None:
    case = viewcases.load(path)
    assert viewcases.run_event(case) == case["expect"], case["why"]


@pytest.mark.parametrize("path", viewcases.view_cases(), ids=lambda p: p.stem)
def test_view_cases(path: Path) -> None:
    case = viewcases.load(path)
    assert viewcases.run_view(case) == case["expect"], case["why"]
    for doc in case["events"]:  # what the stream writes is what a watcher reads back
        assert events.from_json(doc).to_json() == doc


def test_each_step_s_time_limit() -> None:
    limits = {"window": 10.0, "max_window": 30.0, "restart": 600.0, "health": 900.0}
    got = {s: events.timeout_of(s, **limits) for s in events.STEPS}
    assert got == {
        "baseline": 10.0,
        "apply": None,
        "restart": 600.0,
        "health": 900.0,
        "window": 30.0,  # an undecided window may extend to --max-window
        "gates": None,
        "rollback": None,
        "rollback_restart": 600.0,
        "rollback_health": 900.0,
    }
    assert events.timeout_of("window", **{**limits, "max_window": None}) == 10.0


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"v": 2, "at": "t", "run": "r", "kind": "start"},
        {"v": 1, "at": "t", "run": "r", "kind": "reboot"},
        {"v": 1, "at": "t", "kind": "start"},
        {"v": 1, "at": "t", "run": "r" * 401, "kind": "start"},
        {"v": 1, "at": "t", "run": "r", "kind": "scrape", "elapsed": float("nan")},
        {"v": 1, "at": "t", "run": "r", "kind": "scrape", "elapsed": True},
        {"v": 1, "at": "t", "run": "r", "kind": "end", "ok": "yes"},
        {"v": 1, "at": "t", "run": "r", "kind": "start", "hosts": "h1"},
        {"v": 1, "at": "t", "run": "r", "kind": "scrape", "evidence": {"gates": [1]}},
        {"v": 1, "at": "t", "run": "r", "kind": "steer"},
        {"v": 1, "at": "t", "run": "r", "kind": "steer", "steer": "pause"},
        {"v": 1, "at": "t", "run": "r", "kind": "steer", "steer": {**STEERED, "verb": "halt"}},
        {"v": 1, "at": "t", "run": "r", "kind": "steer", "steer": {**STEERED, "seq": "2"}},
        {"v": 1, "at": "t", "run": "r", "kind": "phase", "steer": {**STEERED, "user": None}},
    ],
)
def test_a_line_that_is_not_an_event_is_refused(doc: Any) -> None:
    with pytest.raises(events.BadEvent):
        events.from_json(doc)


# ---------------------------------------------------------------------------------------------
# The stream a rollout writes (over the fake host)


def _request(tmp_path: Path, cfg: Any, *sinks: Any) -> driver.Request:
    """The back-port's rollout, its report in `tmp_path`."""
    report = str(tmp_path / "r.json")
    spec = [str(BACKPORT)]
    return driver.Request(
        specs=spec,
        level="static",
        force=False,
        state_dir=None,
        report=report,
        resume=None,
        settings=cfg,
        sinks=sinks,
    )


def _drive(
    tmp_path: Path, acceptance: float, hosts: int = 2, *also: stream.Sink
) -> tuple[Any, list[events.Event]]:
    """A rollout over `hosts` fake hosts (canary 1), its events collected by a sink (and
    handed to `also`, after)."""
    fakes = {
        f"h{i}": FakeHost(target=f"h{i}", acceptance=acceptance, state_dir=str(tmp_path / f"s{i}"))
        for i in range(1, hosts + 1)
    }
    got: list[events.Event] = []
    cfg = rolloutfake.settings(min_drafts=300, min_acceptance=0.4, window=5.0)
    request = _request(tmp_path, cfg, got.append, *also)
    inherited = signal.getsignal(signal.SIGINT)
    try:
        done = driver.drive(
            request,
            [Target(n, n) for n in fakes],
            fleet.Policy(parallel=1, canary=1),
            lambda t: fakes[t.name],
            lambda names: progress.HostsProgress(),
            lambda run, path: None,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    return done, got


@pytest.fixture(autouse=True)
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk, "_engine_step", rolloutfake.engine_step)
    made = walk._host

    def linked(target: Target, transport: Any, *args: Any, **kw: Any) -> walk.Host:
        h = made(target, transport, *args, **kw)
        transport.current = lambda: h.current
        return h

    monkeypatch.setattr(walk, "_host", linked)
    progress.configure()


def _phases(got: list[events.Event], host: str, kind: str) -> list[str | None]:
    return [e.phase for e in got if e.host == host and e.kind == kind]


def test_every_phase_and_scrape_is_an_event_and_the_file_has_them_all(tmp_path: Path) -> None:
    done, got = _drive(tmp_path, acceptance=0.7)
    assert done.result.ok
    lines = (tmp_path / "r.json.events").read_text().splitlines()
    assert [json.loads(ln) for ln in lines] == [e.to_json() for e in got]
    assert got[0].kind == events.START and got[0].hosts == ("h1", "h2")
    assert got[0].pid == os.getpid()
    assert got[-1].kind == events.END and got[-1].ok is True
    forward = ["baseline", "apply", "restart", "health", "window", "gates"]
    for host in ("h1", "h2"):
        assert _phases(got, host, events.PHASE) == forward
        assert _phases(got, host, events.ENDED) == forward
        scrapes = [e for e in got if e.host == host and e.kind == events.SCRAPE]
        assert {e.phase for e in scrapes} == {"baseline", "window"}
        window = [e.evidence for e in scrapes if e.phase == "window"]
        assert window and all(ev is not None and ev.decision == events.PASS for ev in window)
        assert all(
            e.evidence and e.evidence.decision is None
            for e in scrapes[: len(scrapes) - len(window)]
        )
        assert [e.verdict for e in got if e.host == host and e.kind == events.DONE] == ["kept"]
    restart = next(e for e in got if e.kind == events.PHASE and e.phase == "restart")
    assert restart.timeout == 60.0  # the fake's --restart-timeout


def test_a_rolled_back_canary_s_events(tmp_path: Path) -> None:
    done, got = _drive(tmp_path, acceptance=0.15)
    assert not done.result.ok
    back = ["rollback", "rollback_restart", "rollback_health"]
    assert _phases(got, "h1", events.PHASE)[-3:] == back
    window = [e.evidence for e in got if e.kind == events.SCRAPE and e.phase == "window"]
    assert window and all(ev and ev.decision == events.FAIL for ev in window)
    assert [g.name for g in window[0].gates if g.state == events.FAIL] == ["acceptance"]  # type: ignore[union-attr]
    gates = next(e for e in got if e.kind == events.ENDED and e.phase == "gates")
    assert gates.ok is False and "acceptance 15 % < 40 %" in gates.detail
    assert [e.verdict for e in got if e.kind == events.DONE] == ["rolled_back"]
    assert not [e for e in got if e.host == "h2"]  # the fleet policy never started it
    assert got[-1].kind == events.END and got[-1].ok is False
    # The watcher's reader replays the finished stream and ends at its last event.
    fd = watching.open_events(str(tmp_path / "r.json"))
    seen: list[events.Event] = []
    try:
        last = watching.follow(fd, seen.append, sleep=_no_sleep)
    finally:
        os.close(fd)
    assert (
        last is not None
        and last.kind == events.END
        and seen == [events.from_json(e.to_json()) for e in got]
    )
    board = liveview.Board()
    for e in seen:
        liveview.fold(board, e)
    screen = liveview.screen(board, liveview.epoch(seen[-1].at))
    assert screen[1].split()[:2] == ["h1", "rolled_back"] and "not started" in screen[2]


def test_a_pause_is_an_event_and_so_is_the_host_it_holds(tmp_path: Path) -> None:
    """A pause written as h1's first event arrives (h1 goes on: it is in flight), the
    resume written once h2 is said held: both are events of the run when the controller
    takes them, and h2's first phase is `held` (by that pause), then its walk as usual; the
    journal's steps are untouched by it (the report's phases have no `held`)."""
    from patcher.rollout import channel

    report = str(tmp_path / "r.json")

    def steer(ev: events.Event) -> None:
        if ev.kind == events.PHASE and ev.host == "h1" and ev.phase == "baseline":
            channel.write(report, ev.run, "pause")
        if ev.kind == events.PHASE and ev.phase == events.HELD:
            channel.write(report, ev.run, "resume")

    done, got = _drive(tmp_path, 0.7, 2, steer)
    assert done.result.ok
    said = [(e.kind, e.host, e.phase, e.steer and (e.steer.verb, e.steer.seq)) for e in got]
    steers = [s for s in said if s[0] == events.STEER or s[2] == events.HELD]
    assert steers == [
        (events.STEER, None, None, ("pause", 2)),
        (events.PHASE, "h2", events.HELD, ("pause", 2)),
        (events.STEER, None, None, ("resume", 3)),
    ]
    assert said.index(steers[-1]) < said.index((events.PHASE, "h2", "baseline", None))
    assert _phases(got, "h2", events.PHASE)[:2] == [events.HELD, "baseline"]
    assert events.HELD not in _phases(got, "h2", events.ENDED)
    lines = (tmp_path / "r.json.events").read_text().splitlines()
    assert [json.loads(ln) for ln in lines] == [e.to_json() for e in got]
    doc = json.loads(Path(report).read_text())
    h2 = next(h["rollout"] for h in doc["hosts"] if h["target"] == "h2")
    assert events.HELD not in [p["step"] for p in h2["phases"]]
    assert [s["verb"] for s in h2["steers"]] == ["pause", "resume"]


def _no_sleep(seconds: float) -> None:
    raise AssertionError("the reader waited on a finished stream")


def test_a_planted_link_at_the_stream_s_name_stops_the_rollout_before_any_host(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "r.json.events").symlink_to(victim)
    fake = FakeHost(state_dir=str(tmp_path / "s"))
    request = _request(tmp_path, rolloutfake.settings())
    with pytest.raises(UsageError, match="symbolic link"):
        driver.drive(
            request,
            [Target("h1", "h1")],
            fleet.Policy(parallel=1),
            lambda t: fake,
            lambda names: progress.HostsProgress(),
            lambda run, path: None,
        )
    assert fake.ops == [] and victim.read_text() == "keep\n"


def test_the_reader_ends_when_the_controller_is_gone_without_an_end(tmp_path: Path) -> None:
    """A controller SIGKILLed mid-run leaves no last event: the watcher sees its process gone
    (on this node) and stops instead of following forever."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    start = events.Event(
        at="2026-12-06T18:00:00.000Z",
        run="r1",
        kind=events.START,
        hosts=("h1",),
        pid=dead.pid,
        node=socket.gethostname(),
    )
    phase = events.Event(
        at="2026-12-06T18:00:01.000Z", run="r1", kind=events.PHASE, host="h1", phase="restart"
    )
    (tmp_path / "r.json").write_text(json.dumps({"command": "rollout", "hosts": []}))
    text = "".join(json.dumps(e.to_json()) + "\n" for e in (start, phase))
    (tmp_path / "r.json.events").write_text(text)
    fd = watching.open_events(str(tmp_path / "r.json"))
    seen: list[events.Event] = []
    try:
        assert watching.follow(fd, seen.append, sleep=lambda s: None) is None
    finally:
        os.close(fd)
    assert [e.kind for e in seen] == [events.START, events.PHASE]
    assert watching.controller_alive(
        events.Event(at="", run="r", kind="start", pid=os.getpid(), node=socket.gethostname()),
        events.STALE_S * 10,  # on this node the process decides, however long it was silent
    )


# ---------------------------------------------------------------------------------------------
# `vpatch rollout watch`: bad input and a finished run


def test_watch_bad_input_is_one_error_and_a_hint(tmp_path: Path) -> None:
    other = tmp_path / "apply.json"
    other.write_text(json.dumps({"command": "apply", "hosts": []}))
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps({"command": "rollout", "hosts": []}))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json")
    linked = tmp_path / "linked.json"
    linked.write_text(json.dumps({"command": "rollout", "hosts": []}))
    (tmp_path / "linked.json.events").symlink_to(tmp_path / "garbage.json")
    bad_line = tmp_path / "bad.json"
    bad_line.write_text(json.dumps({"command": "rollout", "hosts": []}))
    (tmp_path / "bad.json.events").write_text('{"v": 1, "kind": "start"}\n')
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    cases = {
        tmp_path / "nope.json": "No such file",
        tmp_path: "not a regular file",
        fifo: "not a regular file",
        other: "not the report of a `vpatch rollout`",
        garbage: "not JSON",
        alone: "no event stream beside the report",
        linked: "refused",
        bad_line: "not an event",
    }
    for report, words in cases.items():
        res = vpatch("rollout", "watch", report)
        assert res.code == 2, (report, res.out, res.err)
        lines = res.err.splitlines()
        assert len(lines) == 2 and lines[0].startswith("error: ") and words in lines[0], res.err
        assert lines[1].startswith("hint: "), res.err
        assert res.out == "" and "Traceback" not in res.err
    two = vpatch("rollout", "watch", other, other)
    assert two.code == 2 and "takes one REPORT" in two.err


def test_watch_replays_a_finished_run_as_plain_lines_and_exits_with_its_outcome(
    tmp_path: Path,
) -> None:
    _done, got = _drive(tmp_path, acceptance=0.15)
    res = vpatch("rollout", "watch", tmp_path / "r.json")
    assert res.code == 1, res.out + res.err  # the run ended not ok
    plain = liveview.Plain()
    expect = [s for e in got if (s := plain.line(events.from_json(e.to_json()))) is not None]
    assert res.out.splitlines() == expect
    assert "h1: done: rolled_back" in res.out and "\x1b" not in res.out


def test_nothing_is_said_after_the_run_s_end(tmp_path: Path) -> None:
    """A host still in flight after a second Ctrl-C says nothing once the run ended: its
    event would go to a closed file (whose descriptor number another file may have by then)."""
    got: list[events.Event] = []
    file = stream.LineFile(str(tmp_path / "e"), "--events")
    s = stream.Stream("r1", rolloutfake.settings(), [file, got.append])
    s.start(["h1"])
    s.end(RunResult("rollout", True, []))
    s.emit(events.PHASE, host="h1", phase="health")
    assert [e.kind for e in got] == [events.START, events.END] and file.fd is None
    assert len((tmp_path / "e").read_text().splitlines()) == 2


def test_a_silent_run_beats_and_nothing_beats_after_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing said for BEAT_S: the stream says `beat` (the run's, no host), which the view
    shows nothing of; after the run's end, no more."""
    monkeypatch.setattr(events, "BEAT_S", 0.05)
    got: list[events.Event] = []
    s = stream.Stream("r1", rolloutfake.settings(), [got.append])
    s.start(["h1"])
    try:
        s.emit(events.PHASE, host="h1", phase="restart")
        deadline = time.monotonic() + 60
        while not [e for e in got if e.kind == events.BEAT]:
            assert time.monotonic() < deadline, "no beat came"
            time.sleep(0.01)
    finally:
        s.end(RunResult("rollout", True, []))
    assert got[-1].kind == events.END and s.beater is not None and not s.beater.is_alive()
    beat = next(e for e in got if e.kind == events.BEAT)
    assert beat.host is None and events.from_json(beat.to_json()) == beat
    assert liveview.Plain().line(beat) is None
    board = liveview.fold(liveview.Board(), got[0])
    assert liveview.fold(board, beat) == liveview.fold(liveview.Board(), got[0])


class _Clock:
    """The watcher's clock and sleep: each sleep moves time on, and the controller's stream
    gets a beat every BEAT_S while it `beats`."""

    def __init__(self, path: Path, beats: float) -> None:
        self.now, self.path, self.beats, self.last, self.written = 0.0, path, beats, 0.0, 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.now <= self.beats and self.now - self.last >= events.BEAT_S:
            self.last, self.written = self.now, self.written + 1
            beat = events.Event(at="2026-12-06T18:00:02.000Z", run="r1", kind=events.BEAT)
            with self.path.open("a") as f:
                f.write(json.dumps(beat.to_json()) + "\n")


@pytest.mark.parametrize("beats", [0.0, 300.0])
def test_a_controller_on_another_node_is_gone_once_its_stream_is_silent(
    tmp_path: Path, beats: float
) -> None:
    """A watcher cannot see another node's processes: it follows while the controller's
    beats come (`beats` seconds of them), and ends STALE_S after the last one."""
    start = events.Event(
        at="2026-12-06T18:00:00.000Z", run="r1", kind=events.START, hosts=("h1",), pid=1,
        node="another-node",
    )  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps({"command": "rollout", "hosts": []}))
    path = tmp_path / "r.json.events"
    path.write_text(json.dumps(start.to_json()) + "\n")
    clock = _Clock(path, beats)
    fd = watching.open_events(str(tmp_path / "r.json"))
    seen: list[events.Event] = []
    try:
        last = watching.follow(fd, seen.append, sleep=clock.sleep, clock=clock.clock)
    finally:
        os.close(fd)
    assert last is None
    heard = [e for e in seen if e.kind == events.BEAT]
    assert len(heard) == clock.written >= beats // events.BEAT_S - 1
    # clock.last: the last beat's time (0 without one: the start's)
    assert clock.last + events.STALE_S <= clock.now < clock.last + events.STALE_S + 1


def test_events_to_a_file_and_a_planted_link_there(tmp_path: Path, standin_env: Env) -> None:
    """`--events FILE` holds what REPORT.events holds; a link planted at FILE stops the
    rollout before anything is written or asked (the report neither)."""
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    where = ["--python", str(standin_env.python), "--level", "static", "--restart", "true"]
    report, mine = tmp_path / "r.json", tmp_path / "mine.events"
    res = vpatch("rollout", spec, *where, "--report", report, "--events", mine, "--json")
    assert res.code == 0, res.out + res.err
    assert mine.read_text() == (tmp_path / "r.json.events").read_text()
    kinds = [json.loads(ln)["kind"] for ln in mine.read_text().splitlines()]
    assert kinds == ["start", "phase", "ended", "phase", "ended", "done", "end"]  # apply, restart
    assert res.err == ""  # --json: no view on stderr
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    planted, again = tmp_path / "planted.events", tmp_path / "again.json"
    planted.symlink_to(victim)
    refused = vpatch("rollout", spec, *where, "--report", again, "--events", planted)
    assert refused.code == 2 and "symbolic link" in refused.err, refused.err
    assert refused.err.splitlines()[1].startswith("hint: ")
    assert victim.read_text() == "keep\n" and not again.exists()
