"""Steering a rollout: patcher.rollout.steer's decisions on the golden cases, the channel's
trust checks on real files and a real second user, the writer's refusals through the real
CLI, and the walk over a fake host (tests/support/rolloutfake.py) with steers written by the
real writer as each step runs. The lab (tests/integration/test_rollout_steer_lab.py) does it on
real sshd hosts."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import journal, protocol
from patcher.errors import UsageError
from patcher.inventory.targets import Target
from patcher.rollout import channel, decide, resume, steer, steering, walk
from patcher.specs import catalog
from patcher.specs.model import PatchSpec
from tests import envs
from tests.conftest import REPO, vpatch
from tests.support import rolloutfake, steercases
from tests.support.rolloutfake import FakeHost
from tests.support.stranger import shared_dir, stranger

BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
TARGET = Target("h1", "h1")


@pytest.mark.parametrize("path", steercases.cases("walk"), ids=lambda p: p.stem)
def test_a_host_walks_as_its_steers_say(path: Path) -> None:
    case = steercases.load(path)
    assert steercases.run_walk(case) == case["expect"]


@pytest.mark.parametrize("path", steercases.cases("hold"), ids=lambda p: p.stem)
def test_a_host_about_to_start_waits_or_goes(path: Path) -> None:
    case = steercases.load(path)
    assert steercases.run_hold(case) == case["expect"]


@pytest.mark.parametrize("path", steercases.cases("refusal"), ids=lambda p: p.stem)
def test_which_steers_a_run_takes(path: Path) -> None:
    case = steercases.load(path)
    assert steercases.run_refusal(case) == case["expect"]


def test_there_are_cases_of_both_steered_verdicts_and_of_each_verb() -> None:
    walks = [steercases.load(p) for p in steercases.cases("walk")]
    verdicts = {c["expect"]["verdict"] for c in walks}
    assert {decide.PROMOTED, decide.ABORTED} <= verdicts
    verbs = {r["record"]["verb"] for c in walks for r in c["steers"]}
    verbs |= {r["verb"] for p in steercases.cases("hold") for r in steercases.load(p)["records"]}
    assert set(steer.VERBS) <= verbs


def test_a_line_that_is_not_a_record_costs_that_line() -> None:
    good = {"run": "r1", "verb": "pause", "seq": 1, "uid": 0, "user": "root", "at": "T"}
    lines = [
        json.dumps(good),
        "not json",
        json.dumps({**good, "verb": "explode"}),
        json.dumps({**good, "seq": 0}),
        json.dumps({**good, "uid": True}),
        json.dumps({**good, "run": "../x"}),
        json.dumps({**good, "user": "u" * 65}),
        json.dumps({**good, "seq": 2, "verb": "resume"}),
        '{"run": "r1", "verb": "ab',  # a write cut short: skipped without a word
    ]
    records, problems = steer.parse("\n".join(lines).encode())
    assert [(r.verb, r.seq) for r in records] == [("pause", 1), ("resume", 2)]
    assert [p.split(" ignored: ")[1].split(":")[0] for p in problems] == [
        "Expecting value",
        "unknown verb 'explode'",
        "seq is not a count from 1",
        "uid is not a count",
        "run is not an id",
        "user is not a short string",
    ]
    assert [int(p.split()[3]) for p in problems] == [2, 3, 4, 5, 6, 7]


def test_the_journal_checks_a_steer_note_on_both_sides() -> None:
    rec = steer.Steer("r1", "abort", 3, 1000, "alice", "2026-12-06T18:00:00.000Z")
    entry = protocol.steer_entry(
        run="r1", step="health", specs=["s"], steer=rec.to_json(), detail="aborted"
    )
    assert journal._step_error(entry) == ""
    assert entry["steer"] == {k: v for k, v in rec.to_json().items() if k != "run"}
    for bad, why in (
        ({"verb": "explode"}, "steer is not a steer note"),
        ({"seq": -1}, "steer seq is not a count"),
        ({"uid": "0"}, "steer uid is not a count"),
        ({"user": "x" * 65}, "steer user is not a short string"),
    ):
        assert journal._step_error({**entry, "steer": {**entry["steer"], **bad}}) == why
    step, _ = resume.read_steps([entry])
    assert step[0].steer is not None and not step[0].walked()


# ---------------------------------------------------------------------------------------------
# The channel: made by the controller, trusted on its descriptor


def test_the_controller_makes_its_channel_owner_only_and_reads_what_is_written(
    tmp_path: Path,
) -> None:
    report = str(tmp_path / "r.json")
    chan = channel.open_run(report, "r1", resume=False)
    st = os.stat(channel.path_of(report))
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, os.geteuid())
    assert chan.state().live and chan.state().pid == os.getpid()
    channel.write(report, "r1", "pause")
    assert chan.state().paused is not None and chan.state().paused.seq == 2  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="already paused"):
        channel.write(report, "r1", "pause")
    chan.close()
    with pytest.raises(UsageError, match="has ended"):
        channel.write(report, "r1", "resume")
    # --resume of the run takes its channel again, its pause still in force.
    again = channel.open_run(report, "r1", resume=True)
    assert again.state().paused is not None and again.state().live
    again.close()
    # A fresh run at the same report path starts an empty log.
    fresh = channel.open_run(report, "r2", resume=False)
    assert fresh.state().paused is None and fresh.state().last == 1
    fresh.close()


def test_a_channel_whose_mode_changed_is_refused_by_the_controller(tmp_path: Path) -> None:
    report = str(tmp_path / "r.json")
    chan = channel.open_run(report, "r1", resume=False)
    channel.write(report, "r1", "pause")
    assert chan.state().paused is not None
    os.chmod(channel.path_of(report), 0o622)  # now others may write it: nothing of it counts
    state = chan.state()
    assert state.paused is None and "open to group or others (mode 0622)" in chan.refused
    chan.close()


def test_a_symlink_or_a_fifo_at_the_name_is_refused_at_the_start(tmp_path: Path) -> None:
    report = str(tmp_path / "r.json")
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    os.symlink(victim, channel.path_of(report))
    with pytest.raises(UsageError, match="cannot make the rollout's steering channel"):
        channel.open_run(report, "r1", resume=False)
    assert victim.read_text() == "root's\n"
    os.unlink(channel.path_of(report))
    os.mkfifo(channel.path_of(report), 0o600)
    with pytest.raises(UsageError, match="is not a regular file"):
        channel.open_run(report, "r1", resume=False)


def test_a_stranger_can_neither_plant_a_channel_nor_steer_the_run() -> None:
    """Another (non-root) user: its file at the channel's name is refused at the rollout's
    start (nothing written through it); the run's own channel it cannot open, and a file of
    its own under the name is refused to root's writer too."""
    with shared_dir() as shared, stranger() as other:
        report = str(shared / "r.json")
        path = channel.path_of(report)
        other.write(Path(path), json.dumps({"run": "r1", "verb": "start", "seq": 1}) + "\n")
        with pytest.raises(UsageError, match=f"is owned by uid {other.uid}"):
            channel.open_run(report, "r1", resume=False)
        before = Path(path).read_bytes()
        with pytest.raises(UsageError, match="is open to group or others"):
            channel.write(report, "r1", "abort")  # root's writer: not through others' file
        assert Path(path).read_bytes() == before
        os.unlink(path)

        chan = channel.open_run(report, "r1", resume=False)
        Path(report).write_text(json.dumps(_report("r1")))
        os.chmod(report, 0o644)
        got = subprocess.run(
            _cli("abort", report), user=other.uid, group=other.gid, extra_groups=[],
            capture_output=True, text=True, cwd="/", env={"PYTHONPATH": str(REPO)},
        )  # fmt: skip
        err = got.stderr
        assert got.returncode == 2, err
        lines = [ln.split(":")[0] for ln in err.splitlines()]
        assert lines == ["error", "hint"], err
        assert "permission denied" in err and "only the user that runs the rollout" in err
        assert chan.state().aborted is None and chan.state().last == 1
        chan.close()


