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
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

from patcher import fleet, rollout
from patcher.agent import protocol
from patcher.errors import HostError, UsageError, VpatchError
from patcher.result import HostResult, RunResult

if TYPE_CHECKING:
    from patcher.engine import Options, RunContext
    from patcher.inventory import Target
    from patcher.spec import PatchSpec
    from patcher.transport import Transport

HEALTH_CALL = 60.0  # seconds one health request may wait on the host; the controller repeats
RESTART_TIMEOUT = 600.0


def add_options(p: argparse.ArgumentParser) -> None:
    """rollout's own options (the target, fleet and apply options are cli's)."""
    g = p.add_argument_group("rollout")
    g.add_argument(
        "--restart",
        metavar="CMD",
        help="run on each target after its patch is written and verified, through `sh -c` as "
        "the agent's user (--sudo: root), e.g. 'systemctl restart vllm'; non-zero exit fails "
        "the host (an inventory host's `restart` wins)",
    )
    g.add_argument(
        "--restart-timeout", metavar="S", default="600", help="kill the restart after S s (600)"
    )
    g.add_argument(
        "--health",
        metavar="URL",
        help="polled ON the target after the restart until it answers 200, e.g. "
        "http://localhost:8000/health",
    )
    g.add_argument(
        "--health-timeout", metavar="S", default="900", help="give up on health after S s (900)"
    )
    g.add_argument(
        "--metrics",
        metavar="URL",
        help="Prometheus endpoint ON the target (vLLM's /metrics): scraped before the patch "
        "(baseline) and after the restart; the deltas are gated",
    )
    g.add_argument(
        "--window",
        metavar="S",
        default="120",
        help="seconds each measurement lasts, before and after (120); ends early at --min-drafts",
    )
    g.add_argument(
        "--min-drafts",
        metavar="N",
        default="100",
        help="end a measurement once N drafts were seen (100; 0: always the full window)",
    )
    g.add_argument(
        "--min-acceptance",
        metavar="RATE",
        help="gate: draft acceptance after the restart (0.4 or 40%%); overrides the spec's "
        "[metrics] min_acceptance_rate",
    )
    g.add_argument(
        "--min-throughput-ratio",
        metavar="R",
        help="gate: generation tokens/s after / before (e.g. 0.95); overrides the spec's "
        "[metrics] min_tokens_per_s_ratio",
    )
    g.add_argument(
        "--allow-no-traffic",
        action="store_true",
        help="a gate that cannot be computed (no drafts, no tokens in the window) passes "
        "instead of failing",
    )


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
    """What one host's rollout has learnt so far."""

    target: Target
    transport: Transport
    cfg: Settings
    specs: list[PatchSpec]
    opts: Options
    state_dir: str | None
    gates: rollout.Gates
    result: HostResult
    before: rollout.Measures | None = None
    after: rollout.Measures | None = None
    judged: list[rollout.Gate] = field(default_factory=list)
    ctx: RunContext | None = None  # the rollout's run (engine.RunContext)

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
    assert h.after is not None
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
    h.result.python = res.python or h.result.python
    h.result.warnings += [w for w in res.warnings if w not in h.result.warnings]
    h.result.notes += res.notes
    if which == "apply":
        h.result.restart_required = res.restart_required
    outcomes = ", ".join(f"{p.id} {p.outcome}" for p in res.patches)
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
        raise _StepFailed(f"`{cmd}` exited {res.get('exit')} after {took}: {last[:300]}")
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


