"""`vpatch rollout` over the fleet: each target's walk (patcher.rollout.walk) under the fleet
policy (patcher.run.fleet), the live report written as it goes (patcher.rollout.report), and
`--resume`'s decision per host. It returns what happened and prints nothing: the command
(patcher.commands.rollout) says it and chooses the exit status.

The module sits above walk and report, which never import it, so the rollout has no circle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patcher.errors import HostError, VpatchError
from patcher.output.progress import HostsProgress
from patcher.result import HostResult, RunResult
from patcher.rollout import recheck, settings, stream, walk
from patcher.rollout.lease import HINT, Refused, ttl_for
from patcher.rollout.report import LiveReport, default_report, load_report
from patcher.rollout.resume import RESUME_CHANGED, RESUME_CONTINUE, RESUME_REFUSE, Resume
from patcher.rollout.settings import Settings
from patcher.rollout.stream import Sink
from patcher.run import fleet

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.plan.base import Level, Options
    from patcher.rollout.canary import Controls
    from patcher.run.exchange import RunContext
    from patcher.specs.model import PatchSpec
    from patcher.transports import Transport


@dataclass(frozen=True, kw_only=True)
class Request:
    """One rollout as asked: the specs (paths or catalog ids), apply's level and --force, the
    state dir, the report path (None: the default one), the report to resume, the options,
    and who gets the run's events besides the stream beside the report (patcher.rollout.
    stream: `--events`, the live view)."""

    specs: list[str]
    level: Level
    force: bool
    state_dir: str | None
    report: str | None
    resume: str | None
    settings: Settings
    sinks: Sequence[Sink] = ()  # who else gets the run's events (REPORT.events always does)


@dataclass(frozen=True)
class Outcome:
    """What a rollout did: its result, its run id and report path, whether a Ctrl-C stopped it
    (`interrupted`) and whether a second one cut it short (`cut_short`: hosts in flight were
    reported as far as they got)."""

    result: RunResult
    run: str
    report: str
    interrupted: bool
    cut_short: bool


def drive(
    request: Request,
    targets: list[Target],
    policy: fleet.Policy,
    open_transport: Callable[[Target], Transport],
    lines: Callable[[list[str]], HostsProgress],
    started: Callable[[str, str], None],
    *,
    kind_of: Callable[[Target], str | None] = lambda t: None,
) -> Outcome:
    """Roll the specs out over `targets` (the last `--control K` of them only scraped, as
    control hosts: patcher.rollout.canary). `started(run, report)` is called once the report exists,
    before any host is contacted; `lines(names)` shows the canaries' batches as they go;
    `kind_of(target)`: the transport kind that reaches it, which its result names."""
    from patcher.plan.base import Options
    from patcher.rollout import canary
    from patcher.run import engine
    from patcher.run.exchange import RunContext
    from patcher.specs import catalog

    cfg = request.settings
    settings.check_targets(targets, cfg.restart)
    targets, controls = canary.controls_of(targets, cfg, open_transport)  # UsageError: exit 2
    names = [t.name for t in targets]
    reported = load_report(request.resume, names) if request.resume else None
    run = (reported.run if reported else None) or walk.new_run()
    specs = catalog.load_all(request.specs)
    opts = Options(level=request.level, force=request.force)
    ctrl_c = threading.Event()
    ctx = RunContext()  # what the rollout's hosts share: texts, rewrites, answers
    ctx.hosts.defer = True  # the hosts' answers are written once, at the end (factcache)
    if controls is not None:  # their scrapes are the run's exchanges too
        controls.ctx = ctx
    path = request.report or default_report(run)
    live = LiveReport(path, targets, specs, cfg, run)
    ids = live.ids  # (spec id, package) of each spec
    steer = live.start(resume=reported is not None)  # before any host; UsageError: exit 2
    started(run, path)  # the report's path said first: the stream's start follows
    report = stream.Told(live, stream.open_stream(path, run, cfg, names, request.sinks))
    steer.tell = report.steered  # a steer taken is an event from now on

    def work(i: int) -> HostResult:
        t = targets[i]
        held = steer.hold(ctrl_c, lambda pause: report.held(i, pause))
        if held.stop is not None or held.interrupted:  # aborted (or Ctrl-C) while it waited
            return report.ended(i, live.not_started(i, held.stop))
        try:
            transport = open_transport(t)
        except HostError as exc:
            failed = engine.connect_error(t.name, exc)
            failed.transport = kind_of(t)
            return report.ended(i, failed)
        try:
            h = walk._host(t, transport, specs, opts, request.state_dir, cfg, run, ctx)
            _wire(h, kind_of(t), controls, open_transport)
            report.begin(i, h)
            if reported is not None:
                ended = _resumed(h, reported.steps.get(t.name))
                if ended is not None:
                    return report.ended(i, ended)
            h.steer = steer.host(held, walk.first_step(h), run, [s.id for s in specs], _note(h))
            h.steer.name = t.name
            return report.ended(i, leased_walk(h, reported is not None, ctrl_c, report.step))
        finally:
            transport.close()

    cut_short = False
    try:
        hosts = fleet.run(names, work, policy, ids, lines(names), interrupted=ctrl_c)
    except KeyboardInterrupt:  # the second Ctrl-C: report every host as far as it got
        cut_short = True
        hosts = report.hosts("interrupted (Ctrl-C twice): not started")
    steer.channel.close()  # `end`: a steer of the run is refused from here on
    _ignore_ctrl_c()  # from here on, a Ctrl-C must not cost the report
    ctx.flush()
    hosts = canary.closed(controls, hosts, ids)  # the control hosts' lines at the end
    result = RunResult("rollout", all(h.ok for h in hosts), hosts, ctx.stats())
    report.close(result)
    return Outcome(result, run, path, ctrl_c.is_set() or cut_short, cut_short)


def _wire(
    h: walk.Host,
    kind: str | None,
    controls: Controls | None,
    open_transport: Callable[[Target], Transport],
) -> None:
    """What a host's walk takes from the run: its transport's kind (its result names it), the
    control hosts, and for a container the opener of an agent on its host, where its engine
    restarts it."""
    h.result.transport, h.controls = kind, controls
    t = h.target
    if t.container is not None:
        h.restart_on = lambda: open_transport(engine_host(t))


def engine_host(t: Target) -> Target:
    """The host a container runs on, as a target of its own: the same address, login and
    sudo, its system `python3` (what runs the container's restart: `podman restart C`)."""
    return t._replace(container=None, container_user=None, transport=None, python="python3")


def _note(h: walk.Host) -> Callable[[dict[str, Any]], None]:
    """How a steer's note reaches the host's journal: one rollout_step request, as a step's
    record does; one that cannot be sent is a warning (the report still names the steer)."""
    from patcher.agent import protocol

    def send(entry: dict[str, Any]) -> None:
        try:
            request = protocol.step_request(entry, h.state_dir)
            walk._journal(h, request, "", walk.JOURNAL_CALL)
        except VpatchError as exc:
            h.result.warnings.append(f"a steer is not in the host's journal ({exc.message})")

    return send


def _ignore_ctrl_c() -> None:
    if threading.current_thread() is threading.main_thread():
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _resumed(h: walk.Host, said: list[tuple[str, bool]] | None) -> HostResult | None:
    """--resume on one host (recheck.resume_host): None when its walk goes on, else its
    result: done, changed since (journaled), or not resumed (a person looks)."""
    try:
        decision = recheck.resume_host(h, said)
    except (VpatchError, walk._StepFailed) as exc:
        decision = Resume(RESUME_REFUSE, (), str(exc))
    if decision.action == RESUME_CHANGED:
        return recheck.changed(h, decision.recorded)
    if decision.action != RESUME_CONTINUE:
        return walk.finish(h, decision.why)
    return None


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
    journal records and result as one host of `vpatch rollout`, under the host's lease."""
    h = walk._host(target, transport, specs, opts, state_dir, cfg, walk.new_run(), ctx)
    return leased_walk(h)


def leased_walk(
    h: walk.Host,
    resume: bool = False,
    ctrl_c: threading.Event | None = None,
    on_step: Callable[[walk.Host], None] | None = None,
) -> HostResult:
    """walk.walk under the host's rollout lease: taken before the first step
    (`resume`: this run's, taken over once its old controller is gone), beaten as the host
    walks (walk._beat), given up with the walk's last step (walk._record); a walk
    stopped early (Ctrl-C) parks it. A lease the host refuses ends the host untouched, its
    holder named: nothing ran there."""
    from patcher.errors import VpatchError
    from patcher.rollout import decide

    lease = walk.lease_of(h)
    first = decide.next_step(h.plan, h.done) or decide.BASELINE
    try:
        lease.take(ttl_for(first, h.cfg, walk.HEALTH_CALL), resume)
    except Refused as exc:
        return _refused(h, exc.error, exc.hint)
    except VpatchError as exc:
        return _refused(h, exc.message, exc.hint or HINT)
    h.lease = lease
    result = walk.walk(h, ctrl_c, on_step)
    if not h.lost and decide.next_step(h.plan, h.done) is not None:
        lease.park()
    return result


def _refused(h: walk.Host, error: str, hint: str) -> HostResult:
    from patcher.rollout import decide

    host = walk.finish(h)
    host.ok, host.error, host.hint = False, error, hint
    assert host.rollout is not None
    host.rollout.update(verdict=decide.UNTOUCHED, stopped_in=None)
    return host