def test_a_channel_planted_at_the_name_refuses_the_rollout_before_anything() -> None:
    """Another user's file at REPORT.steer: the rollout stops at its start, exit 2, one
    `error:` and `hint:`, no host contacted and nothing written (no report either)."""
    with shared_dir() as shared, stranger() as other:
        report = shared / "r.json"
        other.write(Path(f"{report}.steer"), "")
        before = sorted(os.listdir(shared))
        got = vpatch("rollout", BACKPORT, "--python", "/nonexistent/python", "--report", report)
        assert got.code == 2, got.out + got.err
        assert [ln.split(":")[0] for ln in got.err.splitlines()] == ["error", "hint"], got.err
        assert f"the steering channel {report}.steer is owned by uid {other.uid}" in got.err
        assert sorted(os.listdir(shared)) == before and got.out == ""


def _cli(*args: str) -> list[str]:
    """The CLI for another user: the system's python on this checkout (the test's venv is
    under root's home, which no other user can reach)."""
    return [envs.HOST_PYTHON, "-m", "patcher.cli", "rollout", *args]


def _report(run: str) -> dict[str, Any]:
    return {
        "command": "rollout",
        "ok": False,
        "hosts": [{"target": "h1", "rollout": {"run": run, "phases": []}}],
    }


# ---------------------------------------------------------------------------------------------
# The command


