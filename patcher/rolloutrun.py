"""`vpatch rollout`: the executor. Per host it asks patcher.rollout which step is next, runs it
(a scrape, apply, the restart command, a health poll, rollback), and records the phase with
its times; the fleet policy (patcher.fleet: --canary, --batch, --max-fail, --parallel) decides
which hosts run at all. Every decision is in patcher.rollout; here is only I/O.

The restart command and the health and metrics requests run ON the target, through the agent
(patcher/agent/restart.py, patcher/agent/fetch.py): `localhost` is the serving host.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from patcher import fleet, monitor, rollout, rolloutresume
from patcher.agent import protocol
from patcher.errors import HostError, UsageError, VpatchError
from patcher.result import HostResult, RunResult

if TYPE_CHECKING:
    from patcher.engine import Options, RunContext
    from patcher.inventory import Target
    from patcher.spec import PatchSpec
    from patcher.transports import Transport

HEALTH_CALL = 60.0  # seconds one health request may wait on the host; the controller repeats
RESTART_TIMEOUT = 600.0


@dataclass(frozen=True)
class Settings:
    restart: str | None
    restart_timeout: float
    health: str | None
    health_timeout: float
    metrics: str | None
    window: float
    min_drafts: int
    min_acceptance: float | None
    min_ratio: float | None
    allow_no_traffic: bool


def settings(args: argparse.Namespace) -> Settings:
    """The rollout options, checked before any host is contacted (exit 2)."""
    from patcher import metrics

    rate = metrics.parse_rate(args.min_acceptance) if args.min_acceptance is not None else None
    ratio = (
        rollout.parse_ratio(args.min_throughput_ratio)
        if args.min_throughput_ratio is not None
        else None
    )
    return Settings(
        restart=args.restart if args.restart else None,
        restart_timeout=rollout.parse_seconds("--restart-timeout", args.restart_timeout, 86400),
        health=_url("--health", args.health) if args.health else None,
        health_timeout=rollout.parse_seconds("--health-timeout", args.health_timeout, 86400),
        metrics=metrics.check_url(args.metrics) if args.metrics else None,
        window=rollout.parse_seconds("--window", args.window, 86400),
        min_drafts=rollout.parse_drafts(args.min_drafts),
        min_acceptance=rate,
        min_ratio=ratio,
        allow_no_traffic=args.allow_no_traffic,
    )


def _url(flag: str, url: str) -> str:
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{flag} {url!r} is not an http:// or https:// URL",
            f"e.g. {flag} http://localhost:8000/health (fetched on each target host)",
        )
    return url


def _check_targets(targets: Sequence[Target]) -> None:
    """Per-host URLs from the inventory are checked like the flags, before any host is asked."""
    from patcher import metrics

    for t in targets:
        if t.health:
            _url("--health (inventory `health`)", t.health)
        if t.metrics:
            metrics.check_url(t.metrics)


# ---------------------------------------------------------------------------------------------
# One host


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Host:
    """What one host's rollout has learnt so far (read by a second Ctrl-C's report too)."""

    target: Target
    transport: Transport
    cfg: Settings
    specs: list[PatchSpec]
    opts: Options
    state_dir: str | None
    gates: rollout.Gates
    result: HostResult
    run: str = ""
    before: rollout.Measures | None = None
    after: rollout.Measures | None = None
    judged: list[rollout.Gate] = field(default_factory=list)
    phases: list[rollout.Phase] = field(default_factory=list)
    done: list[tuple[str, bool]] = field(default_factory=list)
    current: str | None = None  # the step running now
    window_end: rollout.Counters | None = None  # the window's last scrape (gates: since)
    started: float = field(default_factory=time.monotonic)
    ctx: RunContext | None = None  # the rollout's run (engine.RunContext)
    lock: threading.Lock = field(default_factory=threading.Lock)  # LiveReport reads it too

    @property
    def plan(self) -> rollout.Plan:
        return rollout.Plan(
            metrics=bool(self.metrics), restart=bool(self.restart), health=bool(self.health)
        )

    @property
    def restart(self) -> str | None:
        return self.target.restart or self.cfg.restart

    @property
    def health(self) -> str | None:
        return self.target.health or self.cfg.health

    @property
    def metrics(self) -> str | None:
        return self.target.metrics or self.cfg.metrics


def _scrape(h: _Host) -> tuple[rollout.Counters, float]:
    """One scrape on the host: its counters and the controller's monotonic time of it."""
    from patcher import metrics

    url = h.metrics
    assert url is not None
    got = metrics.scrape(h.transport, url)
    at = time.monotonic()
    if got.text is None:
        raise _StepFailed(f"cannot scrape {url}: {got.error}")
    try:
        return rollout.parse(got.text), at
    except ValueError:
        size = len(got.text.encode())
        raise _StepFailed(
            f"{url} did not serve Prometheus text ({size} bytes; body not shown)"
        ) from None


