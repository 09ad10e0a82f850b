"""Reinstall + `ensure` cycles on one environment: does the journal stay bounded?

    python -m bench.journal                 # 2,000 cycles on real vLLM 0.16.0, both catalog specs
    python -m bench.journal --cycles 50 --standin --json

A crash-looping pod or a re-synced venv volume gets pip's bytes back on every start and its
`ensure` patches them again; each cycle journals a reset and every spec's entries (~36 KB with
the catalog's two vLLM specs). Without compaction that journal reached the 64 MiB read cap after
~1,850 cycles. Goals (issue 25): after 2,000 cycles the journal is under 256 KiB and `ensure`
takes at most 1.2x what it took at the start. The start is the median of cycles 2-51 (the first
also parses with libcst and warms every cache), the end the median of the last 50, judged on
CPU seconds (the controller's and its agent's): on a machine other work shares, wall time moves
with that work (it is reported too). `ensure` runs at --level static, in-process, one agent per
cycle (tests/support/cycles.py): the journal is what is measured, not imports.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patcher.agent import compact, statedir
from patcher.specs.model import PatchSpec, load_spec
from tests import envs, standin
from tests.support import cycles
from tests.support.standin_specs import SPEC_A, SPEC_B

REPO = Path(__file__).resolve().parent.parent
CYCLES = 2_000
VLLM = "0.16.0"
SPECS = ("vllm-eagle3-mla-targets.toml", "vllm-eagle3-mla-backport.toml")
GOAL_BYTES = 256 << 10
GOAL_RATIO = 1.2
WINDOW = 50  # cycles per median: the start (after the first) and the end


def _env(work: Path, use_standin: bool) -> tuple[Path, Path, list[PatchSpec]]:
    """(python, env root, specs)."""
    if use_standin:
        python = standin.make_env(work / "host")
        specs = []
        for i, text in enumerate((SPEC_A, SPEC_B)):
            (work / f"spec{i}.toml").write_text(text)
            specs.append(load_spec(work / f"spec{i}.toml"))
        return python, python.parent.parent, specs
    root = envs.clone(VLLM, work / f"vllm-{VLLM}")
    return root / "bin" / "python", root, [load_spec(REPO / "patches" / s) for s in SPECS]


def _files(root: Path, specs: Sequence[PatchSpec]) -> list[Path]:
    site = envs.site_packages(root)
    rels = sorted({rel for s in specs for v in s.variant for rel, _ in v.files()})
    return [site / rel for rel in rels if (site / rel).exists()]


def measure(n: int, use_standin: bool, log: Any = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vpatch-journal-"))
    try:
        python, root, specs = _env(work, use_standin)
        state = root / ".vpatch"
        got = []
        started = time.monotonic()
        for c in cycles.run(python, state, specs, _files(root, specs), n):
            got.append(c)
            if log and c.number % 250 == 0:
                log(f"cycle {c.number}: journal {c.journal_bytes} bytes, {c.seconds:.3f} s")
        wall = time.monotonic() - started
        w = max(1, min(WINDOW, (n - 1) // 2))
        head, tail = got[1 : 1 + w] or got[:1], got[-w:]
        per_cycle = got[1].journal_bytes - got[0].journal_bytes if n > 1 else 0

        def med(cs: list[cycles.Cycle], cpu: bool) -> float:
            return statistics.median(c.cpu if cpu else c.seconds for c in cs)

        ratio = med(tail, True) / med(head, True)
        wall_ratio = med(tail, False) / med(head, False)
        biggest = max(c.journal_bytes for c in got)
        return {
            "env": "stand-in" if use_standin else f"vllm {VLLM}",
            "specs": [s.id for s in specs],
            "cycles": n,
            "wall_s": round(wall, 1),
            "journal_bytes_per_cycle_uncompacted": per_cycle,
            "journal_bytes_uncompacted_estimate": got[0].journal_bytes + (n - 1) * per_cycle,
            "journal_bytes_max": biggest,
            "journal_bytes_final": got[-1].journal_bytes,
            "compact_at_bytes": compact.COMPACT_AT,
            "read_cap_bytes": statedir.MAX_JOURNAL_BYTES,
            "backups_final": got[-1].backups,
            "window_cycles": w,
            "ensure_s_first": round(got[0].seconds, 4),
            "ensure_s_start_median": round(med(head, False), 4),
            "ensure_s_end_median": round(med(tail, False), 4),
            "ensure_wall_end_vs_start": round(wall_ratio, 3),
            "ensure_cpu_s_start_median": round(med(head, True), 4),
            "ensure_cpu_s_end_median": round(med(tail, True), 4),
            "ensure_end_vs_start": round(ratio, 3),
            "goal": {"journal_bytes_max": GOAL_BYTES, "ensure_end_vs_start": GOAL_RATIO},
            "met": {
                "journal": biggest < GOAL_BYTES,
                "ensure": ratio <= GOAL_RATIO,
            },
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def text(doc: dict[str, Any]) -> str:
    mark = {True: "met   ", False: "MISSED"}
    return "\n".join(
        [
            f"journal: {doc['cycles']:,} reinstall + ensure cycles on {doc['env']} "
            f"({', '.join(doc['specs'])}) in {doc['wall_s']} s",
            f"  [{mark[doc['met']['journal']]}] journal at most {doc['journal_bytes_max']:,} "
            f"bytes (target < {GOAL_BYTES:,}); uncompacted it would be "
            f"~{doc['journal_bytes_uncompacted_estimate']:,} "
            f"({doc['journal_bytes_per_cycle_uncompacted']:,} a cycle); "
            f"{doc['backups_final']} backup(s) at the end",
            f"  [{mark[doc['met']['ensure']]}] ensure CPU {doc['ensure_cpu_s_end_median']:.4f} s "
            f"at the end vs {doc['ensure_cpu_s_start_median']:.4f} s at the start: "
            f"{doc['ensure_end_vs_start']:.2f}x (target <= {GOAL_RATIO}x; medians of "
            f"{doc['window_cycles']} cycles); wall {doc['ensure_s_end_median']:.3f} s vs "
            f"{doc['ensure_s_start_median']:.3f} s ({doc['ensure_wall_end_vs_start']:.2f}x: "
            "other work on the machine moves it)",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.journal", description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=CYCLES)
    p.add_argument("--standin", action="store_true", help="the stand-in package, not vLLM")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    began = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {msg}", file=sys.stderr, flush=True)

    doc = measure(args.cycles, args.standin, log)
    print(json.dumps(doc, indent=2) if args.json else text(doc))
    return 0 if all(doc["met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
