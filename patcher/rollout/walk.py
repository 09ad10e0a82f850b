"""`vpatch rollout`: the executor. Per host it asks patcher.rollout.decide which step is next, runs
it
(a scrape, apply, the restart command, a health poll, rollback), and records the phase with
its times; the fleet policy (patcher.run.fleet: --canary, --batch, --max-fail, --parallel) decides
which hosts run at all. Every decision is in patcher.rollout.decide; here is only I/O.

The restart command and the health and metrics requests run ON the target, through the agent
(patcher/agent/restart.py, patcher/agent/fetch.py): `localhost` is the serving host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from patcher.agent import protocol
from patcher.errors import AgentError, VpatchError
from patcher.plan import monitor
from patcher.result import HostResult, take_run
from patcher.rollout import canary, decide, settings, steer
from patcher.rollout.lease import Lease, Lost, ttl_for
from patcher.rollout.settings import Settings
from patcher.serving.gates import Gates, pct
from patcher.serving.judging import Gate, judge
from patcher.serving.measures import Measures, measure_series
from patcher.serving.model import Counters

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.plan.base import Options
    from patcher.rollout.steering import HostSteer
    from patcher.run.exchange import RunContext
    from patcher.specs.model import PatchSpec
    from patcher.transports import Transport

# Seconds one health request may wait on the host; the controller repeats, and reads the
# steering channel between two calls (an abort ends a forward health wait within one call).
HEALTH_CALL = 10.0
RESTART_TIMEOUT = 600.0
JOURNAL_CALL = 120.0  # seconds a journal step may take

# What to check when the agent refuses a step's request and its error kind names nothing
# (protocol.HINTS has no words for `input`: a bad URL, an empty command).
RESTART_HINT = (
    "the restart runs on the host through the agent (`sh -c`, as its user): check --restart "
    "or the inventory host's `restart`"
)
HEALTH_HINT = "check --health or the inventory host's `health`: a URL the agent GETs on the host"
JOURNAL_HINT = "run `vpatch status` on the host: its state dir and journal"


# ---------------------------------------------------------------------------------------------
# One host


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Host:
    """What one host's rollout has learnt so far (read by a second Ctrl-C's report too)."""

    target: Target
    transport: Transport
    cfg: Settings
    specs: list[PatchSpec]
    opts: Options
    state_dir: str | None
    gates: Gates
    result: HostResult
    run: str = ""
    before: Measures | None = None
    after: Measures | None = None
    judged: list[Gate] = field(default_factory=list)
    phases: list[decide.Phase] = field(default_factory=list)
    done: list[tuple[str, bool]] = field(default_factory=list)
    current: str | None = None  # the step running now
    window_end: Counters | None = None  # the window's last scrape (gates: since)
    controls: canary.Controls | None = None  # --control: scraped in the same windows
    control_after: Measures | None = None  # the control hosts' after-window
    started: float = field(default_factory=time.monotonic)
    ctx: RunContext | None = None  # the rollout's run (exchange.RunContext)
    lock: threading.Lock = field(default_factory=threading.Lock)  # LiveReport reads it too
    lease: Lease | None = None  # the host's rollout lease, once taken
    lost: str = ""  # why the lease is not ours any more (the walk stopped there)
    hint: str = ""  # the first hint a failed step's error gave (an AgentError's kind's words)
    missed: str = ""  # the last window's note on engines that missed some of its scrapes
    undecided: bool = False  # the gates failed for want of evidence only (NOT_ENOUGH_EVIDENCE)
    changed: str = ""  # what --resume found changed on the host since its last step
    # A container target: its restart (`podman restart C`) runs on the container's host, by
    # an agent there this opens (driver.py); None: the restart runs where the agent runs.
    restart_on: Callable[[], Transport] | None = None
    steer: HostSteer | None = None  # the run's steering, as this host took it (steering.py)
    # each scrape of a window after its first: (host, the window so far): the live view's
    # evidence (patcher.rollout.stream.Stream.seen)
    seen: Callable[[Host, canary.SoFar], None] | None = None
    scrapes: int = 0  # the after-window's scrapes after its first: the look that decided

    @property
    def plan(self) -> decide.Plan:
        return decide.Plan(
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


def _scrape(h: Host, missed: list[str] | None = None) -> tuple[Counters, float]:
    """One scrape on the host (every endpoint it has, summed): its counters and the
    controller's monotonic time of it. `missed`: inside a window, an engine that does not
    answer is noted there instead of failing the step (canary.scrape)."""
    try:
        urls = settings.urls(h.metrics)
        return canary.scrape(h.transport, urls, h.cfg.profile, h.ctx, missed)
    except canary.ScrapeFailed as exc:
        raise _StepFailed(str(exc)) from None


class _StepFailed(Exception):
    pass


def _measure(h: Host, sleep: Callable[[float], None] = time.sleep, after: bool = False) -> Measures:
    """Scrape every --scrape-every until the window closes (its length, or --min-drafts
    drafts); the after-window (`after`) scrapes the control hosts at each tick too, and goes
    on while a gate's evidence is short, up to --max-window (canary.extend decides)."""
    cfg = h.cfg
    series = [_scrape(h)]  # every engine answers the window's first scrape
    missed: list[str] = []
    ctrl = h.controls if after else None
    cseries = [ctrl.scrape(cfg)] if ctrl is not None else []
    now = canary.SoFar(h.before, h.gates, _window, series, cseries if ctrl is not None else None)
    t0 = series[0][1]
    poll = cfg.scrape_every or max(0.2, min(5.0, cfg.window / 10))
    longest = max(cfg.window, cfg.max_window or 0.0)
    least = cfg.least_after if after else cfg.window  # the sequential rule's: may be none
    while True:
        if h.steer is not None and h.steer.look(decide.WINDOW if after else decide.BASELINE, after):
            break  # promoted: the window ends at this look (an abort raises: the step fails)
        (start, _), (end, t1) = series[0], series[-1]
        if len(series) > 1 and decide.window_done(start, end, t1 - t0, least, cfg.min_drafts):
            if not after or not canary.extend(h.gates, now.judged):
                break
            if t1 - t0 >= longest:
                break
        limit = longest if t1 - t0 >= least else least
        sleep(min(poll, max(0.0, limit - (time.monotonic() - t0))) or poll)
        _beat(h, decide.WINDOW, force=False)
        series.append(_scrape(h, missed))
        if ctrl is not None:
            cseries.append(ctrl.scrape(cfg))
        now = canary.SoFar(
            h.before, h.gates, _window, series, cseries if ctrl is not None else None
        )
        if h.seen is not None:
            h.seen(h, now)
    h.window_end = series[-1][0]
    h.missed = _missed_note(missed, len(series) - 1)
    if after:
        h.scrapes = len(series) - 1
    if ctrl is not None:
        h.control_after = now.control
    return now.after


