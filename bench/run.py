"""vpatch vs `ssh host sed -i` vs ansible-core vs pyinfra, in one run on the same real sshd hosts.

    python -m bench.run                  # full: 1, 8, 32, 128 hosts, real vLLM import figure
    python -m bench.run --quick          # 2 hosts, 1 repetition, stand-in import (smoke test)

For each host count N, every repetition runs each contender once, in a fixed order (floor,
ansible, ansible-pipelining, pyinfra, vpatch apply + rollback, then again), with every host
reset to pip's pristine bytes before each run, so all runs do the same work. Medians are
reported. Above BIG_HOSTS (32) hosts the schedule is shorter, so `make bench` stays around ten
minutes on 2 cores: floor, ansible-pipelining, pyinfra and vpatch apply only (no ansible without
pipelining, no rollback), and one repetition unless --reps says otherwise.
Rows (all wall-clock seconds of the whole command, as a user would run it):
- floor               `ssh -F lab.ssh_config hN "sed -i ..."`, all N in parallel (xargs -P N)
- ansible             ansible-playbook, ansible.builtin.replace backup=yes, forks=N
- ansible-pipelining  the same with pipelining on
- pyinfra             pyinfra, files.replace backup=True, --parallel N (bench/pyinfra.py)
- vpatch-apply        `vpatch apply --level static --parallel N --json` (pristine check against
                      pip's RECORD, backup, atomic write, journal, .pyc refresh)
- vpatch-rollback     `vpatch rollback` right after it (restores the exact bytes)
- vpatch-apply-cold   vpatch-apply (smallest host count only) without the on-disk rewrite cache
                      (VPATCH_NO_CACHE=1): every run imports libcst and parses. The other vpatch
                      rows use a bench-owned cache dir, warm after the warm-up round, as a
                      controller that patched these contents before is (patcher/caches/rewrites.py)
- vpatch-startup      `vpatch --version`: interpreter start + imports, nothing else
- vpatch-check        `vpatch check SPEC`: start-up plus loading the spec, what an apply spends
                      before it contacts a host (the split of the 1-host apply uses it)
- vpatch-verify-import / bare-import  `vpatch verify --level import` vs
                      `ssh h python -I -c 'import MODULE'` on one host
Every run is checked (outside the clock): exit code, and the target file's bytes on every host
are exactly the expected edit (the same bytes for sed, ansible, pyinfra and vpatch) or pristine
again, and ansible's and pyinfra's backup files exist.
Columns besides wall time: `ctl CPU` is user+sys of the command's whole process tree here;
`hosts CPU` what every ssh session on the hosts used (bench/hostcpu.py). Controller and hosts
share this machine's cores, so (ctl + hosts) / cores is a lower bound of the wall time; on a
real fleet only the controller's share stays. The first host count gets one untimed warm-up
round (it writes .pyc caches: PYTHONDONTWRITEBYTECODE is dropped for every contender).
The controller-only row drives vpatch's real apply path for 10,000 simulated targets
in-process (bench/simulate.py): controller CPU and memory per target, no SSH. The journal row
runs 2,000 reinstall + `ensure` cycles on one real vLLM env (bench/journal.py): the journal's
size and `ensure`'s time at the end vs the start (compaction, patcher/agent/compact.py).
The scrape row reads a 100,000-series metrics scrape as the rollout does (bench/scrape.py):
parse, two endpoints joined, a window's per-series reduction; CPU seconds and peak RSS.
The verdicts row judges simulated canary windows by today's gate rule and the sequential one
(bench/verdicts.py): false failures, false passes and scrapes to a verdict, side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import journal as bench_journal
from bench import lab as labs
from bench import publish, simulate
from bench import rollout as bench_rollout
from bench import scrape as bench_scrape
from bench import verdicts as bench_verdicts
from bench import wheels as bench_wheels
from bench.ansible import Ansible
from bench.hostcpu import HostCpu
from bench.measured import vpatch_argv, vpatch_install
from bench.mux import Mux
from bench.pyinfra import Pyinfra
from bench.pyinfra import executable as pyinfra_executable
from bench.rttlab import RttLab
from bench.timing import Timed, child_env, summary, timed
from tests import envs
from tests import sshd as harness
from tests.support.standin_specs import SPEC_A

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results.json"
SIZES = (1, 8, 32, 128)
REPS = 3  # per row: `make bench` stays around 10 min on a busy 2-core machine
# Above this many hosts: one repetition (unless --reps), and only the rows that scale (floor,
# ansible-pipelining, pyinfra, vpatch apply): ansible without pipelining alone would cost
# minutes at 128 hosts on 2 cores, and rollback mirrors apply.
BIG_HOSTS = 32
BIG_REPS = 1
SIM_TARGETS = 10_000  # the controller-only row (bench/simulate.py)
QUICK_SIM_TARGETS = 1_000
JOURNAL_CYCLES = bench_journal.CYCLES  # the journal row (bench/journal.py): ~25 min on vLLM
QUICK_JOURNAL_CYCLES = 100
CHILD_TIMEOUT = 3 * 3600  # the controller-only, journal and authoring rows' child processes

# The edit every contender makes: add "kimi_k2", after "qwen", keeping the indentation.
SED = r's/^\( *\)"qwen",$/&\n\1"kimi_k2",/'
EDIT_RE = re.compile(r'^( *)"qwen",$', re.M)


class BenchError(RuntimeError):
    """A contender did not do the job (wrong exit code or wrong bytes): no figure is reported."""


def expected_text(pristine: str) -> str:
    return EDIT_RE.sub(r'\g<0>\n\g<1>"kimi_k2",', pristine, count=1)


@dataclass
class Row:
    name: str
    hosts: int
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)
    rtt_ms: float = 0.0
    # Figures the run's measure() took beside the clock (the RTT lab's round trips), added
    # with the run's own at its add().
    pending: dict[str, float] = field(default_factory=dict)

    def add(self, t: Timed, **extra: float) -> None:
        self.wall.append(t.wall)
        self.cpu.append(t.cpu)
        extra, self.pending = {**self.pending, **extra}, {}
        for k, v in extra.items():
            self.extra.setdefault(k, []).append(v)

    @property
    def median(self) -> float:
        return summary(self.wall)["median"]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hosts": self.hosts,
            "rtt_ms": self.rtt_ms,
            "runs": len(self.wall),
            "wall_s": {k: round(v, 4) for k, v in summary(self.wall).items()},
            "controller_cpu_s": {k: round(v, 4) for k, v in summary(self.cpu).items()},
            "samples_s": [round(v, 4) for v in self.wall],
            **{
                k: {"median": round(summary(v)["median"], 4), "samples": v}
                for k, v in self.extra.items()
            },
        }


def _fail(what: str, t: Timed, why: str) -> BenchError:
    tail = (t.err.strip() or t.out.strip())[-1500:]
    return BenchError(f"{what}: {why} (exit {t.code})\n{tail}")


class Bench:
    def __init__(
        self,
        work: Path,
        standin: labs.StandinLab,
        import_lab: harness.SshLab,
        import_kind: str,
        sizes: Sequence[int],
        default_kex: bool = False,
    ) -> None:
        self.work = work
        self.sizes = tuple(sizes)
        self.import_module = ""
        self.warming = False  # warm-up runs are checked like the others, but not recorded
        self.standin = standin
        self.import_lab = import_lab
        self.import_kind = import_kind
        self.vpatch = vpatch_argv()
        self.spec = work / "servekit-kimi.toml"
        self.spec.write_text(SPEC_A)
        self.pristine = standin.pristine_text()
        self.expected = expected_text(self.pristine)
        if self.expected == self.pristine:
            raise BenchError('the stand-in\'s config.py has no `"qwen",` line to edit')
        self.ansible = Ansible(
            work / "ansible", standin.lab, standin.remote_target, default_kex=default_kex
        )
        script = pyinfra_executable()
        self.pyinfra = (
            Pyinfra(work / "pyinfra", standin.lab, standin.remote_target, script)
            if script
            else None
        )
        self.rows: dict[tuple[str, int], Row] = {}
        self.parses: list[int] = []  # cold runs: what one apply costs in libcst parses
        self.warm_parses: list[int] = []
        self.cache_dir = work / "rewrite-cache"
        self.host_cpu = HostCpu([standin.lab, import_lab])
        self.mux = Mux(standin.lab, work)
        self.rtt: RttLab | None = None  # the stand-in hosts behind bench/delay.py
        self.trips: dict[str, float] = {}  # the last measure()'s round trips (per host)

    def measure(self, run: Callable[[], Timed], mux: bool = False) -> tuple[Timed, float]:
        """Run, and the CPU the hosts spent on it (read once every session is over). Over
        shared connections (`mux`): the hosts' live sshd processes counted too, and the CPU
        the masters spent added to the controller's (bench/mux.py)."""
        rtt = self.rtt
        if not mux:
            before = self.host_cpu.read()
            if rtt is not None:
                rtt.reset()
            t = run()
            self.trips = rtt.trips() if rtt is not None else {}
            return t, self.host_cpu.read() - before
        self.host_cpu.read()  # every earlier session over
        before, masters = self.host_cpu.read(live=True), self.mux.cpu()
        if rtt is not None:
            rtt.reset()
        t = run()
        self.trips = rtt.trips() if rtt is not None else {}
        time.sleep(0.2)  # the last sessions' processes reaped by their sshd
        spent = self.host_cpu.read(live=True) - before
        return dataclasses.replace(t, cpu=t.cpu + self.mux.cpu() - masters), spent

    def row(self, name: str, hosts: int) -> Row:
        rtt_ms = self.rtt.rtt_ms if self.rtt is not None else 0.0
        if self.warming:
            return Row(name, hosts, rtt_ms=rtt_ms)
        row = self.rows.setdefault((name, hosts), Row(name, hosts, rtt_ms=rtt_ms))
        row.pending, self.trips = self.trips, {}
        return row

    # -- checks (outside the clock) ------------------------------------------------------------

    def _files_are(self, hosts: Sequence[harness.SshHost], text: str, what: str, t: Timed) -> None:
        for h in hosts:
            got = self.standin.target(h).read_text()
            if got != text:
                state = "pristine" if got == self.pristine else "something else"
                raise _fail(what, t, f"{h.name}: target file is {state}, not the expected bytes")

    def _vpatch_doc(self, t: Timed, what: str, outcome: str, n: int) -> dict[str, Any]:
        if t.code != 0:
            raise _fail(what, t, "vpatch failed")
        doc: dict[str, Any] = json.loads(t.out)
        got = [p["outcome"] for h in doc["hosts"] for p in h["patches"]]
        if got != [outcome] * n:
            raise _fail(what, t, f"outcomes {got}, wanted {outcome} x {n}")
        return doc

    # -- contenders ----------------------------------------------------------------------------

    def floor(self, hosts: Sequence[harness.SshHost], mux: bool = False) -> None:
        name = "floor-mux" if mux else "floor"
        names = self.work / f"names-{len(hosts)}"
        names.write_text("".join(h.name + "\n" for h in hosts))
        remote = f"sed -i {shlex.quote(SED)} {shlex.quote(self.standin.remote_target)}"
        config = self.mux.config if mux else self.standin.lab.ssh_config
        ssh = ["ssh", "-F", str(config), "-T", "-n", "{}", "--", remote]
        xargs = ["xargs", "-a", str(names), "-P", str(len(hosts)), "-I{}", *ssh]
        if mux:
            self.mux.warm(hosts)
        try:
            t, cpu = self.measure(lambda: timed(xargs), mux=mux)
        finally:
            self.mux.close()  # no master outlives its row: the others count reaped sessions
        if t.code != 0:
            raise _fail(name, t, "ssh+sed failed")
        self._files_are(hosts, self.expected, name, t)
        self.row(name, len(hosts)).add(t, hosts_cpu_s=cpu)

    def ansible_run(self, hosts: Sequence[harness.SshHost], pipelining: bool) -> None:
        name = "ansible-pipelining" if pipelining else "ansible"
        t, cpu = self.measure(lambda: self.ansible.run(hosts, pipelining))
        if t.code != 0:
            raise _fail(name, t, "ansible-playbook failed")
        self._files_are(hosts, self.expected, name, t)
        for h in hosts:
            if not list((labs.site(h) / labs.PACKAGE_DIR).glob("config.py.*~")):
                raise _fail(name, t, f"{h.name}: no backup file")
        self.row(name, len(hosts)).add(t, hosts_cpu_s=cpu)

    def pyinfra_run(self, hosts: Sequence[harness.SshHost]) -> None:
        pyinfra = self.pyinfra
        if pyinfra is None:
            return
        t, cpu = self.measure(lambda: pyinfra.run(hosts))
        if t.code != 0:
            raise _fail("pyinfra", t, "pyinfra failed")
        self._files_are(hosts, self.expected, "pyinfra", t)
        for h in hosts:
            backups = list((labs.site(h) / labs.PACKAGE_DIR).glob("config.py.[0-9]*"))
            if [b.read_text() for b in backups] != [self.pristine]:
                raise _fail("pyinfra", t, f"{h.name}: not one backup with pip's bytes")
        self.row("pyinfra", len(hosts)).add(t, hosts_cpu_s=cpu)

    def _vpatch(
        self, command: str, inv: Path, n: int, *extra: str, cold: bool = False, mux: bool = False
    ) -> Timed:
        config = self.mux.config if mux else self.standin.lab.ssh_config
        argv = [*self.vpatch, command, str(self.spec), "--inventory", str(inv)]
        argv += ["--ssh-config", str(config), "--python", labs.PYTHON]
        argv += ["--parallel", str(n), "--json", *extra]
        env = child_env({"VPATCH_CACHE_DIR": str(self.cache_dir), "VPATCH_NO_CACHE": "1"})
        if not cold:
            del env["VPATCH_NO_CACHE"]
        return timed(argv, env=env, cwd=str(REPO))

    def vpatch_apply_mux(self, hosts: Sequence[harness.SshHost]) -> None:
        """`vpatch apply` over warm shared connections (bench/mux.py), rewrite cache warm."""
        n = len(hosts)
        inv = labs.write_inventory(self.work / f"hosts-{n}.toml", hosts)
        self.mux.warm(hosts)
        apply = lambda: self._vpatch("apply", inv, n, "--level", "static", mux=True)  # noqa: E731
        try:
            t, cpu = self.measure(apply, mux=True)
        finally:
            self.mux.close()
        self._vpatch_doc(t, "vpatch apply (shared connections)", "applied", n)
        self._files_are(hosts, self.expected, "vpatch apply (shared connections)", t)
        self.row("vpatch-apply-mux", n).add(t, hosts_cpu_s=cpu)

    def vpatch_apply_rollback(
        self, hosts: Sequence[harness.SshHost], cold: bool = False, rollback: bool = True
    ) -> None:
        n = len(hosts)
        inv = labs.write_inventory(self.work / f"hosts-{n}.toml", hosts)
        apply = lambda: self._vpatch("apply", inv, n, "--level", "static", cold=cold)  # noqa: E731
        primed = cold or any((self.cache_dir / "rewrites").glob("*.json"))
        t, cpu = self.measure(apply)
        doc = self._vpatch_doc(t, "vpatch apply", "applied", n)
        self._files_are(hosts, self.expected, "vpatch apply", t)
        for h in hosts:
            if not (h.home / "ml-env" / ".vpatch" / "journal.jsonl").exists():
                raise _fail("vpatch apply", t, f"{h.name}: no journal")
        parses = int(doc["stats"]["libcst_parses"])
        if not self.warming and primed:
            (self.parses if cold else self.warm_parses).append(parses)
        secs = [float(h["seconds"]) for h in doc["hosts"]]
        if cold:  # the rollback is the same with or without the cache: the next step resets
            self.row("vpatch-apply-cold", n).add(t, hosts_cpu_s=cpu, libcst_parses=parses)
            return
        self.row("vpatch-apply", n).add(
            t,
            hosts_cpu_s=cpu,
            libcst_parses=parses,
            host_seconds_max=max(secs),
            host_seconds_min=min(secs),
        )
        if not rollback:
            return
        t, cpu = self.measure(lambda: self._vpatch("rollback", inv, n))
        doc = self._vpatch_doc(t, "vpatch rollback", "rolled_back", n)
        self._files_are(hosts, self.pristine, "vpatch rollback", t)
        secs = [float(h["seconds"]) for h in doc["hosts"]]
        self.row("vpatch-rollback", n).add(t, hosts_cpu_s=cpu, host_seconds_max=max(secs))

    def startup(self) -> None:
        t = timed([*self.vpatch, "--version"], cwd=str(REPO))
        if t.code != 0:
            raise _fail("vpatch --version", t, "failed")
        self.row("vpatch-startup", 1).add(t)
        # What an apply spends before it contacts a host: start-up plus loading the spec.
        t = timed([*self.vpatch, "check", str(self.spec)], cwd=str(REPO))
        if t.code != 0:
            raise _fail("vpatch check", t, "failed")
        self.row("vpatch-check", 1).add(t)

    # -- the import figure ---------------------------------------------------------------------

    def import_setup(self) -> tuple[Path, Path, str]:
        """Patch the import host once (untimed), so verify finds the spec applied."""
        host = self.import_lab.hosts[0]
        inv = labs.write_inventory(self.work / "hosts-import.toml", [host])
        spec, module = (
            (labs.VLLM_SPEC, labs.VLLM_MODULE)
            if self.import_kind == "vllm"
            else (self.spec, f"{labs.PACKAGE_DIR}.config")
        )
        argv = [*self.vpatch, "apply", str(spec), "--inventory", str(inv)]
        argv += ["--ssh-config", str(self.import_lab.ssh_config), "--level", "static", "--json"]
        t = timed(argv, cwd=str(REPO))
        self._vpatch_doc(t, "vpatch apply (import host)", "applied", 1)
        return inv, spec, module

    def verify_import(self, inv: Path, spec: Path) -> None:
        argv = [*self.vpatch, "verify", str(spec), "--inventory", str(inv), "--ssh-config"]
        argv += [str(self.import_lab.ssh_config), "--level", "import", "--json"]
        t, cpu = self.measure(lambda: timed(argv, cwd=str(REPO)))
        doc = self._vpatch_doc(t, "vpatch verify --level import", "applied", 1)
        probes = doc["hosts"][0]["patches"][0]["probes"]
        if len(probes) != 1 or not probes[0]["ok"]:
            raise _fail("vpatch verify --level import", t, f"probes {probes}")
        self.row("vpatch-verify-import", 1).add(
            t,
            hosts_cpu_s=cpu,
            import_seconds_on_host=float(probes[0]["seconds"]),
            host_seconds=float(doc["hosts"][0]["seconds"]),
        )

    def bare_import(self, module: str) -> None:
        cmd = f"{labs.PYTHON} -I -c {shlex.quote('import ' + module)}"
        ssh = ["ssh", "-F", str(self.import_lab.ssh_config), "-T", "-n", "h1", "--", cmd]
        t, cpu = self.measure(lambda: timed(ssh))
        if t.code != 0:
            raise _fail("bare import", t, "import failed")
        self.row("bare-import", 1).add(t, hosts_cpu_s=cpu)