def one_host(
    target: Target,
    transport: Transport,
    specs: list[PatchSpec],
    opts: Options,
    state_dir: str | None,
    cfg: Settings,
    ctx: RunContext | None = None,
) -> HostResult:
    """Walk the step machine on one host; every phase recorded with its times."""
    started = time.monotonic()
    host = HostResult(target=target.name)
    tables = [s.metrics for s in specs]
    gates = rollout.Gates.of(tables, cfg.min_acceptance, cfg.min_ratio, cfg.allow_no_traffic)
    h = _Host(target, transport, cfg, specs, opts, state_dir, gates, host, ctx=ctx)
    plan = rollout.Plan(metrics=bool(h.metrics), restart=bool(h.restart), health=bool(h.health))
    phases: list[rollout.Phase] = []
    done: list[tuple[str, bool]] = []
    while (step := rollout.next_step(plan, done)) is not None:
        at, t0 = _now(), time.monotonic()
        try:
            ok, detail = True, _STEPS[step](h)
        except _StepFailed as exc:
            ok, detail = False, str(exc)
        except VpatchError as exc:  # the connection or an agent call failed
            ok, detail = False, exc.message
        phases.append(rollout.Phase(step, ok, detail, at, round(time.monotonic() - t0, 3)))
        done.append((step, ok))
    reached, verdict = rollout.verdict(done)
    host.ok = verdict == rollout.KEPT
    if not host.ok:
        failed = [p for p in phases if not p.ok]
        host.error = f"{failed[0].step} failed: {failed[0].detail}"
        if len(failed) > 1:  # the way back failed too: what the host is left with
            host.error += f"; then {failed[-1].step} failed: {failed[-1].detail}"
        host.hint = _HINTS[verdict]
        if verdict == rollout.ROLLED_BACK:
            host.notes.append("rolled back, restarted and healthy again: the host serves as before")
    host.rollout = {
        "verdict": verdict,
        "reached": reached,
        "patched": verdict == rollout.KEPT,
        "restart": h.restart,
        "health": h.health,
        "metrics": h.metrics,
        "window": cfg.window,
        "min_drafts": cfg.min_drafts,
        "thresholds": gates.to_json(),
        "before": h.before.to_json() if h.before else None,
        "after": h.after.to_json() if h.after else None,
        "gates": [g.to_json() for g in h.judged],
        "phases": [asdict(p) for p in phases],
    }
    host.seconds = round(time.monotonic() - started, 3)
    return host


_HINTS = {
    rollout.ROLLED_BACK: "the patch does not serve well here: see the gates and phases",
    rollout.NOT_APPLIED: "apply failed and changed nothing: see the apply phase",
    rollout.UNTOUCHED: "nothing was changed: check the metrics endpoint (--metrics)",
    rollout.ATTENTION: "the way back failed too: check the host (`vpatch status`, the service)",
}


# ---------------------------------------------------------------------------------------------
# The fleet


class BatchLines(fleet.Progress):
    """One line on stderr per finished batch (the canary counts as one)."""

    def __init__(self, targets: Sequence[str], policy: fleet.Policy, out: TextIO) -> None:
        self.out = out
        self.phase_of: dict[str, int] = {}
        self.names: list[list[str]] = []
        order = list(targets)
        groups = [order[: policy.canary]] if policy.canary else []
        rest = order[policy.canary :]
        size = policy.batch or max(1, len(rest))
        groups += [rest[i : i + size] for i in range(0, len(rest), size)]
        for i, names in enumerate(groups):
            self.names.append(names)
            for n in names:
                self.phase_of[n] = i
        self.canary = bool(policy.canary)
        self.done: dict[int, list[HostResult]] = {}

    def advance(self, result: HostResult) -> None:
        i = self.phase_of.get(result.target)
        if i is None:
            return
        got = self.done.setdefault(i, [])
        got.append(result)
        if len(got) < len(self.names[i]):
            return
        label = "canary" if self.canary and i == 0 else f"batch {i + (0 if self.canary else 1)}"
        counts: dict[str, int] = {}
        for r in got:
            v = (r.rollout or {}).get("verdict", "failed")
            counts[v] = counts.get(v, 0) + 1
        tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        bad = [f"{r.target}: {r.error}" for r in got if not r.ok]
        line = f"rollout {label} ({len(got)} host(s)): {tally}"
        from patcher.inert import clean

        print(clean(line + "".join(f"\n  {b}" for b in bad)), file=self.out, flush=True)


