"""Concurrent runs on one environment: no lost update, and the journal always tells the truth.

Two runs that inspect the same file and then both commit would, without care, let the second
overwrite the first (a lost update). vpatch prevents it in two layers: the agent's commit runs
under the environment's flock and refuses when the file's sha256 is no longer what inspect saw
("changed since inspection"), and the engine then inspects and plans again, on top of what the
other run wrote (up to engine._CONFLICT_RETRIES attempts; apply and rollback alike).

The in-process tests make the race certain, not likely: a gate holds each run's first commit
until both runs have inspected. They also show the retry is what makes it work: with a single
attempt the loser fails instead (and still leaves nothing the journal does not describe). The
subprocess tests then race two real `vpatch` commands, as two operators (or a hook and a
person) would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patcher.plan.base import Options
from patcher.result import HostResult
from patcher.rewrite import apply_edits
from patcher.run import engine
from patcher.specs.model import PatchSpec, load_spec
from patcher.transports import Transport
from patcher.transports.pipe import LocalTransport
from tests.conftest import REPO, Env, vpatch
from tests.support.specs import edit, spec_toml
from tests.support.standin_specs import REL, SPEC_A, SPEC_B

OPTS = Options(level="static")
SPEC_C = spec_toml(
    id="servekit-factor",
    summary="a bigger budget factor",
    package="servekit",
    versions=">=1.0",
    file=REL,
    edits=[edit("set_value", scope="budget", param="factor", value=3)],
)


def specs(tmp_path: Path) -> tuple[PatchSpec, PatchSpec, Path, Path]:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(SPEC_A)
    b.write_text(SPEC_B)
    return load_spec(a), load_spec(b), a, b


class Gated:
    """A real transport whose first commit waits until every run has reached its own (all
    have inspected the same bytes), and, when `after` is given, until that run's first commit
    is done: the order of the race is fixed, so the loser is known."""

    def __init__(
        self, inner: Transport, gate: threading.Barrier, after: threading.Event | None
    ) -> None:
        self.inner, self.gate, self.after, self.target = inner, gate, after, inner.target
        self.held = False
        self.committed = threading.Event()
        self.refused: list[str] = []

    def call(self, request: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
        first = request.get("op") == "commit" and not self.held
        if first:
            self.held = True
            self.gate.wait(30)
            if self.after is not None:
                assert self.after.wait(30)
        res = self.inner.call(request, timeout)
        if request.get("op") == "commit" and not res.get("ok"):
            self.refused.append(str(res.get("error")))
        if first:
            self.committed.set()
        return res

    def close(self) -> None:
        self.inner.close()


def race(*runs: Callable[[Transport], HostResult], python: Path) -> tuple[list[HostResult], int]:
    """Run each `run(transport)` in its own thread, all inspecting before any commits, the
    first one's commit going first; results in order, and how many commits were refused."""
    gate = threading.Barrier(len(runs))
    transports: list[Gated] = []
    for _ in runs:
        after = transports[-1].committed if transports else None
        transports.append(Gated(LocalTransport(str(python)), gate, after))
    results: list[HostResult | None] = [None] * len(runs)

    def go(i: int) -> None:
        results[i] = runs[i](transports[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(r is not None for r in results)
    refusals = sum(len(t.refused) for t in transports)
    return [r for r in results if r is not None], refusals


def journal(env: Env) -> list[dict[str, Any]]:
    return [json.loads(line) for line in env.journal.read_text().splitlines()]


def status(env: Env) -> list[str]:
    res = engine.status([], LocalTransport(str(env.python)), OPTS)
    assert res.ok, res  # no drift: the file has the hash the journal expects
    return [p.id for p in res.patches]


def assert_journal_describes_file(env: Env, by_id: dict[str, PatchSpec], pristine: str) -> None:
    """Bytes on disk == pristine + the edits of exactly the specs status lists (in order)."""
    text = pristine
    for sid in status(env):
        text = apply_edits(text, by_id[sid].variant[0].edit).source
    assert env.file(REL).read_text() == text
    entries = journal(env)
    committed = {e["txn"] for e in entries if e["action"] == "commit"}
    assert all(e["txn"] in committed for e in entries), "an entry without its commit marker"


def test_two_applies_at_once_stack(tmp_path: Path, standin_env: Env) -> None:
    a, b, _, _ = specs(tmp_path)
    pristine = standin_env.file(REL).read_text()
    (ra, rb), refusals = race(
        lambda t: engine.apply([a], t, OPTS),
        lambda t: engine.apply([b], t, OPTS),
        python=standin_env.python,
    )
    assert refusals == 1  # the loser's first commit was refused: the race really happened
    assert ra.ok and rb.ok, (ra, rb)
    assert [p.outcome for p in ra.patches + rb.patches] == ["applied", "applied"]
    both = apply_edits(apply_edits(pristine, a.variant[0].edit).source, b.variant[0].edit)
    assert standin_env.file(REL).read_text() == both.source  # no lost update
    applies = [e["spec"] for e in journal(standin_env) if e["action"] == "apply"]
    assert sorted(applies) == sorted([a.id, b.id])  # one each: the refused try wrote none
    assert sorted(status(standin_env)) == sorted([a.id, b.id])
    assert_journal_describes_file(standin_env, {a.id: a, b.id: b}, pristine)


def test_without_the_retry_the_loser_fails_cleanly(
    tmp_path: Path, standin_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry is what stacks them: with one attempt, the second run is refused."""
    monkeypatch.setattr(engine, "_CONFLICT_RETRIES", 1)
    a, b, _, _ = specs(tmp_path)
    pristine = standin_env.file(REL).read_text()
    (ra, rb), refusals = race(
        lambda t: engine.apply([a], t, OPTS),
        lambda t: engine.apply([b], t, OPTS),
        python=standin_env.python,
    )
    assert refusals == 1
    [loser] = [r for r in (ra, rb) if not r.ok]
    assert loser.error and "changed since inspection" in loser.error
    assert [p.outcome for p in loser.patches] == ["failed"]
    assert len(status(standin_env)) == 1
    assert_journal_describes_file(standin_env, {a.id: a, b.id: b}, pristine)


@pytest.mark.parametrize("retries", [engine._CONFLICT_RETRIES, 1])
@pytest.mark.parametrize("first", ["apply", "rollback"])
def test_apply_racing_rollback(
    tmp_path: Path, standin_env: Env, monkeypatch: pytest.MonkeyPatch, retries: int, first: str
) -> None:
    """`apply B` and `rollback A` (A applied before), either one committing first."""
    a, b, _, _ = specs(tmp_path)
    pristine = standin_env.file(REL).read_text()
    assert engine.apply([a], LocalTransport(str(standin_env.python)), OPTS).ok
    monkeypatch.setattr(engine, "_CONFLICT_RETRIES", retries)
    runs = {
        "apply": lambda t: engine.apply([b], t, OPTS),
        "rollback": lambda t: engine.rollback([a], t, OPTS),
    }
    second = "rollback" if first == "apply" else "apply"
    (winner, loser), refusals = race(runs[first], runs[second], python=standin_env.python)
    assert refusals == 1 and winner.ok, winner
    if retries > 1:  # both succeed: A is gone, B stays, in either order
        assert loser.ok, loser
        assert status(standin_env) == [b.id]
    else:  # the loser is refused, and says so; the journal still tells the truth
        assert not loser.ok and loser.error and "changed since inspection" in loser.error
        assert [p.outcome for p in loser.patches] == ["failed"]
    assert_journal_describes_file(standin_env, {a.id: a, b.id: b}, pristine)


def _launch(go: Path, *args: object) -> subprocess.Popen[str]:
    """`vpatch ARGS` that starts its work only once `go` exists: both start at one moment."""
    wait = (
        "import os, sys, time\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.002)\n"
        "sys.argv = ['vpatch', *sys.argv[2:]]\n"
        "from patcher.cli import main\n"
        "raise SystemExit(main())\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", wait, str(go), *map(str, args)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _together(tmp_path: Path, name: str, *commands: list[object]) -> list[tuple[int, str]]:
    """Start every command, let them import, then release them at once."""
    go = tmp_path / f"go-{name}"
    procs = [_launch(go, *c) for c in commands]
    time.sleep(1.0)  # each has imported vpatch and is polling for `go`
    go.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append((p.returncode, stdout + stderr))
    return out


def test_real_cli_race(tmp_path: Path, standin_env: Env) -> None:
    """Two `vpatch apply` at once, then `vpatch apply` racing `vpatch rollback`."""
    a, b, a_path, b_path = specs(tmp_path)
    pristine = standin_env.file(REL).read_text()
    py = ["--python", standin_env.python, "--level", "static"]
    runs = _together(tmp_path, "apply", ["apply", a_path, *py], ["apply", b_path, *py])
    assert [code for code, _ in runs] == [0, 0], runs
    assert sorted(status(standin_env)) == sorted([a.id, b.id])
    assert_journal_describes_file(standin_env, {a.id: a, b.id: b}, pristine)
    applies = [e["spec"] for e in journal(standin_env) if e["action"] == "apply"]
    assert sorted(applies) == sorted([a.id, b.id])

    c_path = tmp_path / "c.toml"
    c_path.write_text(SPEC_C)
    c = load_spec(c_path)
    rb = ["--python", standin_env.python]
    runs = _together(tmp_path, "mixed", ["rollback", a_path, *rb], ["apply", c_path, *py])
    assert [code for code, _ in runs] == [0, 0], runs
    assert sorted(status(standin_env)) == sorted([b.id, c.id])
    assert_journal_describes_file(standin_env, {a.id: a, b.id: b, c.id: c}, pristine)
    assert vpatch("rollback", *rb).code == 0
    assert standin_env.file(REL).read_text() == pristine


def _hold_lock(env: Env) -> subprocess.Popen[str]:
    """Another process holding the environment's lock, as a long commit would, until its stdin
    closes (it says `held` once it has the lock)."""
    code = (
        "import fcntl, os, sys; os.makedirs(sys.argv[1], exist_ok=True); "
        "fd = os.open(os.path.join(sys.argv[1], 'lock'), os.O_RDWR | os.O_CREAT, 0o600); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(env.root / ".vpatch")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_held_lock_is_waited_for_and_said(tmp_path: Path, standin_env: Env) -> None:
    """ensure says it waits for another vpatch's lock, then goes on as soon as it is free."""
    _, _, a_path, _ = specs(tmp_path)
    holder = _hold_lock(standin_env)
    try:
        run = subprocess.Popen(
            [*engine_cli(), "ensure", str(a_path), "--python", str(standin_env.python)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert run.stderr is not None
        said = run.stderr.readline()  # the lock is still held: ensure can only be waiting
        assert run.poll() is None
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    out, err = run.communicate(timeout=120)
    assert said == (
        "local: another vpatch is working on this environment; waiting for its lock (up to 30 s)\n"
    )
    assert run.returncode == 0 and err == "", out + err
    assert out.splitlines()[0].startswith("applied: local: servekit-kimi")


def test_a_lock_held_too_long_fails_with_a_clear_error(
    tmp_path: Path, standin_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait is bounded (engine.LOCK_WAIT_S): then one error naming the lock, nothing written."""
    monkeypatch.setattr(engine, "LOCK_WAIT_S", 2.5)
    a, _, _, _ = specs(tmp_path)
    pristine = standin_env.file(REL).read_text()
    holder = _hold_lock(standin_env)
    try:
        started = time.monotonic()
        t = LocalTransport(str(standin_env.python))
        try:
            res = engine.apply([a], t, OPTS)
        finally:
            t.close()
        waited = time.monotonic() - started
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    assert 2.5 <= waited < 10
    assert res.error and "another vpatch holds" in res.error and "lock" in res.error
    assert "still held after 2 s of waiting; nothing was changed" in res.error
    assert res.hint and "vpatch status" in res.hint
    assert [p.outcome for p in res.patches] == ["failed"]
    assert standin_env.file(REL).read_text() == pristine


def engine_cli() -> list[str]:
    return [sys.executable, "-m", "patcher.cli"]