class _StepFailed(Exception):
    pass


def _measure(h: _Host, sleep: Callable[[float], None] = time.sleep) -> rollout.Measures:
    """Scrape, wait until the window closes (its length, or --min-drafts drafts), scrape."""
    start, t0 = _scrape(h)
    poll = max(0.2, min(5.0, h.cfg.window / 10))
    end, t1 = start, t0
    while not rollout.window_done(start, end, t1 - t0, h.cfg.window, h.cfg.min_drafts):
        sleep(min(poll, max(0.0, h.cfg.window - (time.monotonic() - t0))) or poll)
        end, t1 = _scrape(h)
    h.window_end = end
    return rollout.measure(start, end, t1 - t0)


def _describe(m: rollout.Measures) -> str:
    parts = [f"{m.seconds:.1f} s"]
    if m.acceptance_rate is not None:
        parts.append(f"acceptance {rollout.pct(m.acceptance_rate)} ({m.drafts:g} drafts)")
    if m.tokens_per_s is not None:
        parts.append(f"{m.tokens_per_s:.1f} tokens/s")
    parts += [f"{k}: {v}" for k, v in sorted(m.why.items())]
    return ", ".join(parts)


def _step_baseline(h: _Host) -> str:
    h.before = _measure(h)
    return _describe(h.before)


def _step_window(h: _Host) -> str:
    h.after = _measure(h)
    return _describe(h.after)


def _step_gates(h: _Host) -> str:
    """The gates, once the server measured is known to be still there: healthy (one try) and
    not restarted since the window closed (a crash right after its last scrape)."""
    assert h.after is not None
    if h.health:
        res = h.transport.call(protocol.health_request(h.health, 0.0), timeout=60)
        if not res.get("healthy"):
            why = res.get("error") or f"HTTP {res.get('status')}"
            raise _StepFailed(f"the server is not healthy after the window: {h.health}: {why}")
    if h.window_end is not None:
        now, _at = _scrape(h)
        if rollout.restarted_since(h.window_end, now):
            raise _StepFailed("the server restarted after the window (its counters went down)")
    h.judged = rollout.judge(h.before, h.after, h.gates)
    ok, detail = rollout.gates_detail(h.judged)
    if not ok:
        raise _StepFailed(detail)
    return detail


def _engine_step(h: _Host, which: str) -> str:
    from patcher import engine

    ctx = h.ctx if h.ctx is not None else engine.RunContext()
    res = engine.run(which, h.specs, h.transport, h.opts, ctx, state_dir=h.state_dir)
    h.result.patches = res.patches
    if res.python:
        h.result.python, h.result.python_path = res.python, res.python_path
        h.result.python_version = res.python_version
    h.result.warnings += [w for w in res.warnings if w not in h.result.warnings]
    h.result.notes += res.notes
    if which == "apply":
        h.result.restart_required = res.restart_required
    outcomes = ", ".join(f"{p.id} {p.outcome}" for p in res.patches)
    refused = monitor.baked_in_rollout(res.patches) if which == "apply" and res.ok else None
    if refused is not None:  # nothing written: the restart would only run the baked code
        raise _StepFailed(refused)
    if not res.ok:
        bad = res.error or next(
            (f"{p.id} {p.outcome}: {p.message}" for p in res.patches if p.message), outcomes
        )
        raise _StepFailed(bad)
    return outcomes


