"""One rollout per host at a time: the lease's decisions as tables (patcher/agent/leasing.py),
the agent's op on a real state dir (patcher/agent/lease.py, through patcher.agent.handle), and
two controllers walking one fake host (tests/support/rolloutfake.py) with the real agent
keeping the lease. The lab (tests/integration/test_rollout_lab.py) runs it on real sshd hosts:
a second rollout refused naming the first, a SIGKILLed controller's lease taken over."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import handle, lease, leasing, protocol, statedir
from patcher.errors import HostError
from patcher.inventory.targets import Target
from patcher.rollout import decide, driver, recheck, walk
from patcher.rollout.lease import WAIT_POLL_S, Lease, Lost, Refused, live_wait, refusal
from patcher.specs import catalog
from patcher.specs.model import PatchSpec
from tests.conftest import REPO
from tests.support import rolloutfake
from tests.support.rolloutfake import FakeHost

BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
TARGET = Target("h1", "h1")
NOW = 1_000_000.0


def held(run: str = "a1", who: str = "op@ctl pid 1", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "run": run,
        "who": who,
        "specs": ["s1"],
        "since": "2026-12-02T05:00:00Z",
        "heartbeat": "2026-12-02T05:00:00Z",
        "beat": NOW - 10,
        "ttl": 60.0,
        "agent": None,
        "parked": False,
    }
    return {**base, **over}


def ask(run: str = "b2", who: str = "op@ctl pid 2", resume: bool = False) -> dict[str, Any]:
    return {"run": run, "who": who, "specs": ["s1"], "ttl": 60.0, "resume": resume}


# ---------------------------------------------------------------------------------------------
# The decisions


STALE_BY_TIME = held(beat=NOW - 61)
PARKED = held(parked=True)
MINE = held(run="b2", who="op@ctl pid 2")
MY_RUN_OTHER_CONTROLLER = held(run="b2")


@pytest.mark.parametrize(
    ("action", "current", "req", "alive", "want"),
    [
        ("take", None, ask(), None, leasing.TAKEN),
        ("take", held(), ask(), None, leasing.HELD),  # another run, beating
        ("take", held(), ask(), True, leasing.HELD),  # its session agent runs too
        ("take", STALE_BY_TIME, ask(), None, leasing.STALE),  # its promise ran out
        ("take", PARKED, ask(), None, leasing.STALE),  # it stopped (Ctrl-C)
        ("take", held(), ask(), False, leasing.STALE),  # its session agent is gone
        ("take", held(), ask(resume=True), False, leasing.STALE),  # a resume of ANOTHER run
        ("take", MINE, ask(), None, leasing.RENEWED),  # this controller again
        ("take", MY_RUN_OTHER_CONTROLLER, ask(resume=True), None, leasing.LIVE),
        ("take", MY_RUN_OTHER_CONTROLLER, ask(resume=True), False, leasing.TAKEN_OVER),
        ("take", held(run="b2", parked=True), ask(resume=True), None, leasing.TAKEN_OVER),
        ("take", held(run="b2", beat=NOW - 61), ask(), None, leasing.STALE),  # no --resume
        # A promise vpatch never makes, or a beat ahead of the host's clock: never a live one.
        ("take", held(ttl=leasing.MAX_TTL + 1), ask(), True, leasing.STALE),
        ("take", held(beat=NOW + leasing.MAX_SKEW + 1), ask(), None, leasing.STALE),
        ("take", held(beat=NOW + leasing.MAX_SKEW), ask(), None, leasing.HELD),
        ("take", held(run="b2", ttl=1e12), ask(resume=True), None, leasing.TAKEN_OVER),
        ("beat", MINE, ask(), None, leasing.RENEWED),
        ("beat", MY_RUN_OTHER_CONTROLLER, ask(), None, leasing.LOST),  # taken over
        ("beat", None, ask(), None, leasing.LOST),  # removed by hand
        ("park", MINE, ask(), None, leasing.PARKED),
        # `vpatch rollout release --run b2`: only that run's lease, only once it is gone
        ("release", None, ask(), None, leasing.ABSENT),
        ("release", held(), ask(), False, leasing.HELD),  # another run's, even a gone one
        ("release", MY_RUN_OTHER_CONTROLLER, ask(), None, leasing.LIVE),  # it beats
        ("release", MY_RUN_OTHER_CONTROLLER, ask(), False, leasing.RELEASED),  # its agent died
        ("release", held(run="b2", parked=True), ask(), None, leasing.RELEASED),
        ("release", held(run="b2", ttl=1e12), ask(), True, leasing.RELEASED),  # implausible
        ("park", held(), ask(), None, leasing.LOST),
    ],
)
def test_decide(
    action: str, current: dict[str, Any] | None, req: dict[str, Any], alive: bool | None, want: str
) -> None:
    assert leasing.decide(action, current, req, NOW, alive) == want


@pytest.mark.parametrize(
    ("current", "run", "specs", "alive", "want"),
    [
        (None, None, ["s1"], None, False),
        (held(), None, ["s1"], None, True),  # a hand apply/rollback of the rollout's spec
        (held(), "zz9", ["s0", "s1"], None, True),  # another rollout's commit
        (held(), "a1", ["s1"], None, False),  # the holder's own apply and rollback
        (held(), None, ["s2"], None, False),  # other specs: not this rollout's business
        (STALE_BY_TIME, None, ["s1"], None, False),  # its controller is gone: hands free
        (held(), None, ["s1"], False, False),
    ],
)
def test_blocks(
    current: dict[str, Any] | None,
    run: str | None,
    specs: list[str],
    alive: bool | None,
    want: bool,
) -> None:
    assert leasing.blocks(current, run, specs, NOW, alive) is want


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ([], "not a JSON object"),
        (held(run="../x"), "its run is not an id"),
        (held(who=7), "its who is not a short text"),
        (held(who="x" * 300), "its who is not a short text"),
        (held(specs="s1"), "its specs are not a list of ids"),
        (held(beat="soon"), "its beat is not a number"),
        (held(ttl=float("inf")), "its ttl is not a number"),
        (held(ttl=True), "its ttl is not a number"),
        (held(ttl=-1), "its ttl is negative"),
        (held(agent={"pid": "1", "start": "9"}), "its agent is not a pid and a start time"),
        (held(parked="no"), "its parked is not true or false"),
    ],
)
def test_a_lease_vpatch_did_not_write_is_named(bad: Any, why: str) -> None:
    assert leasing.lease_error(bad) == why
    assert leasing.lease_error(held(agent={"pid": 5, "start": "77"})) == ""


def test_records() -> None:
    req = ask(resume=True)
    taken = leasing.record(leasing.TAKEN, None, req, NOW, "T0", {"pid": 5, "start": "77"})
    assert taken["since"] == "T0" and taken["agent"] == {"pid": 5, "start": "77"}
    assert leasing.lease_error(taken) == ""
    over = leasing.record(leasing.TAKEN_OVER, held(run="b2"), req, NOW, "T1", None)
    assert (over["since"], over["taken_over"]) == (
        held()["since"],
        {"from": "op@ctl pid 1", "at": "T1"},
    )
    assert over["who"] == "op@ctl pid 2" and over["beat"] == NOW
    parked = leasing.record(leasing.PARKED, MINE, req, NOW, "T2", None)
    assert parked["parked"] and leasing.is_stale(parked, NOW, None)
    renewed = leasing.record(leasing.RENEWED, parked, dict(req, ttl=5.0), NOW, "T3", None)
    assert not renewed["parked"] and renewed["ttl"] == 5.0 and renewed["since"] == MINE["since"]
    assert leasing.is_stale(renewed, NOW + 5.1, None) and not leasing.is_stale(
        renewed, NOW + 5, None
    )


def test_a_refusal_names_the_holder_and_what_to_do() -> None:
    error, hint = refusal(leasing.HELD, held(), "b2", 12.4)
    assert "rollout run a1 (op@ctl pid 1; since 2026-12-02T05:00:00Z" in error
    assert "last heartbeat 12 s ago" in error and error.startswith("rollout run a1 (")
    assert "nothing was changed" in error and "wait for that rollout to end" in hint
    error, hint = refusal(leasing.STALE, PARKED, "b2", 3)
    assert "its controller is gone" in error and "stopped" in error
    assert "--resume REPORT" in hint and "run a1" in hint and "rollouts/a1.json" in hint
    assert protocol.LEASE_FILE not in hint and "remove" not in hint  # never a hand `rm`
    error, _ = refusal(leasing.LIVE, MY_RUN_OTHER_CONTROLLER, "b2", 3)
    assert "another controller of run b2 is running" in error
    error, _ = refusal(leasing.HELD, {"run": "a1\x1b[2J"}, "b2", 3)
    assert "sent no lease vpatch wrote (its run is not an id)" in error and "\x1b" not in error


def test_the_agent_refuses_a_promise_vpatch_never_makes(tmp_path: Path) -> None:
    sdir = str(tmp_path / "state")
    for ttl in (leasing.MAX_TTL + 1, -1.0, float("nan")):
        req = protocol.lease_request(protocol.LEASE_TAKE, "a1", "op@ctl pid 1", ["s1"], ttl, sdir)
        res = handle(req)
        assert not res["ok"] and res["kind"] == protocol.INPUT and "not one vpatch" in res["error"]
    assert not (tmp_path / "state" / protocol.LEASE_FILE).exists()


def test_a_live_lease_of_the_same_run_is_waited_for_as_long_as_it_promised() -> None:
    assert live_wait(held(ttl=60.0), 50.0) == 10.0 + 2 * WAIT_POLL_S
    assert live_wait(held(ttl=60.0), 90.0) == 2 * WAIT_POLL_S
    assert live_wait({"run": 1}, 0) == 0.0


# ---------------------------------------------------------------------------------------------
# The agent's op, on a real state dir


def take(sdir: str, run: str, who: str, **kw: Any) -> dict[str, Any]:
    req = protocol.lease_request(protocol.LEASE_TAKE, run, who, ["s1"], 60.0, sdir, **kw)
    res = handle(req)
    assert res["ok"], res
    return res


def test_the_agent_grants_one_holder_and_names_it_to_the_next(tmp_path: Path) -> None:
    sdir = str(tmp_path / "state")
    a = take(sdir, "a1", "op@ctl pid 1", session=True)
    assert (a["granted"], a["result"], a["stale"]) == (True, leasing.TAKEN, False)
    assert a["holder"]["agent"] == lease.me()  # this process: the session's agent
    path = tmp_path / "state" / protocol.LEASE_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == a["holder"]

    b = take(sdir, "b2", "other@ctl pid 2")
    assert (b["granted"], b["result"]) == (False, leasing.HELD)
    assert b["holder"]["run"] == "a1" and json.loads(path.read_text()) == a["holder"]

    beat = handle(protocol.lease_request(protocol.LEASE_BEAT, "a1", "op@ctl pid 1", [], 5, sdir))
    assert beat["result"] == leasing.RENEWED and beat["holder"]["ttl"] == 5
    lost = handle(protocol.lease_request(protocol.LEASE_BEAT, "a1", "op@ctl pid 9", [], 5, sdir))
    assert (lost["granted"], lost["result"]) == (False, leasing.LOST)


def test_a_dead_session_agent_lets_its_lease_go_stale_at_once(tmp_path: Path) -> None:
    """The kernel's word: the agent that took the lease for a session is gone (its pid runs
    no more, or runs another process), whatever its promised beat says."""
    sdir = str(tmp_path / "state")
    take(sdir, "a1", "op@ctl pid 1", session=True)
    child = subprocess.Popen(["true"])
    child.wait()
    path = tmp_path / "state" / protocol.LEASE_FILE
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(dict(doc, agent={"pid": child.pid, "start": "1"})))
    b = take(sdir, "b2", "other@ctl pid 2")
    assert (b["result"], b["stale"]) == (leasing.STALE, True)
    over = take(sdir, "a1", "op@ctl pid 3", resume=True)
    assert over["result"] == leasing.TAKEN_OVER and over["holder"]["who"] == "op@ctl pid 3"
    assert over["holder"]["taken_over"]["from"] == "op@ctl pid 1"


def test_the_walks_last_step_gives_the_lease_up_with_it(tmp_path: Path) -> None:
    sdir = str(tmp_path / "state")
    take(sdir, "a1", "op@ctl pid 1")
    path = tmp_path / "state" / protocol.LEASE_FILE
    entry = protocol.step_entry(
        run="a1", step="gates", ok=True, specs=["s1"], detail="ok", verdict="kept"
    )
    other = {"run": "a1", "who": "op@ctl pid 9"}
    assert handle(protocol.step_request(entry, sdir, other))["ok"] and path.exists()
    mine = {"run": "a1", "who": "op@ctl pid 1"}
    assert handle(protocol.step_request(entry, sdir, mine))["ok"] and not path.exists()
    assert take(sdir, "b2", "other@ctl pid 2")["result"] == leasing.TAKEN


def test_a_commit_of_the_leased_specs_is_refused_naming_the_holder(tmp_path: Path) -> None:
    sdir = str(tmp_path / "state")
    take(sdir, "a1", "op@ctl pid 1")
    state = statedir.open_state(sdir)
    assert state is not None
    with state:
        journal = [{"action": "rollback", "spec": "s1"}]
        with pytest.raises(protocol.Refused) as refused:
            lease.check_commit(state, {"journal": journal})
        assert refused.value.kind == protocol.LEASED
        assert "rollout run a1 (op@ctl pid 1;" in str(refused.value) and "s1" in str(refused.value)
        lease.check_commit(state, {"journal": journal, "lease": "a1"})  # the holder's own
        lease.check_commit(state, {"journal": [{"action": "apply", "spec": "s2"}]})
    answer = handle({"op": "commit", "writes": [], "journal": journal, "state_dir": sdir})
    assert (answer["ok"], answer["kind"]) == (False, protocol.LEASED)
    assert protocol.HINTS[protocol.LEASED].startswith("a rollout of these specs is running")


def test_a_lease_file_vpatch_did_not_write_is_refused_untouched(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / protocol.LEASE_FILE).write_text('{"run": "a1"}')
    res = handle(protocol.lease_request("take", "b2", "x", ["s1"], 60.0, str(state)))
    assert (res["ok"], res["kind"]) == (False, protocol.STATE)
    assert "is not a rollout lease vpatch wrote" in res["error"]
    assert (state / protocol.LEASE_FILE).read_text() == '{"run": "a1"}'
    for planted, why in (("[" * 32768, "nested too deep"), ("\xff", "not JSON")):
        (state / protocol.LEASE_FILE).write_text(planted)  # the agent answers, never crashes
        res = handle(protocol.lease_request("take", "b2", "x", ["s1"], 60.0, str(state)))
        assert (res["ok"], res["kind"]) == (False, protocol.STATE) and why in res["error"], res
    os.symlink("/etc/passwd", state / "x")
    (state / protocol.LEASE_FILE).unlink()
    os.symlink(state / "x", state / protocol.LEASE_FILE)
    res = handle(protocol.lease_request("take", "b2", "x", ["s1"], 60.0, str(state)))
    assert (res["ok"], res["kind"]) == (False, protocol.STATE) and "symlink" in res["error"]


# ---------------------------------------------------------------------------------------------
# Two controllers on one (fake) host


@pytest.fixture(scope="module")
def specs() -> list[PatchSpec]:
    return catalog.load_all([str(BACKPORT)])


@pytest.fixture(autouse=True)
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk, "_engine_step", rolloutfake.engine_step)


def controller(fake: FakeHost, specs: list[PatchSpec], run: str) -> walk.Host:
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), run)
    fake.current = lambda: h.current
    return h


def test_a_second_rollout_is_refused_naming_the_first_which_goes_on(
    specs: list[PatchSpec], tmp_path: Path
) -> None:
    fake = FakeHost(state_dir=str(tmp_path / "state"))
    a = controller(fake, specs, "a1")
    seen: list[Any] = []

    def b_starts(step: str) -> None:
        if step == decide.WINDOW and not seen:
            b = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "b2")
            seen.append(driver.leased_walk(b))
            fake.current = lambda: a.current  # A's requests again

    fake.hook = b_starts
    first = driver.leased_walk(a)
    second = seen[0]
    assert second.rollout is not None and second.rollout["verdict"] == decide.UNTOUCHED
    assert second.rollout["phases"] == [] and not second.ok
    assert str(second.error).startswith("rollout run a1 (") and "holds this host's" in str(
        second.error
    )
    assert "wait for that rollout to end" in str(second.hint)
    assert first.ok and first.rollout is not None and first.rollout["verdict"] == decide.KEPT
    assert [e["run"] for e in fake.journal] == ["a1"] * 6  # B recorded nothing
    assert not (tmp_path / "state" / protocol.LEASE_FILE).exists()  # A's last step gave it up


class DyingHost(FakeHost):
    """A host that dies (`dead`): every request, the lease's and the journal's too, fails as
    a lost connection does; back up, it answers again from what its state dir kept."""

    dead: bool = False

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if self.dead:
            raise HostError(f"{self.target}: connection lost")
        return super().call(request, timeout)


def test_a_host_that_died_in_its_restart_step_is_resumed_and_its_lease_taken_over(
    specs: list[PatchSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host dies while it restarts: the restart and the way back fail, their records
    and the lease's park never reach it. Back up (its lease's promise long run out), the
    report is two failed steps ahead of its journal: --resume goes on from the journal,
    takes the dead controller's lease over and finishes the walk. Before, it refused ("the
    report says ...; the journal says ...") and the lease kept the host for ever."""
    fake = DyingHost(state_dir=str(tmp_path / "state"))

    def die(step: str) -> None:
        if step == decide.RESTART:
            fake.dead = True
            raise HostError("h1: connection lost")

    fake.hook = die
    first = driver.leased_walk(controller(fake, specs, "a1"))
    r = first.rollout
    assert r is not None and r["verdict"] == decide.ATTENTION
    said = [(p["step"], p["ok"]) for p in r["phases"]]
    assert said == [("baseline", True), ("apply", True), ("restart", False), ("rollback", False)]
    assert [e["step"] for e in fake.journal] == ["baseline", "apply"]
    path = tmp_path / "state" / protocol.LEASE_FILE
    held_then = json.loads(path.read_text())
    assert held_then["run"] == "a1" and not held_then["parked"]  # left by a lost controller

    fake.dead, fake.hook = False, lambda step: None
    path.write_text(json.dumps(dict(held_then, beat=held_then["beat"] - 3600)))  # down an hour
    other = driver.leased_walk(controller(fake, specs, "b2"))  # a new run: refused, told how
    assert other.rollout is not None and other.rollout["verdict"] == decide.UNTOUCHED
    assert "--resume REPORT" in (other.hint or "") and "remove" not in (other.hint or "")
    monkeypatch.setattr(
        "patcher.rollout.lease.who", lambda: "op@ctl2 pid 9"
    )  # the resuming controller
    h = controller(fake, specs, "a1")
    decision = recheck.resume_host(h, said)
    assert decision.action == "continue" and decide.next_step(h.plan, h.done) == "restart"
    second = driver.leased_walk(h, resume=True)
    assert second.rollout is not None and second.rollout["verdict"] == decide.KEPT, second.error
    assert [e["step"] for e in fake.journal][-4:] == ["restart", "health", "window", "gates"]
    assert not path.exists()  # taken over, then given up with the walk's last step