# ---------------------------------------------------------------------------------------------
# Schedule


def run_size(bench: Bench, n: int, reps: int, warmup: bool, log: Callable[[str], None]) -> None:
    hosts = bench.standin.hosts[:n]
    big = n > BIG_HOSTS
    steps: list[tuple[str, Callable[[], None]]] = [
        ("floor", lambda: bench.floor(hosts)),
        ("ansible", lambda: bench.ansible_run(hosts, pipelining=False)),
        ("ansible-pipelining", lambda: bench.ansible_run(hosts, pipelining=True)),
        ("pyinfra", lambda: bench.pyinfra_run(hosts)),
        ("vpatch", lambda: bench.vpatch_apply_rollback(hosts, rollback=not big)),
        ("floor-mux", lambda: bench.floor(hosts, mux=True)),
        ("vpatch-mux", lambda: bench.vpatch_apply_mux(hosts)),
    ]
    if big:
        steps = [s for s in steps if s[0] != "ansible"]
    if n == min(bench.sizes):
        steps.append(("vpatch-cold", lambda: bench.vpatch_apply_rollback(hosts, cold=True)))
    if warmup:  # first runs pay cold caches (.pyc, page cache, ansible's plugin loading)
        bench.warming = True
        for _, step in steps:
            bench.standin.reset(hosts)
            step()
        bench.warming = False
    for rep in range(reps):
        started = time.monotonic()
        for _, step in steps:
            bench.standin.reset(hosts)
            step()
        if n == min(bench.sizes):
            bench.startup()
        log(f"  {n:>3} hosts: repetition {rep + 1}/{reps} ({time.monotonic() - started:.1f} s)")
    bench.standin.reset(hosts)


