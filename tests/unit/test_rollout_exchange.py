"""Issue 38, "one way to talk to the agent": every agent request of a rollout (scrape, restart,
health, journal step, the resume's inspect, the lease) goes through the run's exchange
(patcher.run.exchange.call), so it is counted in `stats.agent_exchanges`, shown by -v, and an
error answer is an AgentError with its kind and a hint. Over the fake host of
tests/support/rolloutfake.py (its lease requests go to the real agent in a state dir), in
milliseconds; the engine's own steps are its counted stand-ins there."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import protocol
from patcher.errors import AgentError
from patcher.inventory.targets import Target
from patcher.output import progress
from patcher.result import HostResult, take_run
from patcher.rollout import canary, decide, driver, recheck, walk
from patcher.run import exchange, fleet
from patcher.specs import catalog
from patcher.specs.model import PatchSpec
from tests.conftest import REPO
from tests.support import rolloutfake
from tests.support.rolloutfake import FakeHost

BACKPORT = REPO / "patches" / "vllm-eagle3-mla-backport.toml"
TARGET = Target("h1", "h1")
ENGINE = ("plan", "apply", "rollback")  # the fake's stand-ins for the engine's steps, not requests


@pytest.fixture(scope="module")
def specs() -> list[PatchSpec]:
    return catalog.load_all([str(BACKPORT)])


@pytest.fixture(autouse=True)
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk, "_engine_step", rolloutfake.engine_step)


@pytest.fixture(autouse=True)
def normal_progress() -> Any:
    progress.configure()
    yield
    progress.configure()


def requests(fake: FakeHost) -> list[str]:
    """The ops of every request the fake's agent was asked (the engine's stand-ins left out)."""
    return [op for op in fake.ops if op not in ENGINE]


class Refusing(FakeHost):
    """A host whose agent refuses one op with an error answer of `kind`."""

    def __init__(self, op: str, kind: str, error: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.refuse, self.kind, self.error = op, kind, error

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if request["op"] == self.refuse:
            self.ops.append(request["op"])
            return {"ok": False, "kind": self.kind, "error": self.error}
        return super().call(request, timeout)


def test_every_request_of_a_host_s_rollout_is_counted_in_its_run(
    specs: list[PatchSpec], tmp_path: Path
) -> None:
    """Scrapes, restart, health, a journal step per phase and the lease's take, beats and
    release: each one exchange of the run (today's walk counted none of them)."""
    fake = FakeHost(state_dir=str(tmp_path / "state"))
    ctx = exchange.RunContext()
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1", ctx)
    res = driver.leased_walk(h)
    assert res.ok and res.rollout is not None and res.rollout["verdict"] == decide.KEPT
    asked = requests(fake)
    assert {"fetch", "restart", "health", protocol.STEP, protocol.LEASE} <= set(asked), asked
    assert asked.count(protocol.STEP) == len(res.rollout["phases"])
    assert ctx.stats()["agent_exchanges"] == len(asked) > 0


def test_the_resume_s_read_of_the_journal_is_counted_too(specs: list[PatchSpec]) -> None:
    fake = FakeHost()
    ctx = exchange.RunContext()
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1", ctx)
    recheck.resume_host(h, None)
    assert requests(fake) == ["inspect"] and ctx.stats()["agent_exchanges"] == 1


def test_a_rollout_s_json_stats_carry_the_true_count(
    specs: list[PatchSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole command's result (its --json document and report): `stats` with every
    exchange of the rollout, where today's was empty."""
    fake = FakeHost(state_dir=str(tmp_path / "state"))
    made = walk._host

    def linked(*args: Any, **kw: Any) -> walk.Host:
        h = made(*args, **kw)
        fake.current = lambda: h.current
        return h

    monkeypatch.setattr(walk, "_host", linked)
    request = driver.Request(
        specs=[str(BACKPORT)],
        level="static",
        force=False,
        state_dir=None,
        report=str(tmp_path / "report.json"),
        resume=None,
        settings=rolloutfake.settings(),
    )
    inherited = signal.getsignal(signal.SIGINT)
    try:
        done = driver.drive(
            request,
            [TARGET],
            fleet.Policy(parallel=1),
            lambda t: fake,
            lambda names: progress.HostsProgress(),
            lambda run, path: None,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert done.result.ok, done.result.hosts[0].error
    doc = done.result.to_json()
    assert doc["stats"]["agent_exchanges"] == len(requests(fake)) > 0, doc["stats"]


def test_verbose_shows_each_step_s_exchange(
    specs: list[PatchSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    """-v shows a rollout's exchanges as it shows apply's: what each did and its time."""
    progress.configure(verbose=1)
    fake = FakeHost()
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1", exchange.RunContext())
    assert walk.walk(h, threading.Event()).ok
    err = capsys.readouterr().err
    for words in (
        "scraping metrics",
        "restarting",
        "waiting for health",
        "journaling the rollout step",
    ):
        assert f"h1: {words}: " in err, err


def test_an_error_answer_is_an_agent_error_with_its_kind_and_a_hint() -> None:
    """The kind's own hint (protocol.HINTS) when it has one, else the caller's words; the
    message as the caller words it (a rollout's report names the host already)."""
    fake = Refusing("restart", protocol.OS_ERROR, "Permission denied: /run/vllm.pid")
    with pytest.raises(AgentError) as got:
        exchange.call(fake, {"op": "restart"}, refused="agent refused the restart", hint="h")
    err = got.value
    assert (err.kind, err.hint) == (protocol.OS_ERROR, protocol.HINTS[protocol.OS_ERROR])
    assert err.message == "agent refused the restart: Permission denied: /run/vllm.pid"
    bad = Refusing("health", protocol.INPUT, "health: not an http(s) URL")
    with pytest.raises(AgentError) as got:
        exchange.call(bad, {"op": "health"}, refused="", hint=walk.HEALTH_HINT)
    assert (got.value.kind, got.value.hint) == (protocol.INPUT, walk.HEALTH_HINT)
    assert got.value.message == "health: not an http(s) URL"
    with pytest.raises(AgentError) as got:  # the engine's form: the host named
        exchange.call(bad, {"op": "health"})
    assert got.value.message == "h1: health: not an http(s) URL"


METRICS = "http://localhost:8000/metrics"  # rolloutfake.settings()


@pytest.mark.parametrize(
    ("op", "kind", "step", "detail", "hint"),
    [
        (
            "restart",
            protocol.OS_ERROR,
            decide.RESTART,
            "agent refused the restart: no",
            protocol.HINTS[protocol.OS_ERROR],
        ),
        (
            "health",
            protocol.INPUT,
            decide.HEALTH,
            "agent refused the health check: no",
            walk.HEALTH_HINT,
        ),
        (
            "fetch",
            protocol.INPUT,
            decide.BASELINE,
            f"cannot scrape {METRICS}: agent refused: no",
            canary.METRICS_HINT,
        ),
    ],
)
def test_a_step_the_agent_refuses_fails_with_the_error_s_hint(
    op: str, kind: str, step: str, detail: str, hint: str, specs: list[PatchSpec]
) -> None:
    """The step fails in the agent's words, and the host's hint says what to check first
    (then what its verdict asks); today's walk dropped the kind and said only the latter."""
    fake = Refusing(op, kind, "no")
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1", exchange.RunContext())
    res = walk.walk(h, threading.Event())
    assert not res.ok and res.rollout is not None
    failed = next(p for p in res.rollout["phases"] if not p["ok"])
    assert (failed["step"], failed["detail"]) == (step, detail), failed
    assert str(res.hint).startswith(f"{hint}; "), res.hint


def test_a_refused_journal_step_is_a_warning_in_the_agent_s_words(specs: list[PatchSpec]) -> None:
    fake = Refusing(protocol.STEP, protocol.STATE, "the journal is a link")
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1", exchange.RunContext())
    res = walk.walk(h, threading.Event())
    assert res.ok  # the steps ran; --resume cannot rely on the journal
    want = "the baseline step is not in the host's journal (the journal is a link): --resume"
    assert any(w.startswith(want) for w in res.warnings), res.warnings


def test_one_helper_takes_the_engine_s_result_into_the_rollout_s() -> None:
    """Patches are the newest run's, the interpreter and uid when the host answered,
    warnings once, notes all, restart_required only when asked (apply's)."""
    host = HostResult("h1", warnings=["w1"], notes=["n0"])
    first = HostResult("h1", python="/py (3.11.2)", python_path="/py", python_version="3.11.2")
    first.uid, first.dropped_from = 1000, 0
    first.warnings, first.notes = ["w1", "w2"], ["n1"]
    first.restart_required = [{"pid": 7, "started": "x", "cmdline": "vllm"}]
    take_run(host, first, restarts=True)
    assert (host.python_path, host.python_version, host.uid, host.dropped_from) == (
        "/py",
        "3.11.2",
        1000,
        0,
    )
    assert host.warnings == ["w1", "w2"] and host.notes == ["n0", "n1"]
    assert host.restart_required == first.restart_required
    silent = HostResult("h1", warnings=["w2"], notes=["n2"])  # did not answer: no python
    silent.restart_required = []
    take_run(host, silent)
    assert host.python_path == "/py" and host.uid == 1000
    assert host.warnings == ["w1", "w2"] and host.notes == ["n0", "n1", "n2"]
    assert host.restart_required == first.restart_required  # not apply's: kept


class Scanned(Refusing):
    """A host whose apply wrote a file and whose agent answers the restart-required scan:
    apply's list names the server the restart then replaces; asked again, the scan names
    only `still` (or refuses, with `refuse`)."""

    def __init__(self, still: list[dict[str, Any]], **kw: Any) -> None:
        super().__init__(**kw)
        self.still = still
        self.asked_paths: list[list[str]] = []

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if request["op"] == "procs" and request["op"] != self.refuse:
            self.ops.append("procs")
            self.asked_paths.append(request["paths"])
            return {"ok": True, "restart_required": self.still}
        return super().call(request, timeout)

    def engine_step(self, h: walk.Host, which: str) -> str:
        from patcher.result import FileChange

        said = super().engine_step(h, which)
        for p in h.result.patches:
            p.files = [FileChange("/srv/vllm/site/vllm/config/speculative.py", "a", "b")]
        if which == "apply":
            h.result.restart_required = [{"pid": 7, "started": "T0", "cmdline": "old server"}]
        return said


@pytest.mark.parametrize("refused", [False, True], ids=["answered", "refused"])
def test_the_restart_step_asks_who_still_holds_the_old_code(
    specs: list[PatchSpec], refused: bool, tmp_path: Path
) -> None:
    """After the restart, apply's list (the server the restart replaced) is asked again with
    the patched files; a refused question is a warning, never the step's failure."""
    beside = {"pid": 9, "started": "T0", "cmdline": "another server", "why": "maps x.so"}
    fake = Scanned(
        [beside],
        op="procs" if refused else "-",
        kind="os_error",
        error="no /proc",
        state_dir=str(tmp_path / "state"),
    )
    h = rolloutfake.host(fake, TARGET, specs, rolloutfake.settings(), "r1")
    res = driver.leased_walk(h)
    assert res.ok and res.rollout is not None and res.rollout["verdict"] == decide.KEPT
    assert requests(fake).count("procs") == 1  # once, right after the restart
    if refused:
        assert res.restart_required == [{"pid": 7, "started": "T0", "cmdline": "old server"}]
    else:
        assert fake.asked_paths == [["/srv/vllm/site/vllm/config/speculative.py"]]
        assert res.restart_required == [beside]