def test_ctrl_c_parks_the_lease_resume_takes_it_over_a_new_run_is_refused(
    specs: list[PatchSpec], tmp_path: Path
) -> None:
    fake = FakeHost(state_dir=str(tmp_path / "state"))
    ctrl_c = threading.Event()
    fake.hook = rolloutfake.stop_in(decide.RESTART, ctrl_c)
    a = controller(fake, specs, "a1")
    first = driver.leased_walk(a, ctrl_c=ctrl_c)
    assert first.rollout is not None and first.rollout["verdict"] == decide.INTERRUPTED
    path = tmp_path / "state" / protocol.LEASE_FILE
    assert json.loads(path.read_text())["parked"] is True

    fake.hook = lambda step: None
    new = driver.leased_walk(controller(fake, specs, "b2"))
    assert new.rollout is not None and new.rollout["verdict"] == decide.UNTOUCHED
    assert "its controller is gone" in str(new.error) and "--resume" in str(new.hint)

    again = controller(fake, specs, "a1")
    said = [(s, True) for s in (decide.BASELINE, decide.APPLY, decide.RESTART)]
    assert recheck.resume_host(again, said).action == "continue"
    again.lease = None
    done = driver.leased_walk(again, resume=True)
    assert done.ok and done.rollout is not None and done.rollout["verdict"] == decide.KEPT
    assert not path.exists()