def _step_restart(h: _Host) -> str:
    cmd = h.restart
    assert cmd is not None
    t = h.cfg.restart_timeout
    res = h.transport.call(protocol.restart_request(cmd, t), timeout=t + 60)
    if not res.get("ok"):
        raise _StepFailed(f"agent refused the restart: {res.get('error')}")
    took = f"{float(res.get('seconds', 0)):.1f} s"
    if res.get("timed_out"):
        raise _StepFailed(f"`{cmd}` ran past {t:g} s (killed)")
    if res.get("exit") != 0:
        last = (str(res.get("stderr") or res.get("stdout") or "").strip().splitlines() or [""])[-1]
        said = f": {last[:300]}" if last else ""  # a silent command: no dangling colon
        raise _StepFailed(f"`{cmd}` exited {res.get('exit')} after {took}{said}")
    return f"`{cmd}` exited 0 after {took}"


def _step_health(h: _Host) -> str:
    url = h.health
    assert url is not None
    started = time.monotonic()
    deadline = started + h.cfg.health_timeout
    tries, last = 0, ""
    while True:
        wait = max(0.0, min(HEALTH_CALL, deadline - time.monotonic()))
        res = h.transport.call(protocol.health_request(url, wait), timeout=wait + 60)
        if not res.get("ok"):
            raise _StepFailed(f"agent refused the health check: {res.get('error')}")
        tries += int(res.get("tries", 1))
        took = time.monotonic() - started
        if res.get("healthy"):
            return f"{url} answered 200 after {took:.1f} s ({tries} tries)"
        last = str(res.get("error") or f"HTTP {res.get('status')}")
        if time.monotonic() >= deadline:
            raise _StepFailed(f"{url} not healthy after {took:.1f} s ({tries} tries): {last}")


_STEPS: dict[str, Callable[[_Host], str]] = {
    rollout.BASELINE: _step_baseline,
    rollout.APPLY: lambda h: _engine_step(h, "apply"),
    rollout.RESTART: _step_restart,
    rollout.HEALTH: _step_health,
    rollout.WINDOW: _step_window,
    rollout.GATES: _step_gates,
    rollout.ROLLBACK: lambda h: _engine_step(h, "rollback"),
    rollout.ROLLBACK_RESTART: _step_restart,
    rollout.ROLLBACK_HEALTH: _step_health,
}


def _host(
    target: Target,
    transport: Transport,
    specs: list[PatchSpec],
    opts: Options,
    state_dir: str | None,
    cfg: Settings,
    run: str,
    ctx: RunContext | None = None,
) -> _Host:
    tables = [s.metrics for s in specs]
    gates = rollout.Gates.of(tables, cfg.min_acceptance, cfg.min_ratio, cfg.allow_no_traffic)
    host = HostResult(target=target.name)
    return _Host(target, transport, cfg, specs, opts, state_dir, gates, host, run, ctx=ctx)


def one_host(
    target: Target,
    transport: Transport,
    specs: list[PatchSpec],
    opts: Options,
    state_dir: str | None,
    cfg: Settings,
    ctx: RunContext | None = None,
) -> HostResult:
    """One host's whole rollout, for a caller that is its own fleet policy: the Ansible
    collection's `patch` task, one host per task under the play's `serial`. The same steps,
    journal records and result as one host of `vpatch rollout`."""
    return walk(_host(target, transport, specs, opts, state_dir, cfg, new_run(), ctx))


def walk(
    h: _Host,
    ctrl_c: threading.Event | None = None,
    on_step: Callable[[_Host], None] | None = None,
) -> HostResult:
    """Walk the step machine on one host from where `h` is; every phase recorded with its
    times, here and (right after it ran) in the host's journal. After a Ctrl-C (`ctrl_c`)
    the host stops once its current step is done and recorded. `on_step(h)` is called as
    each step begins, every earlier one recorded (rolloutreport.LiveReport.write: the report on disk
    then says which step the host is in)."""
    plan = h.plan
    while (step := rollout.next_step(plan, h.done)) is not None:
        if ctrl_c is not None and ctrl_c.is_set():
            break
        with h.lock:
            h.current = step
        if on_step is not None:
            on_step(h)
        at, t0 = _now(), time.monotonic()
        try:
            ok, detail = True, _STEPS[step](h)
        except _StepFailed as exc:
            ok, detail = False, str(exc)
        except VpatchError as exc:  # the connection or an agent call failed
            ok, detail = False, exc.message
        phase = rollout.Phase(step, ok, detail, at, round(time.monotonic() - t0, 3))
        _record(h, phase, plan, [*h.done, (step, ok)])  # the journal first: a report never
        with h.lock:  # says a step is done that the host's journal does not have
            h.phases.append(phase)
            h.done.append((step, ok))
            h.current = None
    return finish(h)


