"""patcher.rollout.walk's walk over a fake host (tests/support/rolloutfake.py), in milliseconds:
a Ctrl-C in each phase, and a controller lost in each phase, then `--resume` from the report
and the steps the host's journal recorded. The lab (tests/integration/test_rollout_lab.py)
covers a few of these on real parts; here every phase, forward and on the way back."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import protocol
from patcher.errors import UsageError
from patcher.inventory.targets import Target
from patcher.rollout import decide, driver, recheck, walk
from patcher.rollout.report import LiveReport, default_report, load_report
from patcher.rollout.resume import (
    RESUME_CHANGED,
    RESUME_CONTINUE,
    RESUME_DONE,
    Resume,
    reported_steps,
)
from patcher.specs import catalog
from patcher.specs.model import PatchSpec
from tests import jsondoc
from tests.conftest import REPO
from tests.support import rolloutfake
from tests.support.rolloutfake import FakeHost, Lost

BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
FORWARD = [decide.BASELINE, decide.APPLY, decide.RESTART, decide.HEALTH, decide.WINDOW]
FORWARD += [decide.GATES]
BACK = [decide.ROLLBACK, decide.ROLLBACK_RESTART, decide.ROLLBACK_HEALTH]
GOOD, BAD = 0.7, 0.15  # the backport's [metrics] min_acceptance_rate is 0.4
# (phase, the server's acceptance): the 15 % server fails its gates and takes the way back.
PHASES = [(p, GOOD) for p in FORWARD] + [(p, BAD) for p in BACK]
TARGET = Target("h1", "h1")


def walk_of(acceptance: float) -> list[str]:
    return FORWARD + (BACK if acceptance == BAD else [])


def verdict_of(acceptance: float) -> str:
    return decide.KEPT if acceptance == GOOD else decide.ROLLED_BACK


@pytest.fixture(scope="module")
def specs() -> list[PatchSpec]:
    return catalog.load_all([str(BACKPORT)])


@pytest.fixture(autouse=True)
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk, "_engine_step", rolloutfake.engine_step)


def steps(doc: dict[str, Any] | None) -> list[str]:
    assert doc is not None
    return [p["step"] for p in doc["phases"]]


def resume(
    fake: FakeHost, specs: list[PatchSpec], reported: list[tuple[str, bool]] | None
) -> tuple[Resume, walk.Host, list[str]]:
    """A second controller: a fresh host state, told from the report and the fake's journal."""
    fake.hook = lambda step: None
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    return recheck.resume_host(h, reported), h, []


@pytest.mark.parametrize(("phase", "acceptance"), PHASES, ids=[p for p, _ in PHASES])
def test_ctrl_c_in_each_phase_stops_after_it_then_resume_runs_the_rest_once(
    phase: str, acceptance: float, specs: list[PatchSpec]
) -> None:
    fake = FakeHost(acceptance=acceptance)
    ctrl_c = threading.Event()
    fake.hook = rolloutfake.stop_in(phase, ctrl_c)
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    begun: list[str] = []
    first = walk.walk(h, ctrl_c, lambda h: begun.append(str(h.current)))
    order = walk_of(acceptance)
    upto = order[: order.index(phase) + 1]
    assert ctrl_c.is_set() and begun == upto  # the step in flight ended; none began after it
    assert steps(first.rollout) == upto
    assert [e["step"] for e in fake.journal] == upto  # each recorded right after it ran
    last = phase == order[-1]
    r = first.rollout
    assert r is not None
    if last:  # nothing follows the last step: the host's own verdict
        assert r["verdict"] == verdict_of(acceptance) and fake.journal[-1]["verdict"]
    else:
        assert (r["verdict"], r["reached"], r["stopped_in"]) == ("interrupted", phase, None)
        assert first.error == f"interrupted (Ctrl-C) after the {phase} step"
        assert not first.ok and "verdict" not in fake.journal[-1]

    said, runs = reported_steps([{"target": "h1", "rollout": first.rollout}])
    assert runs == {"r1"}
    decision, h2, again = resume(fake, specs, said["h1"])
    if last:
        assert decision.action == RESUME_DONE
        second = walk.finish(h2)
    else:
        assert decision.action == RESUME_CONTINUE
        assert decide.next_step(h2.plan, decision.done) == order[len(upto)]
        second = walk.walk(h2, threading.Event(), lambda h: again.append(str(h.current)))
    assert again == order[len(upto) :]  # the rest, each once: no step ran twice
    assert steps(second.rollout) == order and [e["step"] for e in fake.journal] == order
    assert second.rollout is not None and second.rollout["verdict"] == verdict_of(acceptance)
    assert second.ok == (acceptance == GOOD)
    # a resumed host gates on the baseline its journal recorded, not on a new one; the
    # journal keeps no per-interval series (the report's charts), so neither does that baseline
    assert first.rollout is not None and "series" in first.rollout["before"]
    kept = {k: v for k, v in first.rollout["before"].items() if k != "series"}
    assert second.rollout["before"] == kept
    assert fake.ran.count(decide.APPLY) == 1
    assert fake.ran.count(decide.ROLLBACK) == (1 if acceptance == BAD else 0)