def test_a_controller_whose_lease_was_taken_touches_the_host_no_more(
    specs: list[PatchSpec], tmp_path: Path
) -> None:
    """A beat that finds the lease gone (removed by hand, or taken over by a --resume that
    thought this controller dead) stops the walk before its next step: attention, no
    rollback by a controller that no longer holds the host."""
    fake = FakeHost(state_dir=str(tmp_path / "state"))
    path = tmp_path / "state" / protocol.LEASE_FILE

    def remove(step: str) -> None:
        if step == decide.RESTART and path.exists():
            path.unlink()

    fake.hook = remove
    res = driver.leased_walk(controller(fake, specs, "a1"))
    r = res.rollout
    assert r is not None and r["verdict"] == decide.ATTENTION
    assert [p["step"] for p in r["phases"]] == [decide.BASELINE, decide.APPLY, decide.RESTART]
    assert str(res.error).startswith("stopped: this rollout's lease on the host is held by nobody")
    assert decide.HEALTH not in fake.ran and not path.exists()


class HostClock:
    """One clock for the controller (monotonic, sleep) and the agent (time): a --resume's
    wait for its own run's lease moves it, nothing else does."""

    def __init__(self) -> None:
        self.now = 2_000_000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def strftime(self, fmt: str, t: Any) -> str:
        import time

        return time.strftime(fmt, t)

    def gmtime(self, t: float) -> Any:
        import time

        return time.gmtime(t)


