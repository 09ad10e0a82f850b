"""Reinstall + `ensure` cycles, as a crash-looping pod or a re-synced venv volume makes them:
the files get pip's bytes back (by rename, as pip writes them), then `ensure` applies the
specs again. What the journal, its backups and `ensure`'s time do over many cycles is what
compaction bounds (patcher/agent/compact.py; tests/integration/test_compaction.py, and the
`journal-cycles` bench, bench/journal.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from patcher import hooks
from patcher.spec import PatchSpec
from patcher.transport import LocalTransport


@dataclass
class Cycle:
    number: int
    seconds: float  # the ensure call
    journal_bytes: int
    backups: int
    outcomes: list[str]


def reinstall(pristine: dict[Path, bytes]) -> None:
    """Every file back to pip's bytes, each by rename (a new inode, as pip leaves it)."""
    for path, data in pristine.items():
        tmp = path.with_name(path.name + ".reinstall-tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def run(
    python: Path,
    state: Path,
    specs: Sequence[PatchSpec],
    files: Sequence[Path],
    cycles: int,
    pristine: dict[Path, bytes] | None = None,
) -> Iterator[Cycle]:
    """`cycles` times: reinstall `files` (pip's bytes: `pristine`, else what they hold now;
    not before the first cycle), then ensure `specs` at --level static (the journal is the
    subject, not the imports), in one agent session."""
    pristine = pristine or {f: f.read_bytes() for f in files}
    opts = hooks.ensure_options("static")
    transport = LocalTransport(str(python))
    try:
        for n in range(1, cycles + 1):
            if n > 1:
                reinstall(pristine)
            started = time.perf_counter()
            host = hooks.ensure(list(specs), transport, opts)
            seconds = time.perf_counter() - started
            if not host.ok:
                raise AssertionError(f"cycle {n}: {host.error} {host.patches}")
            journal = state / "journal.jsonl"
            yield Cycle(
                n,
                seconds,
                journal.stat().st_size if journal.exists() else 0,
                len(list((state / "backups").iterdir())),
                [p.outcome for p in host.patches],
            )
    finally:
        transport.close()