def command(
    args: argparse.Namespace,
    targets: list[Target],
    policy: fleet.Policy,
    open_transport: Callable[[Target], Transport],
) -> int:
    """`vpatch rollout`: exit 0 when every host kept the patch, 1 otherwise (as apply)."""
    from patcher import catalog, engine

    cfg = settings(args)
    _check_targets(targets)
    specs = catalog.load_all(args.specs)
    opts = engine.Options(level=args.level, force=args.force)
    ctx = engine.RunContext()  # what the rollout's hosts share: texts, rewrites, answers

    def work(i: int) -> HostResult:
        t = targets[i]
        try:
            transport = open_transport(t)
        except HostError as exc:
            return engine.connect_error(t.name, exc)
        try:
            return one_host(t, transport, specs, opts, args.state_dir, cfg, ctx)
        finally:
            transport.close()

    names = [t.name for t in targets]
    lines = BatchLines(names, policy, sys.stderr) if not args.json else fleet.Progress()
    hosts = fleet.run(names, work, policy, [(s.id, s.package) for s in specs], lines)
    result = RunResult("rollout", all(h.ok for h in hosts), hosts)
    from patcher.report import emit, write_report

    if args.report:
        write_report(result, args.report)
    if args.json:
        emit(result.to_json())
    else:
        render_table(result, sys.stdout)
    if not result.ok:
        render_problems(result, sys.stderr)
    return 0 if result.ok else 1


def _pair(before: Any, after: Any, show: Callable[[float], str]) -> str:
    b = show(before) if before is not None else "-"
    a = show(after) if after is not None else "-"
    return f"{b} -> {a}"


def table_rows(result: RunResult) -> list[tuple[str, str, str, str, str]]:
    """host, step reached, acceptance before -> after, tokens/s before -> after, verdict."""
    rows = []
    for h in result.hosts:
        r = h.rollout
        if r is None:  # never started (the policy stopped first), or could not connect
            skipped = any(p.outcome == "skipped" for p in h.patches) or "skipped" in (h.error or "")
            rows.append((h.target, "-", "-", "-", "skipped" if skipped else "failed"))
            continue
        before, after = r["before"] or {}, r["after"] or {}
        rows.append(
            (
                h.target,
                r["reached"],
                _pair(before.get("acceptance_rate"), after.get("acceptance_rate"), rollout.pct),
                _pair(before.get("tokens_per_s"), after.get("tokens_per_s"), lambda x: f"{x:.1f}"),
                r["verdict"],
            )
        )
    return rows


def render_table(result: RunResult, out: TextIO) -> None:
    from patcher.inert import clean

    head = ("host", "step reached", "acceptance", "tokens/s", "verdict")
    rows = [head, *table_rows(result)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
        print(clean(line.rstrip()), file=out)
    kept = [h.target for h in result.hosts if h.rollout and h.rollout["verdict"] == rollout.KEPT]
    started = [h for h in result.hosts if h.rollout is not None]
    if result.ok:
        print(f"rollout: ok ({len(kept)} host(s) patched, restarted and checked)", file=out)
    else:
        print(
            f"rollout: not ok: {len(kept)} of {len(result.hosts)} host(s) patched"
            + (f" and staying patched ({', '.join(kept)})" if kept else "")
            + f"; {len(result.hosts) - len(started)} not started",
            file=out,
        )


def render_problems(result: RunResult, err: TextIO) -> None:
    """`error:` per host that did not keep the patch, then the first one's `hint:`."""
    from patcher.inert import clean

    found: list[tuple[str, str]] = []
    for h in result.hosts:
        if h.ok:
            continue
        if h.error:
            found.append((f"{h.target}: {h.error}", h.hint or "run `vpatch status` on it"))
        elif h.patches:
            p = h.patches[0]
            found.append(
                (
                    f"{h.target}: {p.outcome}: {p.message}",
                    "an earlier host failed and the fleet policy stopped; fix it, run again",
                )
            )
    for msg, _hint in found:
        print(f"error: {clean(msg.splitlines()[0])}", file=err)
    if found:
        print(f"hint: {clean(found[0][1])}", file=err)