def _missed_note(missed: list[str], scrapes: int) -> str:
    """What the window's detail says of engines that did not answer some of its scrapes."""
    if not missed:
        return ""
    counts: dict[str, int] = {}
    for what in missed:
        counts[what] = counts.get(what, 0) + 1
    said = ", ".join(f"{what} in {n} of {scrapes}" for what, n in counts.items())
    return (
        f"; an engine did not answer some scrapes (restarting?): {said}; its series counted "
        "what they counted before it went and, back lower, from zero"
    )


def _window(series: list[tuple[Counters, float]]) -> Measures:
    """A window's measures from its scrapes, (counters, time) in order."""
    return measure_series([(t, c) for c, t in series])


def _describe(m: Measures) -> str:
    parts = [f"{m.seconds:.1f} s"]
    if m.acceptance_rate is not None:
        parts.append(f"acceptance {pct(m.acceptance_rate)} ({m.drafts:g} drafts)")
    if m.tokens_per_s is not None:
        parts.append(f"{m.tokens_per_s:.1f} tokens/s")
    parts += canary.describe_latency(m)
    parts += [f"{k}: {v}" for k, v in sorted(m.why.items())]
    return ", ".join(parts)


def _step_baseline(h: Host) -> str:
    """Plan first, measure after: apply's plan (a dry run: inspect and plan, nothing
    written) must say the patch can go on before a window is spent measuring the server
    (a hand-edited file, `modified`, was refused only after it)."""
    try:
        _engine_step(h, "plan")
    except _StepFailed as exc:
        raise _StepFailed(f"apply would refuse it (nothing measured or written): {exc}") from None
    h.before = _measure(h)
    return _describe(h.before) + h.missed