def run_import(bench: Bench, reps: int, warmup: bool, log: Callable[[str], None]) -> None:
    inv, spec, module = bench.import_setup()
    bench.import_module = module
    if warmup:
        bench.warming = True
        bench.verify_import(inv, spec)
        bench.bare_import(module)
        bench.warming = False
    for rep in range(reps):
        started = time.monotonic()
        bench.verify_import(inv, spec)
        bench.bare_import(module)
        log(
            f"  import ({module}): repetition {rep + 1}/{reps} ({time.monotonic() - started:.1f} s)"
        )


# ---------------------------------------------------------------------------------------------
# Targets and output


def _median(bench: Bench, name: str, n: int) -> float:
    row = bench.rows.get((name, n))
    return row.median if row else float("nan")


def _paired(bench: Bench, a: tuple[str, int], b: tuple[str, int]) -> float | None:
    """Median of per-repetition ratios a_i / b_i: runs of one repetition are seconds apart, so
    this ratio is steadier than the ratio of medians when the machine's load drifts."""
    ra, rb = bench.rows.get(a), bench.rows.get(b)
    if ra is None or rb is None or not ra.wall or len(ra.wall) != len(rb.wall):
        return None
    return summary([x / y for x, y in zip(ra.wall, rb.wall, strict=True)])["median"]


