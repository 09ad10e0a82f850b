"""Issue 25 case 6: the journal stays proportional to the state (patcher/agent/compact.py).

Reinstall + `ensure` cycles (tests/support/cycles.py) on a real pip-installed stand-in env,
with the compaction threshold lowered for the test (VPATCH_AGENT_COMPACT_AT, read by local
agents only) so a few dozen cycles cross it many times: without compaction the journal grows by
one cycle's entries every cycle; with it, it stays under the threshold plus one cycle, folds to
the same state, and keeps only the backups a live entry names. A full rollback removes the
backups nothing needs any more. A kill at every compaction step (faults, SIGKILL) leaves a
journal that parses and folds to the same state, and the next cycle goes on.
`make bench` runs the full 2,000 cycles on real vLLM (bench/journal.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from patcher.agent import compact, journal
from patcher.plan.base import Options, sha256_text
from patcher.run import engine, ensure
from patcher.run.exchange import TEST_FAULT_ENV
from patcher.specs.model import PatchSpec, load_spec
from patcher.transports.pipe import LocalTransport
from tests import standin
from tests.support import cycles
from tests.support.standin_specs import REL, SPEC_A, SPEC_B

THRESHOLD = 6000  # bytes: ~3 stand-in cycles of two specs


@pytest.fixture
def lab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path, list[PatchSpec]]]:
    """(python, env root, the two stand-in specs), agents compacting at THRESHOLD."""
    monkeypatch.setenv("VPATCH_AGENT_COMPACT_AT", str(THRESHOLD))
    python = standin.make_env(tmp_path / "host")
    specs = []
    for i, text in enumerate((SPEC_A, SPEC_B)):
        path = tmp_path / f"spec{i}.toml"
        path.write_text(text)
        specs.append(load_spec(path))
    yield python, python.parent.parent, specs


def _site(root: Path) -> Path:
    return next(root.glob("lib/python*/site-packages"))


def _fold(root: Path) -> dict[str, object]:
    raw = (root / ".vpatch" / "journal.jsonl").read_bytes()
    warnings: list[str] = []
    entries = journal.parse(raw, warnings)
    assert warnings == []
    return {
        p: (sorted(st["applied"]), st["base"], st["expected"])
        for p, st in journal.fold(entries, {}).items()
        if st["applied"]
    }


def test_cycles_keep_the_journal_bounded_and_the_backups_live(
    lab: tuple[Path, Path, list[PatchSpec]],
) -> None:
    python, root, specs = lab
    state = root / ".vpatch"
    got = list(cycles.run(python, state, specs, [_site(root) / REL], 40))
    per_cycle = got[1].journal_bytes - got[0].journal_bytes
    assert per_cycle > 1000  # each cycle journals a reset and two applies
    assert 40 * per_cycle > 5 * THRESHOLD  # uncompacted, the journal would be far past it
    assert all(c.outcomes == ["applied", "applied"] for c in got)
    assert max(c.journal_bytes for c in got) < THRESHOLD + per_cycle
    assert got[-1].journal_bytes <= 4 * per_cycle
    assert all(c.backups == 1 for c in got)  # pip's bytes: the base every cycle starts from
    [(path, (ids, base, expected))] = _fold(root).items()
    assert ids == ["servekit-batch", "servekit-kimi"] and path.endswith(REL)
    [backup] = (state / "backups").iterdir()
    assert backup.name == base and expected == sha256_text((_site(root) / REL).read_text())
    st = engine.status([], LocalTransport(str(python)), Options(level="static"))
    assert st.ok and sorted(p.outcome for p in st.patches) == ["applied", "applied"]


def test_live_lines_are_the_current_epoch_verbatim() -> None:
    """The pure decision: per file, the lines since it last had no spec, and their markers;
    an unmarked transaction (a crash the repair has not settled) stops compaction."""

    def line(**e: object) -> bytes:
        return json.dumps(e, sort_keys=True).encode()

    a1 = line(
        action="apply",
        path="/f",
        spec="a",
        before="0" * 64,
        after="1" * 64,
        txn="t1",
        new_field={"x": 1},
    )
    b1 = line(action="apply", path="/f", spec="b", before="1" * 64, after="2" * 64, txn="t2")
    ra = line(action="rollback", path="/f", spec="a", before="2" * 64, after="3" * 64, txn="t3")
    rb = line(action="rollback", path="/f", spec="b", before="3" * 64, after="0" * 64, txn="t4")
    g1 = line(action="apply", path="/g", spec="a", before="4" * 64, after="5" * 64, txn="t5")
    gx = line(action="apply", path="/g", spec="c", before="5" * 64, after="6" * 64, txn="t6")
    marks = {t: line(action="commit", txn=t) for t in ("t1", "t2", "t3", "t4", "t5")}
    abort6 = line(action="abort", txn="t6")
    raw = (
        b"\n".join(
            [
                a1,
                marks["t1"],
                b1,
                marks["t2"],
                ra,
                marks["t3"],
                g1,
                marks["t5"],
                gx,
                abort6,
                b"{torn",
            ]
        )
        + b"\n"
    )
    got = compact.live(raw)
    assert got is not None
    kept, names = got
    # /f still has b: everything since a's apply (its base) is kept, verbatim; /g: its apply.
    assert kept == [a1, marks["t1"], b1, marks["t2"], ra, marks["t3"], g1, marks["t5"]]
    assert names == {"0" * 64, "1" * 64, "2" * 64, "3" * 64, "4" * 64, "5" * 64}
    done = raw + rb + b"\n" + marks["t4"] + b"\n"
    assert compact.live(done) == ([g1, marks["t5"]], {"4" * 64, "5" * 64})
    assert (
        compact.live(done + line(action="apply", path="/h", spec="a", after="7" * 64, txn="t9"))
        is None
    )


def test_full_rollback_removes_the_backups(lab: tuple[Path, Path, list[PatchSpec]]) -> None:
    python, root, specs = lab
    state = root / ".vpatch"
    t = LocalTransport(str(python))
    try:
        opts = Options(level="static")
        assert engine.apply(specs, t, opts).ok
        [base] = [b.name for b in (state / "backups").iterdir()]
        part = engine.rollback([specs[0]], t, opts)
        assert part.ok and base in {b.name for b in (state / "backups").iterdir()}  # b's base
        full = engine.rollback(None, t, opts)
        assert full.ok and [p.outcome for p in full.patches] == ["rolled_back"]
        assert list((state / "backups").iterdir()) == []
        assert engine.status([], t, opts).patches == []
    finally:
        t.close()


@pytest.mark.parametrize("point", compact.POINTS)
def test_kill_at_every_compaction_step(
    lab: tuple[Path, Path, list[PatchSpec]], point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    python, root, specs = lab
    state, target = root / ".vpatch", _site(root) / REL
    one, two = cycles.run(python, state, specs, [target], 2)
    before = two.journal_bytes
    assert before < THRESHOLD <= before + (two.journal_bytes - one.journal_bytes)  # crosses it
    pristine = next((state / "backups").iterdir()).read_bytes()
    patched = target.read_bytes()
    cycles.reinstall({target: pristine})
    monkeypatch.setenv(TEST_FAULT_ENV, point)
    t = LocalTransport(str(python))
    try:
        res = ensure.ensure(specs, t, ensure.ensure_options("static"))
    finally:
        t.close()
    assert res.error and "killed by signal 9" in res.error, res  # the kill happened
    monkeypatch.delenv(TEST_FAULT_ENV)
    assert target.read_bytes() == patched  # the commit was complete before compaction began
    size = (state / "journal.jsonl").stat().st_size
    assert size < before if point in compact.POINTS[2:] else size > before
    assert next(iter(_fold(root).values()))[0] == ["servekit-batch", "servekit-kimi"]
    t = LocalTransport(str(python))
    try:
        st = engine.status([], t, Options(level="static"))
        assert st.ok and sorted(p.outcome for p in st.patches) == ["applied", "applied"], st
    finally:
        t.close()
    more = list(cycles.run(python, state, specs, [target], 5, {target: pristine}))
    assert [c.outcomes for c in more] == [["already_applied"] * 2] + [["applied"] * 2] * 4
    assert all(c.backups == 1 for c in more[1:])
    assert target.read_bytes() == patched and list(state.glob(".vpatch-*.tmp")) == []
