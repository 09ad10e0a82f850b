"""Reinstall + `ensure` cycles, as a crash-looping pod or a re-synced venv volume makes them:
the files get pip's bytes back (by rename, as pip writes them), then `ensure` applies the
specs again. What the journal, its backups and `ensure`'s time do over many cycles is what
compaction bounds (patcher/agent/compact.py; tests/integration/test_compaction.py, and the
`journal-cycles` bench, bench/journal.py)."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from patcher.run import ensure
from patcher.specs.model import PatchSpec
from patcher.transports.pipe import LocalTransport


@dataclass
class Cycle:
    number: int
    seconds: float  # the ensure call, wall clock
    cpu: float  # CPU seconds of the ensure: this process and its agent (a child, reaped)
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
    subject, not the imports), each through its own agent, as every `vpatch exec` starts one.
    CPU is this process's plus the agent's (reaped when its transport closes): a figure a
    busy machine moves far less than the wall clock."""
    pristine = pristine or {f: f.read_bytes() for f in files}
    opts = ensure.ensure_options("static")
    for n in range(1, cycles + 1):
        if n > 1:
            reinstall(pristine)
        cpu0 = time.process_time() + _children_cpu()
        started = time.perf_counter()
        transport = LocalTransport(str(python))
        try:
            host = ensure.ensure(list(specs), transport, opts)
        finally:
            transport.close()
        seconds = time.perf_counter() - started
        cpu = time.process_time() + _children_cpu() - cpu0
        if not host.ok:
            raise AssertionError(f"cycle {n}: {host.error} {host.patches}")
        journal = state / "journal.jsonl"
        yield Cycle(
            n,
            seconds,
            cpu,
            journal.stat().st_size if journal.exists() else 0,
            len(list((state / "backups").iterdir())),
            [p.outcome for p in host.patches],
        )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