def _step_window(h: Host) -> str:
    h.after = _measure(h, after=True)
    if h.control_after is not None:
        return f"{_describe(h.after)}{h.missed}; control: {_describe(h.control_after)}"
    return _describe(h.after) + h.missed


def _step_gates(h: Host) -> str:
    """The gates, once the server measured is known to be still there: healthy (one try) and
    not restarted since the window closed (a crash right after its last scrape)."""
    assert h.after is not None
    if h.health:
        res = _ask(h, protocol.health_request(h.health, 0.0), 60, "the health check", HEALTH_HINT)
        if not res.get("healthy"):
            why = res.get("error") or f"HTTP {res.get('status')}"
            raise _StepFailed(f"the server is not healthy after the window: {h.health}: {why}")
    if h.window_end is not None:
        now, _at = _scrape(h)
        if decide.restarted_since(h.window_end, now):
            raise _StepFailed("the server restarted after the window (its counters went down)")
    h.judged = decide.settle(judge(h.before, h.after, h.gates, h.control_after))
    ok, detail = decide.gates_outcome(h.judged)
    if h.gates.confidence is not None and h.scrapes:
        word = "undecided" if not ok and decide.undecided(h.judged) else "decided"
        detail += f" ({word} after {h.scrapes} scrapes, {h.gates.rule} rule)"
    if h.steer is not None and h.steer.promoted is not None:  # kept on its owner's word
        return steer.promoted_gates(h.steer.promoted, ok, detail)
    if not ok:
        h.undecided = decide.undecided(h.judged)
        raise _StepFailed(detail)
    return detail


def _engine_step(h: Host, which: str) -> str:
    """apply, rollback, or `plan`: apply's dry run (the baseline's first look)."""
    from patcher.run import engine, exchange

    ctx = h.ctx if h.ctx is not None else exchange.RunContext()
    if h.lease is not None:  # its commits are the lease holder's (agent/lease.py)
        ctx.lease = h.run
    opts = replace(h.opts, dry_run=True) if which == "plan" else h.opts
    step = engine.rollback if which == "rollback" else engine.apply
    res = step(h.specs, h.transport, opts, h.state_dir, ctx=ctx)
    take_run(h.result, res, restarts=which == "apply")
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


def _step_restart(h: Host) -> str:
    cmd = h.restart
    assert cmd is not None
    t = h.cfg.restart_timeout
    request = protocol.restart_request(cmd, t)
    if h.restart_on is not None:  # a container's engine runs on its host
        res = _restart_on_host(h, request, t + 60)
    else:
        res = _ask(h, request, t + 60, "the restart", RESTART_HINT)
    took = f"{float(res.get('seconds', 0)):.1f} s"
    if res.get("timed_out"):
        raise _StepFailed(f"`{cmd}` ran past {t:g} s (killed)")
    if res.get("exit") != 0:
        last = (str(res.get("stderr") or res.get("stdout") or "").strip().splitlines() or [""])[-1]
        said = f": {last[:300]}" if last else ""  # a silent command: no dangling colon
        raise _StepFailed(f"`{cmd}` exited {res.get('exit')} after {took}{said}")
    _still_stale(h)
    return f"`{cmd}` exited 0 after {took}"