def _record(
    h: _Host, phase: rollout.Phase, plan: rollout.Plan, done: list[tuple[str, bool]]
) -> None:
    """The step into the host's journal (protocol.step_entry); `done`: the walk with it. A
    host whose journal cannot take it goes on (the step itself ran); the warning says
    --resume cannot rely on it."""
    ended = rollout.next_step(plan, done) is None
    measures = {rollout.BASELINE: h.before, rollout.WINDOW: h.after}.get(phase.step)
    entry = protocol.step_entry(
        h.run,
        phase.step,
        phase.ok,
        [s.id for s in h.specs],
        phase.detail,
        phase.started,
        phase.seconds,
        rollout.verdict(done)[1] if ended else None,
        measures.to_json() if measures is not None and phase.ok else None,
    )
    why = ""
    try:
        res = h.transport.call(protocol.step_request(entry, h.state_dir), timeout=120)
        if not res.get("ok"):
            why = str(res.get("error"))
    except VpatchError as exc:
        why = exc.message
    if why:
        h.result.warnings.append(
            f"the {phase.step} step is not in the host's journal ({why}): --resume redoes it"
        )


def finish(h: _Host, note: str = "", running: bool = False) -> HostResult:
    """The host's result from its walk so far (whole, stopped by Ctrl-C, or refused); with
    `running`, as a report written while it runs shows it (rolloutreport). `h` is left as it
    is: a live report takes this many times."""
    host = replace(h.result, notes=list(h.result.notes), warnings=list(h.result.warnings))
    reached, verdict = rollout.outcome(h.plan, h.done)
    if note:
        verdict = rollout.ATTENTION
    host.ok = verdict == rollout.KEPT
    stopped = rollout.stopped(h.plan, h.done, h.current, running)
    if note:
        host.error = f"not resumed: {note}"
    elif verdict == rollout.INTERRUPTED:
        host.error = stopped
    elif not host.ok:
        failed = [p for p in h.phases if not p.ok]
        host.error = f"{failed[0].step} failed: {failed[0].detail}"
        if len(failed) > 1:  # the way back failed too: what the host is left with
            host.error += f"; then {failed[-1].step} failed: {failed[-1].detail}"
    if not host.ok:
        host.hint = _HINTS[verdict]
        if verdict == rollout.ROLLED_BACK:
            host.notes.append("rolled back, restarted and healthy again: the host serves as before")
    host.rollout = {
        "run": h.run,
        "verdict": verdict,
        "reached": reached,
        "stopped_in": h.current,
        "patched": verdict == rollout.KEPT,
        **options_of(h.target, h.cfg, h.gates),
        "before": h.before.to_json() if h.before else None,
        "after": h.after.to_json() if h.after else None,
        "gates": [g.to_json() for g in h.judged],
        "phases": [asdict(p) for p in h.phases],
    }
    host.seconds = round(time.monotonic() - h.started, 3)
    return host


def options_of(target: Target, cfg: Settings, gates: rollout.Gates) -> dict[str, Any]:
    """A host's rollout as the options made it: its restart, URLs, window, thresholds."""
    return {
        "restart": target.restart or cfg.restart,
        "health": target.health or cfg.health,
        "metrics": target.metrics or cfg.metrics,
        "window": cfg.window,
        "min_drafts": cfg.min_drafts,
        "thresholds": gates.to_json(),
    }


def new_run() -> str:
    import os

    return os.urandom(6).hex()


def resume_host(h: _Host, reported: list[tuple[str, bool]] | None) -> rolloutresume.Resume:
    """Read the host's journal steps and decide (rolloutresume.resume); on `continue`, `h` then
    holds the steps and measures its journal recorded, to walk on from."""
    ans = h.transport.call({"op": "inspect", "packages": {}, "state_dir": h.state_dir})
    if not ans.get("ok", True) and ans.get("error"):
        raise _StepFailed(f"cannot read the host's journal: {ans.get('error')}")
    steps, problems = rolloutresume.read_steps(ans.get("rollout"))
    h.result.warnings += problems
    decision = rolloutresume.resume(h.plan, h.run, reported, steps, [s.id for s in h.specs])
    mine = [s for s in steps if s.run == h.run]
    h.done = list(decision.done)
    h.phases = [s.phase() for s in mine]
    for s in mine:
        m = rolloutresume.measures_of(s.measures)
        if s.step == rollout.BASELINE:
            h.before = m
        elif s.step == rollout.WINDOW:
            h.after = m
    if decision.action == rolloutresume.RESUME_DONE and h.after is not None:
        h.judged = rollout.judge(h.before, h.after, h.gates)
    return decision


