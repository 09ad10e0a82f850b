"""vpatch's controller alone, for many simulated targets: CPU and memory per target, no SSH.

    python -m bench.simulate --targets 10000          # table on stdout
    python -m bench.simulate --targets 10000 --json   # one JSON document

What runs is the real `vpatch apply SPEC --level static --parallel P --json` path, in this
process: `patcher.cli.run` parses the arguments, loads an inventory of N hosts, schedules them
with `patcher.run.fleet`, runs `engine.apply` per host (inspect, plan, rewrite through the cache,
commit) and renders the JSON document. Only the transport is replaced, by
`patcher.commands._targets.open_target` patched for the measured run (`patch.object`: nothing in
patcher/ changes), with `ReplayTransport`.

Where the answers come from, so they are an agent's and not made up here: first (outside the
measurement, in a child process so the measured controller starts with empty caches) the same
command runs against two REAL targets, one after the other, each a real venv with the stand-in
installed by pip (tests/standin.py) reached through `LocalTransport`, i.e. the real agent in a
subprocess, the env reset to pip's bytes between the two. Every request line it sent and the
answer line it got are recorded. The first target is what a cold controller asks (no file text
known yet), the second what it asks once it holds the text. Replay then answers each simulated
target's request with the recorded answer to the byte-identical request, the target's name put
where the agent wrote the host's; a request that was never recorded is an error, not a guess.
So protocol changes (new ops, fewer round trips) are followed without touching this file.

Measured: CPU (process time, all threads) of `cli.run` / N, and memory per target two ways:
the peak RSS growth of this process during the run / N (what the OS had to give), and, with
--tracemalloc (a second run: it slows Python down), the peak of traced allocations / N.
Requests are encoded and answers decoded per call as the real transports do (JSON lines), so
that cost is in; the SSH and process handling a real transport adds per host is not.

    python -m bench.simulate --targets 1000 --profile prof.out   # + cProfile, every thread

`--profile` runs the measured command under cProfile in every thread (the per-host work runs in
the fleet's thread pool), timed by each thread's own CPU clock, and writes the merged stats
(`python -m pstats prof.out`); the CPU figure of such a run is the profiler's, not vpatch's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from patcher import cli
from patcher.commands import _targets
from patcher.inventory.targets import Target
from patcher.transports.bundle import decode_answer, request_line
from patcher.transports.pipe import LocalTransport
from tests import standin
from tests.support.standin_specs import SPEC_A

GOAL_CPU_MS = 1.0  # per target (issue 30)
GOAL_KIB = 200.0  # per target
PARALLEL = 64  # --parallel of the measured run: threads in flight, as a big fleet would use
RECORDED = ("sim-cold", "sim-warm")
HOST_MARK = "@@VPATCH-SIM-HOST@@"


# ---------------------------------------------------------------------------------------------
# Recording: the real agent, on a real stand-in env


class RecordingTransport:
    """A LocalTransport that writes down every request line and answer it exchanged."""

    def __init__(self, inner: LocalTransport, log: list[dict[str, str]]) -> None:
        self.inner = inner
        self.target = inner.target
        self.log = log

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        answer = self.inner.call(request, timeout)
        self.log.append(
            {
                "target": self.target,
                "request": request_line(request).decode(),
                "answer": json.dumps(answer),
            }
        )
        return answer

    def close(self) -> None:
        self.inner.close()


def _hostname_of(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-I", "-c", "import socket; print(socket.gethostname())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def record(out: Path) -> None:
    """Apply the spec to RECORDED targets through the real agent; write the exchanges."""
    work = Path(tempfile.mkdtemp(prefix="vpatch-sim-record-"))
    try:
        python = standin.make_env(work / "env")
        site = next((work / "env" / "venv" / "lib").glob("python3*/site-packages"))
        pristine = work / "pristine"
        shutil.copytree(site / standin.PACKAGE, pristine)
        spec = work / "spec.toml"
        spec.write_text(SPEC_A)
        log: list[dict[str, str]] = []

        def open_real(target: Target, args: argparse.Namespace) -> RecordingTransport:
            # Each recorded target starts from pip's bytes with no vpatch state, as each
            # simulated one is assumed to (targets are opened one at a time: --parallel 1).
            shutil.rmtree(site / standin.PACKAGE)
            shutil.copytree(pristine, site / standin.PACKAGE)
            shutil.rmtree(work / "env" / "venv" / ".vpatch", ignore_errors=True)
            return RecordingTransport(LocalTransport(str(python), target=target.name), log)

        argv = ["apply", str(spec), "--python", str(python), "--level", "static", "--json"]
        argv += ["--parallel", "1"]
        for name in RECORDED:
            argv += ["--host", name]
        doc = _run_cli(argv, open_real)
        outcomes = [p["outcome"] for h in doc["hosts"] for p in h["patches"]]
        if outcomes != ["applied"] * len(RECORDED):
            raise SystemExit(f"recording: outcomes {outcomes}, wanted applied on each target")
        book = {
            "hostname": _hostname_of(python),
            "exchanges": log,
            "document": doc,
        }
        out.write_text(json.dumps(book))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_cli(argv: Sequence[str], opener: Any) -> dict[str, Any]:
    """`vpatch ARGV > FILE` through cli.run with `opener` as the transport factory; the JSON
    document it printed. Redirected at the descriptor (the report module holds sys.stdout
    itself), into a file, as a shell redirection would."""
    with tempfile.TemporaryFile() as out:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(out.fileno(), 1)
        try:
            with mock.patch.object(_targets, "open_target", opener):
                code = cli.run(list(argv))
            sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        doc: dict[str, Any] = json.loads(out.read())
    if code not in (0, 1):
        raise SystemExit(f"vpatch exited {code}")
    return doc


# ---------------------------------------------------------------------------------------------
# Replay


class Book:
    """Recorded answers, by the exact request line that got them, with the host's name masked."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.answers: dict[bytes, bytes] = {}
        self.ops: dict[str, list[str]] = {}  # per recorded target, its calls' ops in order
        for ex in doc["exchanges"]:
            req = ex["request"].encode()
            parsed = json.loads(ex["answer"])
            if parsed.get("host") == doc["hostname"]:  # inspect's host name: per target
                parsed["host"] = HOST_MARK
            answer = json.dumps(parsed)
            # The same request may recur (a second target asking what the first asked): the
            # agent answered it the same way both times, up to its pid and the host's name.
            self.answers.setdefault(req, answer.encode())
            self.ops.setdefault(ex["target"], []).append(json.loads(ex["request"])["op"])

    def answer(self, request: bytes, target: str) -> bytes:
        try:
            raw = self.answers[request]
        except KeyError:
            raise RuntimeError(
                f"{target}: the controller sent a request the real agent was never asked "
                f"({request[:200]!r}...): no faithful answer to replay"
            ) from None
        return raw.replace(HOST_MARK.encode(), json.dumps(target)[1:-1].encode())