def _still_stale(h: Host) -> None:
    """restart_required as the restart left it: apply's list named the servers that ran the
    old code when it wrote, and the restart replaced them; asked again (the patched files,
    agent/holders.py), it names only processes that hold the old code now. A warning, never
    a step's failure: where the agent refuses the question, the list stays as it was."""
    paths = sorted({f.path for p in h.result.patches for f in p.files})
    if not paths:
        return
    try:
        res = _ask(h, protocol.procs_request(paths), JOURNAL_CALL, "the scan", JOURNAL_HINT)
    except AgentError:
        return
    h.result.restart_required = list(res.get("restart_required") or [])


def _step_health(h: Host) -> str:
    """GET the URL on the host until it answers 200 or --health-timeout passed, the calls
    paced by patcher.rollout.healthpoll (never faster than its INTERVAL, at the deadline too); the
    tries reported are the agent's own count of its requests. Before each call the run's
    abort is looked for (HostSteer.during): a forward wait ends there, a way back's goes on."""
    from patcher.rollout import healthpoll

    url = h.health
    assert url is not None
    started = time.monotonic()
    deadline = started + h.cfg.health_timeout
    tries, last, returned = 0, "", None
    while True:
        call = healthpoll.next_call(
            time.monotonic(), deadline, returned, healthpoll.INTERVAL, HEALTH_CALL
        )
        if call is None:  # no try fits any more: the wait ends at its deadline, as asked
            time.sleep(max(0.0, deadline - time.monotonic()))
            took = time.monotonic() - started
            raise _StepFailed(f"{url} not healthy after {took:.1f} s ({tries} tries): {last}")
        pause, wait = call
        if pause > 0:
            time.sleep(pause)
        if h.steer is not None:
            h.steer.during(h.current or decide.HEALTH)
        _beat(h, decide.HEALTH, force=False)
        request = protocol.health_request(url, wait, healthpoll.INTERVAL)
        res = _ask(h, request, wait + 60, "the health check", HEALTH_HINT)
        returned = time.monotonic()
        tries += int(res.get("tries", 1))
        if res.get("healthy"):
            return f"{url} answered 200 after {returned - started:.1f} s ({tries} tries)"
        last = str(res.get("error") or f"HTTP {res.get('status')}")


def _ask(h: Host, request: dict[str, Any], timeout: float, what: str, hint: str) -> dict[str, Any]:
    """One agent request of a step, through the run's exchange (patcher.run.exchange.call:
    counted in the rollout's stats, shown by -v); an error answer is an AgentError saying
    "agent refused `what`", with its kind's hint or `hint`."""
    from patcher.run import exchange

    return exchange.call(
        h.transport, request, h.ctx, timeout=timeout, refused=f"agent refused {what}", hint=hint
    )