_HINTS = {
    rollout.INTERRUPTED: "`vpatch rollout` with the same arguments and --resume REPORT "
    "continues from the step the host's journal records",
    rollout.ROLLED_BACK: "the patch does not serve well here: see the gates and phases",
    rollout.NOT_APPLIED: "apply failed and changed nothing: see the apply phase",
    rollout.UNTOUCHED: "nothing was changed: check the metrics endpoint (--metrics)",
    rollout.ATTENTION: "the way back failed, or the report and the host disagree: check the "
    "host (`vpatch status`, the service)",
}


# ---------------------------------------------------------------------------------------------
# The fleet


def command(
    args: argparse.Namespace,
    targets: list[Target],
    policy: fleet.Policy,
    open_transport: Callable[[Target], Transport],
) -> int:
    """`vpatch rollout`: exit 0 when every host kept the patch, 1 otherwise (as apply); 130
    after a second Ctrl-C, whose report has every host as far as it got."""
    from patcher import catalog, engine

    cfg = settings(args)
    _check_targets(targets)
    names = [t.name for t in targets]
    from patcher import rolloutreport

    reported = rolloutreport.load_report(args.resume, names) if args.resume else None
    run = (reported.run if reported else None) or new_run()
    specs = catalog.load_all(args.specs)
    opts = engine.Options(level=args.level, force=args.force)
    ctrl_c = threading.Event()
    ctx = engine.RunContext()  # what the rollout's hosts share: texts, rewrites, answers
    ctx.hosts.defer = True  # the hosts' answers are written once, at the end (factcache)
    ids = [(s.id, s.package) for s in specs]
    path = args.report or rolloutreport.default_report(run)
    report = rolloutreport.LiveReport(path, targets, specs, cfg, run)
    report.write(start=True)  # before any host is contacted; UsageError: exit 2
    if not args.report:
        print(f"note: rollout {run}: report (written as it goes): {path}", file=sys.stderr)

    def work(i: int) -> HostResult:
        t = targets[i]
        try:
            transport = open_transport(t)
        except HostError as exc:
            return report.ended(i, engine.connect_error(t.name, exc))
        try:
            h = _host(t, transport, specs, opts, args.state_dir, cfg, run, ctx)
            report.live[i] = h
            if reported is not None:
                try:
                    decision = resume_host(h, reported.steps.get(t.name))
                except (VpatchError, _StepFailed) as exc:
                    decision = rolloutresume.Resume(rolloutresume.RESUME_REFUSE, (), str(exc))
                if decision.action != rolloutresume.RESUME_CONTINUE:
                    return report.ended(i, finish(h, decision.why))
            return report.ended(i, walk(h, ctrl_c, report.step))
        finally:
            transport.close()

    from patcher.rolloutview import BatchLines, render_problems, render_table

    lines = BatchLines(names, policy, sys.stderr) if not args.json else fleet.Progress()
    code = None
    try:
        hosts = fleet.run(names, work, policy, ids, lines, interrupted=ctrl_c)
    except KeyboardInterrupt:  # the second Ctrl-C: report every host as far as it got
        code = 130
        hosts = report.hosts("interrupted (Ctrl-C twice): not started")
    if threading.current_thread() is threading.main_thread():
        import signal  # a Ctrl-C from here on must not cost the report

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx.flush()
    result = RunResult("rollout", all(h.ok for h in hosts), hosts)
    from patcher.report import emit

    report.close(result)
    if args.json:
        emit(result.to_json())
    else:
        render_table(result, sys.stdout)
    if not result.ok:
        render_problems(result, sys.stderr)
    if ctrl_c.is_set() or code is not None:
        print(
            f"note: rollout {run} stopped by Ctrl-C; report: {path}; the same command with "
            f"--resume {path} continues it",
            file=sys.stderr,
        )
    if code is not None:
        return code
    return 0 if result.ok else 1