class InProcess:
    """A transport whose agent is this process's (patcher.agent.handle)."""

    target = "h1"

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return handle(request)

    def close(self) -> None:
        pass


def controller_of(sdir: str, n: int) -> Lease:
    return Lease(InProcess(), "a1", ["s1"], sdir, False, who=f"op@ctl pid {n}")


def test_resume_waits_for_its_runs_beating_lease_as_long_as_promised_then_takes_it_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost controller's last beat promised 30 s (no session agent to ask): the --resume
    finds it still live, waits one poll at a time, and takes it over once the promise ran
    out; a controller that keeps beating is a second one of the run, refused after the wait."""
    clock = HostClock()
    monkeypatch.setattr(lease, "time", clock)
    monkeypatch.setattr("patcher.rollout.lease.time", clock)
    sdir = str(tmp_path / "state")
    old = controller_of(sdir, 1)
    assert old.take(30.0) == leasing.TAKEN
    clock.now += 5
    new = controller_of(sdir, 2)
    assert new.take(60.0, resume=True) == leasing.TAKEN_OVER
    assert 25 <= sum(clock.slept) <= 25 + 2 * WAIT_POLL_S
    assert set(clock.slept) == {WAIT_POLL_S}
    with pytest.raises(Lost):
        old.beat(30.0)  # the old controller, back: hands off

    third = controller_of(sdir, 3)
    real_sleep = clock.sleep

    def beating(seconds: float) -> None:  # `new` is alive and beats while `third` waits
        real_sleep(seconds)
        new.beat(60.0)

    clock.sleep = beating  # type: ignore[method-assign]
    with pytest.raises(Refused) as refused:
        third.take(60.0, resume=True)
    assert "another controller of run a1 is running" in refused.value.error


def test_a_commit_meets_a_planted_lease_link_as_before(tmp_path: Path) -> None:
    """The commit looks the lease up by name without following a link before loading
    lease.py (commit._leased): a link by that name is still lease.py's to refuse."""
    sdir = tmp_path / "state"
    sdir.mkdir(mode=0o700)
    (tmp_path / "elsewhere").write_text("{}")
    (sdir / protocol.LEASE_FILE).symlink_to(tmp_path / "elsewhere")
    journal = [{"action": "apply", "spec": "s1"}]
    answer = handle({"op": "commit", "writes": [], "journal": journal, "state_dir": str(sdir)})
    assert (answer["ok"], answer["kind"]) == (False, protocol.STATE), answer