@pytest.mark.parametrize(("phase", "acceptance"), PHASES, ids=[p for p, _ in PHASES])
def test_a_controller_lost_in_each_phase_leaves_a_report_resume_goes_on_from(
    phase: str, acceptance: float, specs: list[PatchSpec], tmp_path: Path
) -> None:
    """SIGKILL runs no handler: what is on disk is the report as the step began. --resume
    from it runs that step again (its record never came) and the rest, once each; an
    interrupted way back goes on as the way back, never as a keep."""
    fake = FakeHost(acceptance=acceptance)
    fake.hook = rolloutfake.lose_in(phase)
    cfg = rolloutfake.settings()
    path = tmp_path / "r.json"
    report = LiveReport(str(path), [TARGET], specs, cfg, "r1")
    report.write(start=True)
    h = rolloutfake.host(fake, TARGET, specs, cfg, "r1")
    report.live[0] = h
    with pytest.raises(Lost):
        walk.walk(h, threading.Event(), report.step)

    order = walk_of(acceptance)
    before = order[: order.index(phase)]
    doc = jsondoc.check(json.loads(path.read_text()))
    host = doc["hosts"][0]
    r = host["rollout"]
    assert (r["run"], r["verdict"], r["stopped_in"]) == ("r1", "interrupted", phase)
    assert steps(r) == before and r["reached"] == (before[-1] if before else decide.NOTHING)
    assert host["error"].startswith(f"running: in the {phase} step when this report was written")
    assert not doc["ok"] and [e["step"] for e in fake.journal] == before

    reported = load_report(str(path), ["h1"])
    assert reported.run == "r1"
    decision, h2, again = resume(fake, specs, reported.steps["h1"])
    assert decision.action == RESUME_CONTINUE
    assert decide.next_step(h2.plan, decision.done) == phase
    second = walk.walk(h2, threading.Event(), lambda h: again.append(str(h.current)))
    assert again == order[len(before) :]
    assert steps(second.rollout) == order and [e["step"] for e in fake.journal] == order
    assert second.rollout is not None and second.rollout["verdict"] == verdict_of(acceptance)


def test_a_hand_edited_file_is_refused_before_the_baseline_window(
    specs: list[PatchSpec],
) -> None:
    """Plan first, measure after: apply's dry run is the baseline's first request, and a
    `modified` file ends the host there (untouched), before any scrape or window."""
    fake = FakeHost(hand_edited=True)
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    res = walk.walk(h)
    r = res.rollout
    assert r is not None and (r["verdict"], r["reached"]) == (decide.UNTOUCHED, decide.BASELINE)
    assert steps(r) == [decide.BASELINE] and not r["phases"][0]["ok"]
    assert fake.ops == ["plan", protocol.STEP]  # no scrape, no window, no apply, no restart
    assert r["before"] is None and [p.outcome for p in res.patches] == ["modified"]
    assert r["phases"][0]["detail"].startswith("apply would refuse it (nothing measured")
    assert "modified" in str(res.error) and "apply would refuse" in str(res.hint)
    assert [e["step"] for e in fake.journal] == [decide.BASELINE]
    assert fake.journal[0]["verdict"] == decide.UNTOUCHED


def test_a_clean_host_plans_once_then_measures(specs: list[PatchSpec]) -> None:
    fake = FakeHost()
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    assert walk.walk(h).ok
    assert fake.ops[:2] == ["plan", "fetch"] and fake.ops.count("plan") == 1