def _restart_on_host(h: Host, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """A container's restart, by an agent on the container's host (its engine is there, not
    in the container). The container's own exec session is ended first: the restart ends it
    anyway, and the next call then starts a fresh one in the restarted container."""
    from patcher.run import exchange

    assert h.restart_on is not None
    h.transport.close()
    via = h.restart_on()
    try:
        return exchange.call(
            via, request, h.ctx, timeout=timeout, refused="agent refused the restart",
            hint=RESTART_HINT,
        )  # fmt: skip
    finally:
        via.close()


def _beat(h: Host, step: str, force: bool = True) -> None:
    """The host's lease beaten for `step` (rolloutlease.ttl_for); without `force`, only when
    a beat is due (the short calls of a window or a health wait). Lost propagates."""
    if h.lease is not None:
        h.lease.beat(ttl_for(step, h.cfg, HEALTH_CALL), force)


_STEPS: dict[str, Callable[[Host], str]] = {
    decide.BASELINE: _step_baseline,
    decide.APPLY: lambda h: _engine_step(h, "apply"),
    decide.RESTART: _step_restart,
    decide.HEALTH: _step_health,
    decide.WINDOW: _step_window,
    decide.GATES: _step_gates,
    decide.ROLLBACK: lambda h: _engine_step(h, "rollback"),
    decide.ROLLBACK_RESTART: _step_restart,
    decide.ROLLBACK_HEALTH: _step_health,
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
) -> Host:
    tables = [s.metrics for s in specs]
    gates = settings.gates_of(tables, cfg)
    host = HostResult(target=target.name)
    return Host(target, transport, cfg, specs, opts, state_dir, gates, host, run, ctx=ctx)


def first_step(h: Host) -> str:
    """The step the host's walk begins with (its next one, on --resume)."""
    return decide.next_step(h.plan, h.done) or decide.BASELINE


def walk(
    h: Host,
    ctrl_c: threading.Event | None = None,
    on_step: Callable[[Host], None] | None = None,
) -> HostResult:
    """Walk the step machine on one host from where `h` is; every phase recorded with its
    times, here and (right after it ran) in the host's journal. After a Ctrl-C (`ctrl_c`)
    the host stops once its current step is done and recorded. `on_step(h)` is called as
    each step begins, every earlier one recorded (rolloutreport.LiveReport.write: the report on disk
    then says which step the host is in)."""
    plan = h.plan
    while (step := decide.next_step(plan, h.done)) is not None:
        if ctrl_c is not None and ctrl_c.is_set():
            break
        with h.lock:
            h.current = step
        if on_step is not None:
            on_step(h)
        at, t0 = _now(), time.monotonic()
        try:
            _beat(h, step)
            aborted = h.steer.before(step) if h.steer is not None else ""
            ok, detail = (False, aborted) if aborted else (True, _STEPS[step](h))
        except Lost as exc:  # another controller holds the host now: hands off
            with h.lock:
                h.lost = str(exc)
            break
        except _StepFailed as exc:
            ok, detail = False, str(exc)
        except VpatchError as exc:  # the connection or an agent call failed
            ok, detail = False, exc.message
            with h.lock:
                h.hint = h.hint or exc.hint  # the first one given: what to check first
        phase = decide.Phase(step, ok, detail, at, round(time.monotonic() - t0, 3))
        _record(h, phase, plan, [*h.done, (step, ok)])  # the journal first: a report never
        with h.lock:  # says a step is done that the host's journal does not have
            h.phases.append(phase)
            h.done.append((step, ok))
            h.current = None
    return finish(h)


def _record(h: Host, phase: decide.Phase, plan: decide.Plan, done: list[tuple[str, bool]]) -> None:
    """The step into the host's journal (protocol.step_entry); `done`: the walk with it. A
    host whose journal cannot take it goes on (the step itself ran); the warning says
    --resume cannot rely on it."""
    ended = decide.next_step(plan, done) is None
    measures = {decide.BASELINE: h.before, decide.WINDOW: h.after}.get(phase.step)
    release = h.lease.release() if ended and h.lease is not None else None
    entry = protocol.step_entry(
        run=h.run,
        step=phase.step,
        ok=phase.ok,
        specs=[s.id for s in h.specs],
        detail=phase.detail,
        started=phase.started,
        seconds=phase.seconds,
        verdict=steer.verdict(decide.verdict(done, h.undecided)[1], _steered(h)) if ended else None,
        measures=measures.to_json(series=False) if measures is not None and phase.ok else None,
    )
    if h.undecided and phase.step == decide.GATES:
        entry["undecided"] = True  # the verdict's word: not_enough_evidence (protocol.step_entry)
    why = ""
    try:
        request = protocol.step_request(entry, h.state_dir, release)
        _journal(h, request, "", JOURNAL_CALL)
    except VpatchError as exc:
        why = exc.message
    if why:
        h.result.warnings.append(
            f"the {phase.step} step is not in the host's journal ({why}): --resume redoes it"
        )


def _journal(
    h: Host, request: dict[str, Any], refused: str, timeout: float | None
) -> dict[str, Any]:
    """A request to the host's journal (a step recorded, its steps read back), through the
    run's exchange as a step's are (`_ask`); `refused` "": the agent's error alone."""
    from patcher.run import exchange

    return exchange.call(
        h.transport, request, h.ctx, timeout=timeout, refused=refused, hint=JOURNAL_HINT
    )


def finish(h: Host, note: str = "", running: bool = False) -> HostResult:
    """The host's result from its walk so far (whole, stopped by Ctrl-C, or refused); with
    `running`, as a report written while it runs shows it (rolloutreport). `h` is left as it
    is: a live report takes this many times."""
    host = replace(h.result, notes=list(h.result.notes), warnings=list(h.result.warnings))
    reached, verdict = decide.outcome(h.plan, h.done, h.undecided)
    verdict = steer.verdict(verdict, _steered(h))
    if h.lost and not note:
        note = h.lost
    if note:
        verdict = decide.ATTENTION
    elif h.changed:
        verdict = decide.CHANGED_SINCE
    host.ok = verdict in decide.PATCHED
    host.error = _error_of(h, verdict, note, running) or host.error
    if not host.ok:
        from patcher.rollout.view import hint_of

        host.hint = "; ".join(filter(None, [h.hint, hint_of(verdict, h.judged, h.cfg)]))
        if verdict in (decide.ROLLED_BACK, decide.NOT_ENOUGH_EVIDENCE):
            host.notes.append("rolled back, restarted and healthy again: the host serves as before")
    host.rollout = {
        "run": h.run,
        "verdict": verdict,
        "reached": reached,
        "stopped_in": h.current,
        "patched": verdict in decide.PATCHED,
        **settings.report_options(h.target, h.cfg, h.gates),
        "before": h.before.to_json() if h.before else None,
        "after": h.after.to_json() if h.after else None,
        **canary.report_of(h.control_after, h.controls),
        "gates": [g.to_json() for g in h.judged],
        "decided_after_scrapes": h.scrapes or None,
        "phases": [asdict(p) for p in h.phases],
        "steers": list(h.steer.effects) if h.steer is not None else [],
    }
    host.seconds = round(time.monotonic() - h.started, 3)
    return host


def _steered(h: Host) -> str:
    """The steer verb that changed the host's walk ("" none): its verdict's word."""
    return h.steer.steered if h.steer is not None else ""


def _error_of(h: Host, verdict: str, note: str, running: bool) -> str | None:
    """The host's `error` line for its verdict (None: it kept the patch, no line)."""
    if h.lost:
        return f"stopped: {h.lost}; this controller touches the host no more"
    if note:
        return f"not resumed: {note}"
    if h.changed:
        last = h.done[-1][0] if h.done else "first"
        return f"changed since its {last} step: {h.changed}; nothing was judged or run"
    if verdict == decide.INTERRUPTED:
        return decide.stopped(h.plan, h.done, h.current, running)
    if verdict in decide.PATCHED:
        return None
    failed = [p for p in h.phases if not p.ok]
    error = f"{failed[0].step} failed: {failed[0].detail}"
    if len(failed) > 1:  # the way back failed too: what the host is left with
        error += f"; then {failed[-1].step} failed: {failed[-1].detail}"
    return error


def lease_of(h: Host) -> Lease:
    """The host's rollout lease for this run and its specs (not taken yet): a session
    transport beats it inside the agent's session, any other by one call a beat."""
    from patcher.transports.base import SessionTransport

    return Lease(
        h.transport,
        h.run,
        [s.id for s in h.specs],
        h.state_dir,
        session=isinstance(h.transport, SessionTransport),
        ctx=h.ctx,
    )


def new_run() -> str:
    import os

    return os.urandom(6).hex()


# ---------------------------------------------------------------------------------------------
# The fleet