def test_the_command_writes_one_steer_or_refuses_with_one_error(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(json.dumps(_report("abc123")))
    chan = channel.open_run(str(report), "abc123", resume=False)
    try:
        ok = vpatch("rollout", "pause", report, "--json")
        assert ok.code == 0, ok.err
        doc = json.loads(ok.out)
        assert (doc["run"], doc["verb"], doc["seq"], doc["uid"]) == ("abc123", "pause", 2, 0)
        assert doc["controller"] == {"pid": os.getpid(), "running": True}
        human = vpatch("rollout", "resume", report)
        assert human.code == 0 and human.out.startswith(
            "rollout abc123: resume written (resume 3 by"
        )
        size = os.path.getsize(channel.path_of(str(report)))
        for argv, words in (
            (("resume", report), "is not paused"),
            (("pause",), "needs one REPORT"),
            (("pause", report, report), "needs one REPORT"),
            (("abort", tmp_path / "none.json"), "No such file"),
            (("abort", BACKPORT), "not JSON"),
        ):
            bad = vpatch("rollout", *argv)
            assert bad.code == 2, bad.err
            assert [ln.split(":")[0] for ln in bad.err.splitlines()] == ["error", "hint"], bad.err
            assert words in bad.err and bad.out == ""
            as_json = vpatch("rollout", *argv, "--json")
            assert as_json.code == 2 and words in json.loads(as_json.out)["error"]
        assert os.path.getsize(channel.path_of(str(report))) == size  # nothing written
    finally:
        chan.close()
    ended = vpatch("rollout", "abort", report)
    assert ended.code == 2 and "rollout abc123 has ended: nothing to steer" in ended.err


def test_a_report_without_a_channel_is_refused(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(json.dumps(_report("abc123")))
    got = vpatch("rollout", "promote", report)
    assert (
        got.code == 2
        and "does not exist" in got.err
        and not Path(channel.path_of(str(report))).exists()
    )


# ---------------------------------------------------------------------------------------------
# The walk, over a fake host, with steers written by the real writer as each step runs


@pytest.fixture
def specs(monkeypatch: pytest.MonkeyPatch) -> list[PatchSpec]:
    """The back-port's specs, applied and rolled back by the fake host (its engine steps)."""
    monkeypatch.setattr(walk, "_engine_step", rolloutfake.engine_step)
    return catalog.load_all([str(BACKPORT)])


@dataclass
class QuietAfterRestart(FakeHost):
    """A server that serves no traffic once restarted: its window after the patch sees no
    draft and runs its whole length (30 s) unless a steer ends it; the baseline's closes at
    its second scrape (--min-drafts)."""

    quiet: bool = False

    def _metrics(self) -> str:
        if self.quiet:
            self._scrapes -= 1  # the counters stay where they are
        return super()._metrics()


def _steered_walk(
    tmp_path: Path, specs: list[PatchSpec], verb: str, in_step: str
) -> tuple[FakeHost, dict[str, Any], list[tuple[str, int, str | None, str]]]:
    """One host walked with the run's steering; `verb` written by the writer at the first
    request the host makes in `in_step`. Also: what the steering told the run's events
    (verb, seq, host, step)."""
    report = str(tmp_path / "r.json")
    chan = channel.open_run(report, "r1", resume=False)
    fake = QuietAfterRestart()
    written: list[str] = []

    def hook(step: str) -> None:
        fake.quiet = fake.quiet or step == decide.RESTART
        if step == in_step and not written:
            written.append(channel.write(report, "r1", verb).record.verb)

    fake.hook = hook
    cfg = rolloutfake.settings(window=30.0, scrape_every=0.01)
    h = rolloutfake.host(fake, TARGET, specs, cfg, "r1")
    driven = steering.Steering(chan)
    told: list[tuple[str, int, str | None, str]] = []
    driven.tell = lambda s, host, step, what: told.append((s.verb, s.seq, host, step))
    h.steer = driven.host(
        steering.Held(), walk.first_step(h), "r1", ["x"], lambda e: _send(fake, e)
    )
    h.steer.name = "h1"
    result = walk.walk(h)
    chan.close()
    assert written == [verb]
    assert result.rollout is not None
    return fake, {"ok": result.ok, "error": result.error, **result.rollout}, told


def _send(fake: FakeHost, entry: dict[str, Any]) -> None:
    fake.call(protocol.step_request(entry, None))


def test_a_promote_in_the_window_ends_it_and_keeps_what_the_gates_would_not(
    tmp_path: Path, specs: list[PatchSpec]
) -> None:
    """A 30 s window without traffic (its gates fail: no drafts): the promote written at its
    first scrape ends it at the next look; kept on the owner's word, the gates recorded as
    they stood; the note and the verdict in the host's journal."""
    fake, rep, told = _steered_walk(tmp_path, specs, "promote", decide.WINDOW)
    assert told == [("promote", 2, None, ""), ("promote", 2, "h1", "window")]  # once each
    assert (rep["verdict"], rep["ok"], rep["error"]) == (decide.PROMOTED, True, None)
    assert [p["step"] for p in rep["phases"]][-2:] == [decide.WINDOW, decide.GATES]
    assert all(p["ok"] for p in rep["phases"])
    gates = rep["phases"][-1]["detail"]
    assert gates.startswith("promoted (promote 2 by root (uid 0) at ")
    assert "the gates on the window so far would not have kept it" in gates
    assert any(not g["ok"] for g in rep["gates"])  # the evidence as it stood
    assert [(s["verb"], s["seq"], s["step"]) for s in rep["steers"]] == [("promote", 2, "window")]
    notes = [e for e in fake.journal if "steer" in e]
    assert [(n["step"], n["steer"]["verb"]) for n in notes] == [("window", "promote")]
    assert fake.journal[-1]["verdict"] == decide.PROMOTED
    assert rep["after"]["seconds"] < 30  # the window did not run its length


UP_TO_HEALTH = [("baseline", True), ("apply", True), ("restart", True)]


@pytest.mark.parametrize(
    ("in_step", "walked"),
    [
        (decide.RESTART, [*UP_TO_HEALTH, ("health", False)]),
        (decide.WINDOW, [*UP_TO_HEALTH, ("health", True), ("window", False)]),
        (decide.BASELINE, [("baseline", False)]),
    ],
)
def test_an_abort_takes_the_host_back_from_where_it_is(
    tmp_path: Path, specs: list[PatchSpec], in_step: str, walked: list[tuple[str, bool]]
) -> None:
    fake, rep, told = _steered_walk(tmp_path, specs, "abort", in_step)
    met = rep["steers"][0]["step"]
    assert told == [("abort", 2, None, ""), ("abort", 2, "h1", met)]  # once each
    back = [] if in_step == decide.BASELINE else [(s, True) for s in walk.decide.STEPS[6:]]
    assert [(p["step"], p["ok"]) for p in rep["phases"]] == walked + back
    assert (rep["verdict"], rep["ok"]) == (decide.ABORTED, False)
    assert "aborted (abort 2 by root (uid 0) at " in rep["error"]
    assert [s["verb"] for s in rep["steers"]] == ["abort"]
    assert fake.journal[-1]["verdict"] == decide.ABORTED
    if in_step == decide.BASELINE:  # nothing was written
        assert "apply" not in fake.ops and "rollback" not in fake.ops


def test_the_table_counts_a_promoted_host_patched_and_an_aborted_one_not_started(
    specs: list[PatchSpec],
) -> None:
    import io

    from patcher.result import RunResult
    from patcher.rollout import view
    from patcher.rollout.report import LiveReport

    targets = [TARGET, Target("h2", "h2")]
    live = LiveReport("/nonexistent/r.json", targets, specs, rolloutfake.settings(), "r1")
    promoted = live.not_started(0, None)  # a host's shape; its verdict set below
    promoted.ok, promoted.rollout = True, {"reached": "gates", "verdict": decide.PROMOTED}
    promoted.rollout.update(before=None, after=None)
    abort = steer.Steer("r1", "abort", 4, 1000, "alice", "2026-12-06T18:00:00.000Z")
    aborted = live.not_started(1, abort)
    assert aborted.rollout is not None and aborted.rollout["verdict"] == decide.ABORTED
    assert aborted.patches[0].message == (
        "aborted (abort 4 by alice (uid 1000) at 2026-12-06T18:00:00.000Z): not started"
    )
    out = io.StringIO()
    view.render_table(RunResult("rollout", False, [promoted, aborted]), out)
    lines = out.getvalue().splitlines()
    assert lines[-1] == (
        "rollout: not ok: 1 of 2 host(s) patched and staying patched (h1); 1 not started"
    )
    assert lines[2].split() == ["h2", "-", "-", "->", "-", "-", "->", "-", "aborted"]


def _held_until(
    driven: steering.Steering, report: str, end: str
) -> tuple[list[steer.Steer], steering.Held]:
    """A host held by a pause (written now) in a thread until `end` (a steer, or "ctrl-c"):
    the pauses it was told of, and how its wait ended."""
    import threading

    channel.write(report, "r1", "pause")
    said: list[steer.Steer] = []
    waiting, stop = threading.Event(), threading.Event()
    got: list[steering.Held] = []

    def told(s: steer.Steer) -> None:
        said.append(s)
        waiting.set()

    t = threading.Thread(target=lambda: got.append(driven.hold(stop, told)))
    t.start()
    assert waiting.wait(30) and not got  # held: it has not returned
    if end == "ctrl-c":
        stop.set()
    else:
        channel.write(report, "r1", end)
    t.join(30)
    return said, got[0]


def test_a_paused_run_holds_a_host_until_resume_abort_or_ctrl_c(tmp_path: Path) -> None:
    """Steering.hold as the driver calls it before a host starts: it says once which pause
    holds the host, then returns on the resume (the pause and the resume for the host's
    notes), on a Ctrl-C, or on an abort (the host never starts)."""
    report = str(tmp_path / "r.json")
    chan = channel.open_run(report, "r1", resume=False)
    driven = steering.Steering(chan)
    said, held = _held_until(driven, report, "resume")
    assert [s.verb for s in said] == ["pause"] and held.stop is None and not held.interrupted
    assert [s.verb for s in held.steers] == ["pause", "resume"]
    said, held = _held_until(driven, report, "ctrl-c")
    assert [s.verb for s in said] == ["pause"] and held.interrupted and held.stop is None
    channel.write(report, "r1", "resume")
    said, held = _held_until(driven, report, "abort")
    assert held.stop is not None and held.stop.verb == "abort" and not held.interrupted
    chan.close()