def _cpu(bench: Bench, name: str, n: int) -> tuple[float, float]:
    """Median controller CPU and hosts CPU of a row (seconds)."""
    row = bench.rows.get((name, n))
    if row is None:
        return float("nan"), float("nan")
    return summary(row.cpu)["median"], summary(row.extra.get("hosts_cpu_s", []))["median"]


def _cpu_text(bench: Bench, name: str, n: int) -> str:
    """CPU spent, and the wall time it alone forces on this machine's cores."""
    ctl, hosts = _cpu(bench, name, n)
    cores = os.cpu_count() or 1
    return (
        f"{name} CPU {ctl:.2f} s controller + {hosts:.2f} s hosts = at least "
        f"{(ctl + hosts) / cores:.2f} s of wall on {cores} cores"
    )


def targets(bench: Bench) -> list[dict[str, Any]]:
    lo, hi = min(bench.sizes), max(bench.sizes)
    out: list[dict[str, Any]] = []

    def add(
        key: str,
        what: str,
        value: float | None,
        limit: float,
        le: bool,
        why: str,
        paired: float | None = None,
    ) -> None:
        """Judged on the ratio of medians; met is None when the run did not measure it."""
        met = None if value is None else bool(value <= limit if le else value >= limit)
        out.append(
            {
                "target": key,
                "what": what,
                "value": None if value is None else round(value, 3),
                "paired_ratio": None if paired is None else round(paired, 3),
                "limit": f"{'<=' if le else '>='} {limit}",
                "met": met,
                "measured": why,
            }
        )

    apply_lo, floor_lo = _median(bench, "vpatch-apply", lo), _median(bench, "floor", lo)
    startup = _median(bench, "vpatch-check", 1)
    host_lo = summary(bench.rows[("vpatch-apply", lo)].extra["host_seconds_max"])["median"]
    add(
        "apply_vs_floor",
        f"vpatch apply, {lo} host(s) / ssh+sed floor, {lo} host(s)",
        apply_lo / floor_lo,
        1.5,
        True,
        f"apply {apply_lo:.3f} s = start-up + spec load (`vpatch check`) {startup:.3f} s + "
        f"on-host engine "
        f"{host_lo:.3f} s + connect/close/report {apply_lo - startup - host_lo:.3f} s; "
        f"floor {floor_lo:.3f} s",
        _paired(bench, ("vpatch-apply", lo), ("floor", lo)),
    )
    if ("vpatch-rollback", lo) in bench.rows:
        back_lo = _median(bench, "vpatch-rollback", lo)
        add(
            "rollback_vs_floor",
            f"vpatch rollback, {lo} host(s) / ssh+sed floor, {lo} host(s)",
            back_lo / floor_lo,
            1.5,
            True,
            f"rollback {back_lo:.3f} s vs floor {floor_lo:.3f} s",
            _paired(bench, ("vpatch-rollback", lo), ("floor", lo)),
        )
    # The scale target was set for the full schedule (up to BIG_HOSTS); a larger size gets
    # its own line against the same limit.
    full = [n for n in bench.sizes if n <= BIG_HOSTS] or [hi]
    for key, top in [("scale", max(full)), ("scale_big", hi)][: 1 + (hi > max(full))]:
        apply_hi = _median(bench, "vpatch-apply", top)
        floor_hi = _median(bench, "floor", top)
        add(
            key,
            f"vpatch apply, {top} hosts / vpatch apply, {lo} host(s)",
            apply_hi / apply_lo if top > lo else None,
            1.5,
            True,
            f"apply {apply_hi:.3f} s vs {apply_lo:.3f} s; the floor itself scales "
            f"{floor_hi / floor_lo:.2f}x ({floor_hi:.3f} s vs {floor_lo:.3f} s) on "
            f"{os.cpu_count()} cores shared by controller and hosts; at {top} hosts: "
            f"{_cpu_text(bench, 'vpatch-apply', top)}"
            if top > lo
            else "not measured: this run used one host count",
        )
    # The goal is against ansible with pipelining, its fastest setting.
    with_ansible = [n for n in bench.sizes if ("ansible-pipelining", n) in bench.rows]
    if with_ansible:
        top = max([n for n in with_ansible if n <= BIG_HOSTS] or with_ansible)
        pipe_hi = _median(bench, "ansible-pipelining", top)
        apply_hi = _median(bench, "vpatch-apply", top)
        plain = (
            f"without pipelining {_median(bench, 'ansible', top) / apply_hi:.2f}x; "
            if ("ansible", top) in bench.rows
            else ""
        )
        add(
            "vs_ansible",
            f"ansible-core with pipelining, {top} hosts / vpatch apply, {top} hosts",
            pipe_hi / apply_hi,
            5.0,
            False,
            f"ansible (pipelining) {pipe_hi:.3f} s vs vpatch {apply_hi:.3f} s; {plain}"
            f"{_cpu_text(bench, 'ansible-pipelining', top)}; "
            f"{_cpu_text(bench, 'vpatch-apply', top)}",
            _paired(bench, ("ansible-pipelining", top), ("vpatch-apply", top)),
        )
    else:
        add("vs_ansible", "ansible-core / vpatch apply", None, 5.0, False, "not measured")
    with_pyinfra = [n for n in bench.sizes if ("pyinfra", n) in bench.rows and n <= BIG_HOSTS]
    if with_pyinfra:
        top = max(with_pyinfra)
        py_hi, apply_hi = _median(bench, "pyinfra", top), _median(bench, "vpatch-apply", top)
        add(
            "vs_pyinfra",
            f"pyinfra, {top} hosts / vpatch apply, {top} hosts (faster: > 1)",
            py_hi / apply_hi,
            1.0,
            False,
            f"pyinfra {py_hi:.3f} s vs vpatch {apply_hi:.3f} s; "
            f"{_cpu_text(bench, 'pyinfra', top)}; {_cpu_text(bench, 'vpatch-apply', top)}",
            _paired(bench, ("pyinfra", top), ("vpatch-apply", top)),
        )
    if ("vpatch-verify-import", 1) not in bench.rows:  # an RTT phase before the last
        return out
    ver, bare = _median(bench, "vpatch-verify-import", 1), _median(bench, "bare-import", 1)
    on_host = summary(bench.rows[("vpatch-verify-import", 1)].extra["import_seconds_on_host"])
    add(
        "verify_import",
        f"vpatch verify --level import / bare ssh python -I -c 'import {bench.import_module}'",
        ver / bare,
        1.1,
        True,
        f"verify {ver:.3f} s (import itself {on_host['median']:.3f} s on the host) vs bare "
        f"{bare:.3f} s: vpatch's own cost {ver - on_host['median']:.3f} s",
        _paired(bench, ("vpatch-verify-import", 1), ("bare-import", 1)),
    )
    distinct = 1  # every stand-in host has the same config.py
    worst = max(bench.parses) if bench.parses else -1
    out.append(
        {
            "target": "libcst_parses",
            "what": "libcst parses per apply run == distinct file contents (0 once cached)",
            "value": worst,
            "paired_ratio": None,
            "limit": f"== {distinct}",
            "met": bool(bench.parses)
            and all(p == distinct for p in bench.parses)
            and all(p == 0 for p in bench.warm_parses),
            "measured": f"parses per run without the disk cache: {sorted(set(bench.parses))} "
            f"over {len(bench.parses)} runs, {distinct} distinct content(s); with it: "
            f"{sorted(set(bench.warm_parses))} over {len(bench.warm_parses)} runs",
        }
    )
    return out