class ReplayTransport:
    """patcher.transports.pipe.Transport for one simulated target: answers from the Book. Its calls
    per op are added to `totals` when it is closed (the CLI closes every transport it opens),
    so the measured run holds no reference to a finished target."""

    def __init__(self, target: str, book: Book, totals: Totals) -> None:
        self.target = target
        self.book = book
        self.totals = totals
        self.calls: dict[str, int] = {}

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        line = request_line(request)  # encoded as a real transport sends it
        op = str(request.get("op"))
        self.calls[op] = self.calls.get(op, 0) + 1
        return decode_answer(self.target, self.book.answer(line, self.target), b"", 0)

    def close(self) -> None:
        self.totals.add(self.calls)


class Totals:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops: dict[str, int] = {}
        self.closed = 0

    def add(self, calls: dict[str, int]) -> None:
        with self.lock:
            self.closed += 1
            for op, k in calls.items():
                self.ops[op] = self.ops.get(op, 0) + k


# ---------------------------------------------------------------------------------------------
# Measuring


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS: now, VmHWM: peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> int:
    """Start the peak-RSS count now (clear_refs 5 sets VmHWM to the current RSS), so what came
    before (imports, an earlier run) is not the run's peak; returns the RSS it starts from."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # no clear_refs: the peak is then since start, which only imported so far
        pass
    return _status_kib("VmRSS")


@dataclass
class Measured:
    targets: int
    parallel: int
    wall_s: float
    cpu_s: float
    rss_peak_growth_kib: int
    traced_peak_kib: float | None
    calls: int
    ops: dict[str, int]
    libcst_parses: int

    @property
    def cpu_ms_per_target(self) -> float:
        return 1000 * self.cpu_s / self.targets

    @property
    def kib_per_target(self) -> float:
        return self.rss_peak_growth_kib / self.targets

    def as_json(self) -> dict[str, Any]:
        traced = self.traced_peak_kib
        return {
            "targets": self.targets,
            "parallel": self.parallel,
            "wall_s": round(self.wall_s, 3),
            "controller_cpu_s": round(self.cpu_s, 3),
            "cpu_ms_per_target": round(self.cpu_ms_per_target, 4),
            "rss_peak_growth_kib": self.rss_peak_growth_kib,
            "rss_kib_per_target": round(self.kib_per_target, 2),
            "traced_peak_kib_per_target": None
            if traced is None
            else round(traced / self.targets, 2),
            "agent_calls": self.calls,
            "calls_by_op": self.ops,
            "libcst_parses": self.libcst_parses,
            "goal": {"cpu_ms_per_target": GOAL_CPU_MS, "kib_per_target": GOAL_KIB},
            "met": {
                "cpu": self.cpu_ms_per_target <= GOAL_CPU_MS,
                "memory": self.kib_per_target <= GOAL_KIB
                and (traced is None or traced / self.targets <= GOAL_KIB),
            },
        }


def _inventory(path: Path, n: int, python: str) -> Path:
    """hosts.toml with n hosts: the inventory loader is part of what a big run costs."""
    lines = [f"[defaults]\npython = '{python}'\n"]
    lines += [f"[[host]]\nname = 'sim-{i:05d}'\naddress = 'sim-{i:05d}'\n" for i in range(n)]
    path.write_text("\n".join(lines))
    return path


class _Profiled:
    """cProfile in every thread started while it is on, each timed by its thread's CPU clock
    (time.thread_time: a wall clock would count the GIL waits of 64 threads), merged."""

    def __init__(self) -> None:
        self.main = cProfile.Profile(time.thread_time)
        self.profiles: list[cProfile.Profile] = []  # the threads'
        self.run = threading.Thread.run

    def __enter__(self) -> _Profiled:
        profiles, run = self.profiles, self.run

        def profiled(thread: threading.Thread) -> None:
            prof = cProfile.Profile(time.thread_time)
            profiles.append(prof)
            prof.runcall(run, thread)

        threading.Thread.run = profiled  # type: ignore[method-assign]
        self.main.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        self.main.disable()
        threading.Thread.run = self.run  # type: ignore[method-assign]

    def dump(self, path: Path) -> None:
        stats = pstats.Stats(self.main)
        for prof in self.profiles:
            stats.add(prof)
        stats.dump_stats(str(path))


def measure(
    book: Book, n: int, parallel: int, work: Path, traced: bool, profile: Path | None = None
) -> Measured:
    spec = work / "spec.toml"
    spec.write_text(SPEC_A)
    inv = _inventory(work / f"hosts-{n}.toml", n, "/root/ml-env/bin/python")
    argv = ["apply", str(spec), "--inventory", str(inv), "--level", "static", "--json"]
    argv += ["--parallel", str(parallel)]
    totals = Totals()

    def open_replay(target: Target, args: argparse.Namespace) -> ReplayTransport:
        return ReplayTransport(target.name, book, totals)

    # The engine (and with it the planner, the spec models, pydantic) is imported before the
    # clock starts: the measurement is the run per target, not the controller's start-up.
    import patcher.run.engine  # noqa: F401

    if traced:
        tracemalloc.start()
    base_rss = _reset_peak()
    started, cpu0 = time.perf_counter(), time.process_time()
    if profile is None:
        doc = _run_cli(argv, open_replay)
    else:
        with _Profiled() as profiled:
            doc = _run_cli(argv, open_replay)
        profiled.dump(profile)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    growth = max(0, _status_kib("VmHWM") - base_rss)
    peak_traced = None
    if traced:
        peak_traced = tracemalloc.get_traced_memory()[1] / 1024
        tracemalloc.stop()
    outcomes = [p["outcome"] for h in doc["hosts"] for p in h["patches"]]
    if len(doc["hosts"]) != n or outcomes != ["applied"] * n or not doc["ok"]:
        bad = next((h for h in doc["hosts"] if not h["ok"]), doc["hosts"][:1])
        raise SystemExit(f"simulated run: not applied on every target: {bad}")
    if totals.closed != n:
        raise SystemExit(f"simulated run: {totals.closed} transports closed, not {n}")
    ops = dict(sorted(totals.ops.items()))
    return Measured(
        targets=n,
        parallel=parallel,
        wall_s=wall,
        cpu_s=cpu,
        rss_peak_growth_kib=growth,
        traced_peak_kib=peak_traced,
        calls=sum(ops.values()),
        ops=ops,
        libcst_parses=doc["stats"]["libcst_parses"],  # this run's (exchange.RunContext)
    )


def run(
    n: int,
    parallel: int = PARALLEL,
    traced: bool = False,
    log: Callable[[str], None] | None = None,
    profile: Path | None = None,
) -> dict[str, Any]:
    """Record (child process), then measure here; the JSON document of the measurement."""
    say = log or (lambda msg: None)
    work = Path(tempfile.mkdtemp(prefix="vpatch-sim-"))
    try:
        cache_dir = work / "rewrite-cache"
        book_path = work / "book.json"
        env = {**os.environ, "VPATCH_CACHE_DIR": str(cache_dir)}
        say("recording the real agent's answers on two stand-in targets (child process)")
        subprocess.run(
            [sys.executable, "-m", "bench.simulate", "--record", str(book_path)],
            check=True,
            env=env,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        book = Book(json.loads(book_path.read_text()))
        say(f"replaying for {n} simulated targets, --parallel {parallel}")
        # The recording's rewrite cache, warm as after any earlier run on these contents (the
        # vpatch-apply rows of bench/run.py run so too).
        with mock.patch.dict(os.environ, {"VPATCH_CACHE_DIR": str(cache_dir)}):
            doc = measure(book, n, parallel, work, traced=False, profile=profile).as_json()
            if traced:
                say("again under tracemalloc")
                t = measure(book, n, parallel, work, traced=True).as_json()
                doc["traced_peak_kib_per_target"] = t["traced_peak_kib_per_target"]
                doc["met"]["memory"] = doc["met"]["memory"] and t["met"]["memory"]
        doc["recorded_ops"] = book.ops
        return doc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def text(doc: dict[str, Any]) -> str:
    traced = doc.get("traced_peak_kib_per_target")
    return "\n".join(
        [
            f"vpatch apply --level static --parallel {doc['parallel']}, controller only, "
            f"{doc['targets']} simulated targets (replayed real agent answers)",
            f"  wall {doc['wall_s']:.2f} s, controller CPU {doc['controller_cpu_s']:.2f} s = "
            f"{doc['cpu_ms_per_target']:.3f} ms per target (goal <= {GOAL_CPU_MS} ms)",
            f"  peak RSS growth {doc['rss_peak_growth_kib'] / 1024:.1f} MiB = "
            f"{doc['rss_kib_per_target']:.1f} KiB per target (goal <= {GOAL_KIB:.0f} KiB)"
            + (f"; tracemalloc peak {traced:.1f} KiB per target" if traced is not None else ""),
            f"  {doc['agent_calls']} agent calls {doc['calls_by_op']}; per target as recorded: "
            + ", ".join(f"{k}: {' + '.join(v)}" for k, v in doc["recorded_ops"].items())
            + f"; {doc['libcst_parses']} libcst parses",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.split("\n")[0])
    p.add_argument("--targets", type=int, default=10_000)
    p.add_argument("--parallel", type=int, default=PARALLEL)
    p.add_argument("--tracemalloc", action="store_true", help="also a traced run (slower)")
    p.add_argument("--json", action="store_true", help="print the JSON document")
    p.add_argument("--profile", type=Path, help="write cProfile stats of every thread here")
    p.add_argument("--record", type=Path, help=argparse.SUPPRESS)  # the child's job
    args = p.parse_args(argv)
    if args.record:
        record(args.record)
        return 0

    def log(msg: str) -> None:
        print(f"simulate: {msg}", file=sys.stderr, flush=True)

    doc = run(args.targets, args.parallel, args.tracemalloc, log, args.profile)
    print(json.dumps(doc, indent=2) if args.json else text(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