def test_the_report_on_disk_says_as_each_step_begins_where_the_host_is(
    specs: list[PatchSpec], tmp_path: Path
) -> None:
    """Written before any host is contacted (every host, the run id, the options), as each
    step begins (the earlier ones done and in the journal), and as each host ends."""
    second = Target("h2", "h2", restart="supervisorctl restart vllm")
    cfg = rolloutfake.settings()
    path = tmp_path / "r.json"
    report = LiveReport(str(path), [TARGET, second], specs, cfg, "r1")
    report.write(start=True)
    start = jsondoc.check(json.loads(path.read_text()))
    assert [h["target"] for h in start["hosts"]] == ["h1", "h2"] and not start["ok"]
    restarts = ("systemctl restart vllm", "supervisorctl restart vllm")
    for h, restart in zip(start["hosts"], restarts, strict=True):
        r = h["rollout"]
        assert (r["run"], r["verdict"], r["phases"], r["restart"]) == ("r1", None, [], restart)
        assert (r["health"], r["metrics"]) == (cfg.health, cfg.metrics)
        assert (r["window"], r["thresholds"]["min_acceptance_rate"]) == (cfg.window, 0.4)
        assert h["patches"][0]["outcome"] == "skipped"
        assert "not started yet (rollout r1 is running)" in h["patches"][0]["message"]
    assert load_report(str(path), ["h2", "h1"]).steps == {"h1": [], "h2": []}

    fake = FakeHost()
    h = rolloutfake.host(fake, TARGET, specs, cfg, "r1")
    report.live[0] = h
    seen: list[tuple[str | None, list[str], list[str]]] = []

    def on_step(h: walk.Host) -> None:
        report.step(h)
        r = json.loads(path.read_text())["hosts"][0]["rollout"]
        seen.append((r["stopped_in"], steps(r), [e["step"] for e in fake.journal]))

    report.ended(0, walk.walk(h, None, on_step))
    assert seen == [(s, FORWARD[:i], FORWARD[:i]) for i, s in enumerate(FORWARD)]
    end = jsondoc.check(json.loads(path.read_text()))
    assert end["hosts"][0]["rollout"]["verdict"] == "kept" and end["hosts"][0]["ok"]
    assert end["hosts"][1]["rollout"]["verdict"] is None  # h2 not started yet

    from patcher.result import RunResult

    final = RunResult("rollout", False, report.hosts("not started"))
    report.close(final)
    report.write()  # a host thread still in flight after a second Ctrl-C: nothing lands
    doc = jsondoc.check(json.loads(path.read_text()))
    assert doc["hosts"][1]["rollout"] is None and "not started" in json.dumps(doc["hosts"][1])