def table(bench: Bench, tgts: list[dict[str, Any]]) -> str:
    lines = [
        f"{'row':<22}{'hosts':>6}{'median s':>10}{'min':>8}{'max':>8}{'ctl CPU s':>11}"
        f"{'hosts CPU s':>13}{'x floor':>9}{'runs':>6}",
        "-" * 93,
    ]
    for (name, n), row in sorted(bench.rows.items(), key=lambda kv: (kv[0][1], _order(kv[0][0]))):
        s, c = summary(row.wall), summary(row.cpu)
        floor = _median(bench, "floor", n)
        ratio = f"{row.median / floor:.2f}" if (name, n) != ("floor", n) and floor == floor else ""
        if name in ("vpatch-startup", "vpatch-check", "vpatch-verify-import", "bare-import"):
            ratio = ""
        hc = row.extra.get("hosts_cpu_s")
        hosts_cpu = f"{summary(hc)['median']:.3f}" if hc else ""
        lines.append(
            f"{name:<22}{n:>6}{s['median']:>10.3f}{s['min']:>8.3f}{s['max']:>8.3f}"
            f"{c['median']:>11.3f}{hosts_cpu:>13}{ratio:>9}{len(row.wall):>6}"
        )
    lines += ["", "targets:"]
    for t in tgts:
        mark = {True: "met   ", False: "MISSED", None: "n/a   "}[t["met"]]
        paired = t.get("paired_ratio")
        also = f"; per-repetition pairs: {paired}" if paired is not None else ""
        lines.append(f"  [{mark}] {t['what']}: {t['value']} (target {t['limit']}{also})")
        lines.append(f"           {t['measured']}")
    return "\n".join(lines)