def test_rollout_release_gives_a_gone_controllers_lease_up_and_journals_it(
    tmp_path: Path,
) -> None:
    """`vpatch rollout release local --run a1`, the real CLI: refused while the holder beats
    (nothing changed, the holder named), done once it is gone (parked: a Ctrl-C), the release
    noted on the run's newest step in the journal (what `vpatch status` then shows)."""
    from tests.conftest import vpatch

    sdir = str(tmp_path / "state")
    take(sdir, "a1", "op@ctl pid 1")
    entry = protocol.step_entry(run="a1", step="apply", ok=True, specs=["s1"])
    assert handle(protocol.step_request(entry, sdir))["ok"]
    path = tmp_path / "state" / protocol.LEASE_FILE
    before = path.read_text()
    argv = ["rollout", "release", "local", "--run", "a1", "--state-dir", sdir]
    live = vpatch(*argv)
    assert live.code == 1, live.out + live.err
    assert "error: local: rollout run a1 (op@ctl pid 1; since" in live.err
    assert "still lives" in live.err and "hint: stop that controller" in live.err
    assert path.read_text() == before
    other = vpatch("rollout", "release", "local", "--run", "zz9", "--state-dir", sdir)
    assert other.code == 1 and "not run zz9" in other.err and "give --run a1" in other.err

    park = protocol.lease_request(protocol.LEASE_PARK, "a1", "op@ctl pid 1", [], 0, sdir)
    assert handle(park)["result"] == leasing.PARKED
    done = vpatch(*argv)
    assert done.code == 0, done.out + done.err
    assert (
        done.out == "local: run a1's rollout lease released (its controller was gone); journaled\n"
    )
    assert not path.exists()
    lines = (tmp_path / "state" / "journal.jsonl").read_text().splitlines()
    note = json.loads(lines[-1])
    assert (note["run"], note["step"], note["released"]) == ("a1", "apply", True)
    assert "released by " in note["detail"] and "it was op@ctl pid 1's" in note["detail"]
    again = vpatch(*argv, "--json")
    assert again.code == 0 and "nothing to release" in again.doc["hosts"][0]["notes"][0]
    bad = vpatch("rollout", "release", "local", "--state-dir", sdir)
    assert bad.code == 2 and "needs HOST... and --run ID" in bad.err


def test_a_released_note_is_no_step_of_the_walk() -> None:
    from patcher.rollout import resume

    plan = decide.Plan(metrics=True, restart=True, health=True)
    base = {"action": "rollout", "run": "a1", "ok": True, "specs": ["s1"]}
    raw = [
        dict(base, step="baseline"),
        dict(base, step="apply"),
        dict(base, step="apply", released=True),
    ]
    steps, problems = resume.read_steps(raw)
    assert not problems and steps[-1].released
    said = [("baseline", True), ("apply", True)]
    got = resume.resume(plan, "a1", said, steps, ["s1"])
    assert (got.action, got.done) == (resume.RESUME_CONTINUE, tuple(said))