def test_a_report_that_cannot_be_written_at_the_start_is_bad_input(
    specs: list[PatchSpec], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    where = tmp_path / "file" / "r.json"
    report = LiveReport(str(where), [TARGET], specs, rolloutfake.settings(), "r1")
    with pytest.raises(UsageError) as err:
        report.write(start=True)
    assert "cannot write the rollout's report" in err.value.message


def test_the_default_report_is_in_the_xdg_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")
    assert default_report("ab12") == "/srv/state/vpatch/rollouts/ab12.json"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG rule: ignored
    monkeypatch.setenv("HOME", "/home/op")
    assert default_report("ab12") == "/home/op/.local/state/vpatch/rollouts/ab12.json"


def test_hosts_asking_while_a_write_is_on_its_way_share_the_next_one(
    specs: list[PatchSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group commit: the first write is held on its way to disk; 7 more hosts ask
    meanwhile; one more write covers them all, and each returns only once it is on disk."""
    from patcher.output.report import write_report

    first_in, release = threading.Event(), threading.Event()
    written: list[list[str | None]] = []
    real = write_report

    def held(result: Any, path: str) -> None:
        if not written:
            first_in.set()
            assert release.wait(10)
        written.append([(h.rollout or {}).get("stopped_in") for h in result.hosts])
        real(result, path)

    monkeypatch.setattr("patcher.output.report.write_report", held)
    targets = [Target(f"h{i}", f"h{i}") for i in range(8)]
    cfg = rolloutfake.settings()
    live = LiveReport(str(tmp_path / "r.json"), targets, specs, cfg, "r1")
    for i, t in enumerate(targets):
        live.live[i] = rolloutfake.host(FakeHost(target=t.name), t, specs, cfg, "r1")
    done: list[int] = []

    def begin(i: int) -> None:
        live.live[i].current = decide.APPLY
        live.write()
        done.append(i)

    threads = [threading.Thread(target=begin, args=(0,))]
    threads[0].start()
    assert first_in.wait(10)
    threads += [threading.Thread(target=begin, args=(i,)) for i in range(1, 8)]
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + 10
    while live._asked < 8:  # every host has asked and waits
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert done == []
    release.set()
    for t in threads:
        t.join(10)
    assert sorted(done) == list(range(8)) and len(written) == 2
    assert written[0][0] == decide.APPLY and written[1] == [decide.APPLY] * 8


ROLLED_BACK_BY_HAND = {"files": {}, "server": [[1, "T0"]]}
PATCHED = {"files": {"/env/x.py": {"sha256": "a" * 64, "applied": {"s": "t1"}}}}


@pytest.mark.parametrize(
    ("now", "what"),
    [
        (ROLLED_BACK_BY_HAND, "is no longer applied to /env/x.py (rolled back)"),
        (
            {"files": {"/env/x.py": {"sha256": "a" * 64, "applied": {"s": "t2"}}}},
            "was applied to /env/x.py again since (transaction t2, was t1)",
        ),
        (
            {**PATCHED, "server": [[2, "T9"]]},
            "the server restarted or stopped: pid 1 (started T0) no longer runs",
        ),
    ],
    ids=["rollback", "apply", "restart"],
)
def test_resume_after_the_window_judges_nothing_on_a_host_changed_since(
    now: dict[str, Any], what: str, specs: list[PatchSpec], tmp_path: Path
) -> None:
    """Ctrl-C in the window; then a rollback, an apply, or a server restart on the host;
    --resume looks again before it judges: `changed_since`, with what changed, no gate run,
    the verdict in its journal (what `vpatch status` shows) and the lease given up."""
    fake = FakeHost(acceptance=GOOD, state_dir=str(tmp_path / "state"))
    fake.seen = {**PATCHED, "server": [[1, "T0"]]}
    ctrl_c = threading.Event()
    fake.hook = rolloutfake.stop_in(decide.WINDOW, ctrl_c)
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    first = driver.leased_walk(h, False, ctrl_c)
    assert first.rollout is not None and first.rollout["verdict"] == decide.INTERRUPTED
    fake.seen = {**now, "server": now.get("server", [[1, "T0"]])}
    said, _runs = reported_steps([{"target": "h1", "rollout": first.rollout}])
    decision, h2, _ = resume(fake, specs, said["h1"])
    assert decision.action == RESUME_CHANGED and what in decision.why
    ran = len(fake.ran)
    second = recheck.changed(h2)
    assert len(fake.ran) == ran  # nothing ran on the host: no gate, no scrape, no rollback
    r = second.rollout
    assert r is not None and (r["verdict"], r["patched"], second.ok) == (
        decide.CHANGED_SINCE,
        False,
        False,
    )
    assert (
        second.error == f"changed since its window step: {decision.why}; nothing was judged or run"
    )
    assert "vpatch judged nothing and touched nothing" in (second.hint or "")
    note = fake.journal[-1]
    assert (note["step"], note["verdict"], note["detail"]) == (
        "window",
        "changed_since",
        decision.why,
    )
    assert not (tmp_path / "state" / protocol.LEASE_FILE).exists()  # taken over, given up
    # A later --resume of the same report: the journal's verdict stands, nothing runs.
    again, h3, _ = resume(fake, specs, said["h1"])
    assert again.action == RESUME_CHANGED and again.why == decision.why
    assert again.recorded and not decision.recorded
    entries = len(fake.journal)
    assert recheck.changed(h3, again.recorded).rollout["verdict"] == decide.CHANGED_SINCE  # type: ignore[index]
    assert len(fake.journal) == entries  # said once: nothing more written
    assert walk.finish(h3).rollout["verdict"] == decide.CHANGED_SINCE  # type: ignore[index]


def test_resume_after_the_window_on_an_unchanged_host_judges_the_window(
    specs: list[PatchSpec],
) -> None:
    fake = FakeHost(acceptance=GOOD)
    ctrl_c = threading.Event()
    fake.hook = rolloutfake.stop_in(decide.WINDOW, ctrl_c)
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    first = walk.walk(h, ctrl_c)
    fake.seen = {**fake.seen, "server": [*fake.seen["server"], [7, "T7"]]}  # a new process: fine
    said, _runs = reported_steps([{"target": "h1", "rollout": first.rollout}])
    decision, h2, _ = resume(fake, specs, said["h1"])
    assert decision.action == RESUME_CONTINUE
    assert walk.walk(h2, threading.Event()).rollout["verdict"] == decide.KEPT  # type: ignore[index]