_ORDER = [
    "floor",
    "ansible",
    "ansible-pipelining",
    "pyinfra",
    "vpatch-apply",
    "vpatch-apply-cold",
    "vpatch-rollback",
    "floor-mux",
    "vpatch-apply-mux",
    "vpatch-startup",
    "vpatch-check",
    "vpatch-verify-import",
    "bare-import",
]


def _order(name: str) -> int:
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


def _sorted(rows: dict[tuple[str, int], Row]) -> list[tuple[tuple[str, int], Row]]:
    return sorted(rows.items(), key=lambda kv: (kv[0][1], _order(kv[0][0])))


def _proc_field(path: str, key: str) -> str:
    """The value of the first `key: value` (or `key=value`) line of a /proc or /etc file."""
    try:
        for line in Path(path).read_text().splitlines():
            name, sep, value = line.partition(":" if ":" in line else "=")
            if sep and name.strip() == key:
                return value.strip().strip('"')
    except OSError:
        pass
    return "?"


def machine() -> dict[str, Any]:
    ssh = subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr.strip()
    vp = subprocess.run([*vpatch_argv(), "--version"], capture_output=True, text=True)
    host_py = subprocess.run([envs.HOST_PYTHON, "-V"], capture_output=True, text=True)
    mem_kib = _proc_field("/proc/meminfo", "MemTotal").split()[0]
    return {
        "cpu_model": _proc_field("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem_kib) / 2**20, 1) if mem_kib.isdigit() else None,
        "os": _proc_field("/etc/os-release", "PRETTY_NAME"),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "controller_python": sys.version.split()[0],
        "host_python": f"{envs.HOST_PYTHON} ({host_py.stdout.strip() or '?'})",
        "openssh": ssh,
        "vpatch": f"{vp.stdout.strip()} ({vpatch_install()})",
    }


# ---------------------------------------------------------------------------------------------
# Main


def ensure_tools() -> None:
    """A fresh machine may lack sshd (and the ssh client): install them as .ci/run does."""
    if os.access(harness.SSHD, os.X_OK) and shutil.which("ssh") and shutil.which("xargs"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-q"]
    subprocess.run([*apt, "update"], check=True, capture_output=True, env=env)
    subprocess.run(
        [*apt, "install", "-y", "openssh-server", "openssh-client", "findutils"],
        check=True,
        capture_output=True,
        env=env,
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 hosts, 1 repetition, stand-in import")
    p.add_argument("--sizes", help="comma-separated host counts (default 1,8,32,128)")
    p.add_argument(
        "--reps",
        type=int,
        help=f"repetitions per row at every size (default {REPS}; {BIG_REPS} above {BIG_HOSTS} "
        "hosts)",
    )
    p.add_argument("--import-env", choices=["vllm", "standin"], help="default: vllm")
    p.add_argument(
        "--sim-targets",
        type=int,
        help=f"simulated targets of the controller-only row (default {SIM_TARGETS}, "
        f"--quick {QUICK_SIM_TARGETS}; 0: skip it)",
    )
    p.add_argument(
        "--journal-cycles",
        type=int,
        help=f"reinstall + ensure cycles of the journal row (default {JOURNAL_CYCLES} on vLLM, "
        f"--quick {QUICK_JOURNAL_CYCLES} on the stand-in; 0: skip it)",
    )
    p.add_argument(
        "--kex",
        choices=["lab", "default"],
        default="default",
        help="default: OpenSSH's own choice (post-quantum sntrup761x25519/mlkem768x25519, as "
        "real fleets negotiate) for the floor, ansible and vpatch (pyinfra's paramiko has no "
        "such kex); lab: curve25519-sha256, as the lab's ssh_config writes it",
    )
    p.add_argument(
        "--rtt",
        default="0",
        help="comma-separated round-trip times in ms (default 0: loopback); above 0 every "
        "stand-in host sits behind bench/delay.py's forwarder, RTT/2 each way, and rows "
        "count round trips per host",
    )
    p.add_argument(
        "--wheel-reps",
        type=int,
        help="repetitions of the capture cold/warm and `vpatch wheel` rows (bench/wheels.py; "
        "default 1: vLLM's wheel is 485 MiB, --quick: the stand-in; 0: skip them)",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="results JSON (bench/results.json)")
    p.add_argument("--keep", action="store_true", help="keep the lab dir (logs) afterwards")
    return p.parse_args(argv)


def _child_row(module: str, args: list[str], what: str, ok: tuple[int, ...] = (0,)) -> Any:
    """`python -m MODULE ARGS --json` in a child process (its memory, agent and caches its
    own), its JSON document. Up to CHILD_TIMEOUT: 2,000 journal cycles on vLLM take ~25 min,
    and timed()'s 300 s default once killed that row (exit -9)."""
    t = timed([sys.executable, "-m", module, *args, "--json"], cwd=str(REPO), timeout=CHILD_TIMEOUT)
    if t.code not in ok:
        raise _fail(what, t, f"{module} failed")
    return json.loads(t.out)


def simulate_row(n: int, traced: bool) -> dict[str, Any]:
    """bench/simulate.py: its memory figures are then its own, not this process's (which
    holds the lab and every row)."""
    args = ["--targets", str(n), *(["--tracemalloc"] if traced else [])]
    doc: dict[str, Any] = _child_row("bench.simulate", args, "controller-only simulation")
    return doc


def _count(given: int | None, default: int, quick_default: int, quick: bool) -> int:
    """A row's size: as given, else its --quick or its full default."""
    if given is not None:
        return given
    return quick_default if quick else default


def journal_row(cycles: int, standin: bool) -> dict[str, Any]:
    """bench/journal.py; exit 1 is a goal missed, which the row itself reports."""
    args = ["--cycles", str(cycles), *(["--standin"] if standin else [])]
    doc: dict[str, Any] = _child_row("bench.journal", args, "journal cycles", ok=(0, 1))
    return doc


def wheels_row(reps: int, standin: bool) -> dict[str, Any]:
    """bench/wheels.py: capture cold/warm and `vpatch wheel` (issue 28)."""
    args = ["--reps", str(reps), *(["--standin"] if standin else [])]
    doc: dict[str, Any] = _child_row("bench.wheels", args, "capture/wheel rows")
    return doc


def size_reps(n: int, reps: int, explicit: bool) -> int:
    """Repetitions at n hosts: --reps as given, else the default, capped above BIG_HOSTS."""
    return reps if explicit or n <= BIG_HOSTS else min(reps, BIG_REPS)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes: tuple[int, ...] = (2,) if args.quick else SIZES
    if args.sizes:
        sizes = tuple(sorted({int(s) for s in args.sizes.split(",")}))
        if not sizes or min(sizes) < 1:
            raise SystemExit("--sizes: host counts must be at least 1")
    reps = args.reps or (1 if args.quick else REPS)
    try:
        rtts = [float(r) for r in args.rtt.split(",")]
    except ValueError:
        raise SystemExit(f"--rtt {args.rtt}: want milliseconds, e.g. 0,2,30") from None
    if not rtts or min(rtts) < 0:
        raise SystemExit("--rtt: round-trip times are 0 or more")
    kind = args.import_env or ("standin" if args.quick else "vllm")
    warmup = not args.quick
    began = time.monotonic()
    load_before = os.getloadavg()  # other work on the machine moves every figure

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {msg}", file=sys.stderr, flush=True)

    ensure_tools()
    work = Path(tempfile.mkdtemp(prefix="vpatch-bench-"))
    standin_lab: labs.StandinLab | None = None
    import_lab: harness.SshLab | None = None
    try:
        log(f"starting {max(sizes)} stand-in hosts + 1 {kind} import host in {work}")
        standin_lab = labs.start_standin(max(sizes), work)
        import_lab = labs.start_import_host(work, kind)
        if args.kex == "default":
            labs.default_kex(standin_lab.lab)
            log("key exchange: OpenSSH's default (the lab's KexAlgorithms line taken out)")
        log("ansible-core venv (installed once, reused)")
        bench = Bench(work, standin_lab, import_lab, kind, sizes, args.kex == "default")
        if bench.pyinfra is None:
            log("pyinfra is not installed (pip install -e '.[bench]'): no pyinfra rows")
        if any(r > 0 for r in rtts):
            rtt = bench.rtt = RttLab(standin_lab.lab, work)
            bench.ansible.port_of = rtt.port
        phases: list[tuple[float, dict[tuple[str, int], Row], list[dict[str, Any]]]] = []
        for i, rtt_ms in enumerate(rtts):
            if bench.rtt is not None:
                bench.rtt.set(rtt_ms)
                log(f"RTT {rtt_ms:g} ms ({'loopback' if rtt_ms <= 0 else 'bench/delay.py'})")
            bench.rows = {}
            for n in sizes:
                # caches are the same for every size and RTT after this
                warm = warmup and n == sizes[0] and i == 0
                n_reps = size_reps(n, reps, explicit=args.reps is not None)
                short = " (short schedule: no ansible without pipelining, no rollback)"
                log(
                    f"{n} host(s): {n_reps} repetition(s){' after a warm-up' if warm else ''}"
                    f"{short if n > BIG_HOSTS else ''}"
                )
                run_size(bench, n, n_reps, warm, log)
            if i == len(rtts) - 1:
                log("import figure")
                run_import(bench, reps, warmup, log)
            phases.append((rtt_ms, bench.rows, targets(bench)))
        if bench.rtt is not None:
            bench.rtt.close()
        sim_targets = _count(args.sim_targets, SIM_TARGETS, QUICK_SIM_TARGETS, args.quick)
        sim = None
        if sim_targets:
            log(f"controller only: {sim_targets} simulated targets (bench/simulate.py)")
            sim = simulate_row(sim_targets, traced=not args.quick)
        cycles = _count(args.journal_cycles, JOURNAL_CYCLES, QUICK_JOURNAL_CYCLES, args.quick)
        kept = None
        if cycles:
            log(f"journal: {cycles} reinstall + ensure cycles (bench/journal.py)")
            kept = journal_row(cycles, standin=args.quick)
        wheel_reps = 1 if args.wheel_reps is None else args.wheel_reps
        authoring = None
        if wheel_reps:
            log(f"authoring: capture cold/warm, vpatch wheel x{wheel_reps} (bench/wheels.py)")
            authoring = wheels_row(wheel_reps, standin=args.quick)
        log("rollout: its cost beyond restart + health, 1 and 8 hosts (bench/rollout.py)")
        ro_sizes = [n for n in (1, 8) if n <= max(sizes)] or [1]
        rolled = bench_rollout.run(ro_sizes, reps, 1.0 if args.quick else bench_rollout.RESTART_S)
        log("scrape: parse + join + window of a 100,000-series scrape (bench/scrape.py)")
        scraped = bench_scrape.run(1 if args.quick else bench_scrape.REPS)
        runs = 200 if args.quick else bench_verdicts.RUNS
        log(f"verdicts: today's rule vs the sequential one, {runs} windows (bench/verdicts.py)")
        judged = bench_verdicts.run(runs)
        tgts = [{**t, "rtt_ms": r} for r, _, ts in phases for t in ts]
        all_rows = [row for _, rows, _ in phases for _, row in _sorted(rows)]
        elapsed = time.monotonic() - began
        doc = {
            "schema": 1,
            "quick": args.quick,
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "sizes": list(sizes),
            "reps": reps,
            "reps_by_size": {
                str(n): size_reps(n, reps, explicit=args.reps is not None) for n in sizes
            },
            "warmup": warmup,
            "import_env": kind,
            "import_module": bench.import_module,
            "elapsed_s": round(elapsed, 1),
            "machine": {
                **machine(),
                "load_avg_1_5_15": {
                    "start": [round(x, 2) for x in load_before],
                    "end": [round(x, 2) for x in os.getloadavg()],
                },
            },
            "settings": {
                "order": "per repetition: floor, ansible, ansible-pipelining, pyinfra, vpatch "
                "apply, vpatch rollback; every host reset to pip's bytes before each run; above "
                f"{BIG_HOSTS} hosts no ansible without pipelining and no rollback",
                "floor": f"xargs -P N ssh -F lab.ssh_config hN -- sed -i '{SED}' FILE",
                "vpatch": "apply SPEC --inventory --ssh-config --python --level static "
                "--parallel N --json; rollback SPEC likewise",
                "ssh_client": "OpenSSH, BatchMode, "
                + ("OpenSSH's default kex" if args.kex == "default" else "curve25519-sha256")
                + ", no ControlMaster",
                "kex": args.kex,
                "ansible": bench.ansible.settings(),
                "pyinfra": bench.pyinfra.settings()
                if bench.pyinfra
                else {"pyinfra": "not installed (the bench extra): no pyinfra rows"},
            },
            "rtt_ms": list(rtts),
            "rows": [r.as_json() for r in all_rows],
            "targets": tgts,
            "controller_only": sim,
            "journal": kept,
            "authoring": authoring,
            "rollout": rolled,
            "scrape": scraped,
            "verdicts": judged,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        for rtt_ms, rows, ts in phases:
            bench.rows = rows
            print(f"\nRTT {rtt_ms:g} ms:\n" + table(bench, ts))
        if sim is not None:
            print("\n" + simulate.text(sim))
        if kept is not None:
            print("\n" + bench_journal.text(kept))
        if authoring is not None:
            print("\n" + bench_wheels.text(authoring))
        print("\n" + bench_rollout.text(rolled))
        print("\n" + bench_scrape.text(scraped))
        print("\n" + bench_verdicts.text(judged))
        # Only the default schedule replaces the figures docs/scale.md publishes.
        default = not args.quick and args.sizes is None and args.reps is None
        default = default and args.kex == "default" and rtts == [0.0]
        default = default and kind == "vllm" and sim_targets == SIM_TARGETS
        written = publish.write(doc, args.out.with_suffix(".md"), docs=default)
        print(f"\nwrote {args.out}, {', '.join(map(str, written))} in {elapsed:.0f} s")
        return 0
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        for lab in (standin_lab.lab if standin_lab else None, import_lab):
            if lab is not None:
                lab.close(remove=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
