"""`vpatch rollout`: apply's targets and checks, then per host restart, health and live-metric
gates, rolled back when worse (patcher.rollout.walk; docs/rollout.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from patcher.commands import _htmlreport, _targets
from patcher.commands._help import SPEC_HELP
from patcher.output.progress import HostsProgress

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.result import HostResult, RunResult
    from patcher.rollout.driver import Outcome
    from patcher.rollout.settings import Settings


RELEASE = "release"  # `vpatch rollout release HOST... --run ID` (the word where a SPEC goes)
# `vpatch rollout pause|resume|promote|abort REPORT` (protocol.STEER_VERBS; where a SPEC goes)
STEERS = ("pause", "resume", "promote", "abort")
WATCH = "watch"  # `vpatch rollout watch REPORT`


def add_options(op: argparse.ArgumentParser, name: str) -> None:
    """apply's options, then rollout's own."""
    op.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    _targets.target_options(op)
    _targets.level_option(op)
    op.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")
    _rollout_options(op)


def _rollout_options(p: argparse.ArgumentParser) -> None:
    """rollout's own options (the target, fleet and apply options are _targets')."""
    g = p.add_argument_group("rollout")
    g.add_argument(
        "--restart",
        metavar="CMD",
        help="run on each target after its patch is written and verified, through `sh -c` as "
        "the operator: the SSH login user (--sudo: root), never the environment's owner a "
        "root agent drops to; e.g. 'systemctl restart vllm'; non-zero exit fails the host (an "
        "inventory host's `restart` wins)",
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
        help="seconds each measurement lasts, before and after (120); ends early at "
        "--min-drafts; by --rule sequential, given: the least after-window, not given: "
        "judged from the first scrape",
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
        "--control",
        metavar="K",
        help="the last K targets are control hosts: never written, restarted or leased, "
        "scraped in the same windows as each canary; ratio gates compare canary/control "
        "(else after/before); implies --confidence 0.95",
    )
    g.add_argument(
        "--confidence",
        metavar="C",
        help="gates decide on evidence at this level (e.g. 0.95): a rate by its interval, a "
        "latency by its bucket counts (two proportions), tokens/s by per-interval samples "
        "(--rule); an undecided window extends up to --max-window, then fails: not enough "
        "evidence",
    )
    g.add_argument(
        "--rule",
        choices=("sequential", "fixed"),
        help="how a gate with a confidence decides at each scrape (sequential): by intervals "
        "valid at every look, deciding as soon as the evidence is enough; fixed: tests at "
        "--window and each scrape after, each at its Bonferroni share of the error",
    )
    g.add_argument(
        "--max-window",
        metavar="S",
        help="how long an undecided window may extend (with --confidence; 3x --window)",
    )
    g.add_argument(
        "--scrape-every",
        metavar="S",
        help="seconds between the window's scrapes: each interval one sample "
        "(with --confidence: --window / 20)",
    )
    _targets.metrics_profile_option(g)
    g.add_argument(
        "--resume",
        metavar="REPORT",
        help="continue the rollout a REPORT (its --report, else the file it named on stderr "
        "at its start) stopped: each host goes on from the last step its journal records; "
        "give the same specs, targets and options",
    )
    g.add_argument(
        "--run",
        metavar="ID",
        help="with `vpatch rollout release HOST... --run ID`: give up run ID's rollout lease "
        "on those hosts once its controller is gone (refused while it lives; journaled)",
    )
    g.add_argument(
        "--events",
        metavar="FILE|-",
        help="also write the rollout's events to FILE (- : stdout, ahead of the result), one "
        "JSON object a line, flushed: each phase a host begins and ends, each scrape of a "
        "window with its evidence so far, each host's verdict, the run's end (REPORT.events "
        "beside the report always has them: `vpatch rollout watch REPORT` follows it)",
    )
    g.add_argument(
        "--allow-no-traffic",
        action="store_true",
        help="a gate that cannot be computed (no drafts, no tokens in the window) passes "
        "instead of failing",
    )
    _htmlreport.options(g)


def settings(args: argparse.Namespace) -> Settings:
    """The rollout's options from argv, checked before any host is contacted (exit 2)."""
    from patcher.rollout.settings import make_settings

    return make_settings(
        restart=args.restart,
        restart_timeout=args.restart_timeout,
        health=args.health,
        health_timeout=args.health_timeout,
        metrics=args.metrics,
        window=args.window,
        min_drafts=args.min_drafts,
        min_acceptance=args.min_acceptance,
        min_throughput_ratio=args.min_throughput_ratio,
        allow_no_traffic=args.allow_no_traffic,
        control=args.control,
        confidence=args.confidence,
        max_window=args.max_window,
        scrape_every=args.scrape_every,
        metrics_profile=args.metrics_profile,
        rule=args.rule,
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every host kept the patch, 1 otherwise (as apply); 130 after a second
    Ctrl-C, whose report has every host as far as it got. `vpatch rollout release HOST...
    --run ID`: `release` (the first word where a SPEC goes); `vpatch rollout report REPORT
    --html FILE`: `report` (patcher/commands/_htmlreport.py); `vpatch rollout pause REPORT`
    and the other steers: `steer`; `vpatch rollout watch REPORT`: `_watch`."""
    word = WORDS.get(args.specs[0])
    if word is not None:  # `release`, `report`, a steer, `watch`: the word where a SPEC goes
        return word(args)
    _htmlreport.check(args)
    from patcher.commands._rolloutwatch import sinks_of
    from patcher.rollout.driver import Request, drive
    from patcher.rollout.view import BatchLines

    targets, control = _targets.chosen(args)
    if args.control is None and control is not None:  # `[defaults] control = K`; --control wins
        args.control = str(control)
    policy = _targets.policy(args, len(targets))
    sinks, view = sinks_of(args.events, args.json)
    request = Request(
        specs=args.specs,
        level=args.level,
        force=args.force,
        state_dir=args.state_dir,
        report=args.report,
        resume=args.resume,
        settings=settings(args),
        sinks=sinks,
    )

    def started(run: str, path: str) -> None:
        if not args.report:
            print(f"note: rollout {run}: report (written as it goes): {path}", file=sys.stderr)

    def lines(names: list[str]) -> HostsProgress:  # the canaries' names (control hosts apart)
        return BatchLines(names, policy, sys.stderr) if not args.json else HostsProgress()

    view.start()  # the live view on stderr (a terminal), else plain lines (none: --json, -q)
    try:
        done = drive(
            request,
            targets,
            policy,
            lambda t: _targets.open_target(t, args),
            lines,
            started,
            kind_of=lambda t: _targets.kind_of(t, args),
        )
    finally:
        view.stop()
    return _ended(args, done)


def _ended(args: argparse.Namespace, done: Outcome) -> int:
    """What the rollout says at its end: the --report-html page, the JSON document or the
    table, the problems, how to go on after a Ctrl-C; the exit status."""
    from patcher.rollout.view import render_problems, render_table, stopped_note

    result = done.result
    _htmlreport.at_end(result, args.report_html)
    if args.json:
        from patcher.output.report import emit

        emit(result.to_json())
    else:
        render_table(result, sys.stdout)
    if not result.ok:
        render_problems(result, sys.stderr)
    if done.interrupted:
        print(stopped_note(done.run, done.report, result), file=sys.stderr)
    if done.cut_short:
        return 130
    return 0 if result.ok else 1


def release(args: argparse.Namespace) -> int:
    """`vpatch rollout release HOST... --run ID`: give up run ID's rollout lease on each
    HOST (among --inventory's, else an SSH target as --host names one) where its controller
    is provably gone: parked, its promised beat overdue, its session agent dead, or a beat
    and ttl vpatch never makes (the agent decides, under the lock: patcher/agent/leasing.py).
    While it lives the host refuses, naming it. Each release is journaled on the host (a note
    on the run's newest step: `vpatch status` shows who gave it up). Exit 0 when every host
    is free of it, 1 otherwise, 2 on bad usage (nothing contacted)."""
    from patcher.errors import UsageError
    from patcher.result import RunResult

    names, run_id = args.specs[1:], args.run
    example = "e.g. vpatch rollout release h1 --run 3f9c0a1b2c3d --inventory hosts.toml"
    if not names or not run_id:
        raise UsageError("`vpatch rollout release` needs HOST... and --run ID", example)
    if not run_id.isalnum() or len(run_id) > 64:
        raise UsageError(f"--run {run_id!r} is not a rollout's run id", example)
    args.host = [*args.host, *names]
    hosts = [_release_on(t, args, run_id) for t in _targets.targets(args)]
    result = RunResult("rollout", all(h.ok for h in hosts), hosts)
    _say_released(result, args.json)
    return 0 if result.ok else 1


def _release_on(target: Target, args: argparse.Namespace, run_id: str) -> HostResult:
    """One host's release (rolloutlease.Lease.give_up), as a host result: a note when it is
    free of the lease, else the error and hint."""
    from patcher.errors import VpatchError
    from patcher.result import HostResult
    from patcher.rollout.lease import HINT, Lease, released_words
    from patcher.transports.base import SessionTransport

    host = HostResult(target=target.name)
    try:
        transport = _targets.open_target(target, args)
        try:
            session = isinstance(transport, SessionTransport)
            lease = Lease(transport, run_id, [], args.state_dir, session=session)
            res = lease.give_up()
        finally:
            transport.close()
        age = float(res.get("age") or 0)
        holder = res.get("holder")
        done, said, hint = released_words(str(res.get("result")), holder, run_id, age)
    except VpatchError as exc:
        done, said, hint = False, exc.message, exc.hint or HINT
    host.ok = done
    if done:
        host.notes.append(said)
    else:
        host.error, host.hint = said, hint
    return host


def _say_released(result: RunResult, as_json: bool) -> None:
    """Each host's line (or the JSON document), then `error:` lines and the first `hint:`."""
    from patcher.output.inert import clean

    if as_json:
        from patcher.output.report import emit

        emit(result.to_json())
    else:
        for h in result.hosts:
            if h.ok:
                print(clean(f"{h.target}: {h.notes[0]}"))
    bad = [h for h in result.hosts if not h.ok]
    for h in bad:
        print(f"error: {clean(f'{h.target}: {h.error}')}", file=sys.stderr)
    if bad:
        print(f"hint: {clean(bad[0].hint or '')}", file=sys.stderr)


# What each steer does, in the line that says it was written.
_STEERED = {
    "pause": "no host starts until `vpatch rollout resume REPORT`; hosts in flight go on",
    "resume": "the hosts held start",
    "promote": "each host in flight ends its window at its next scrape and keeps the patch",
    "abort": "each host in flight goes back, and no host starts",
}


def steer(args: argparse.Namespace) -> int:
    """`vpatch rollout pause|resume|promote|abort REPORT`: write the steer to the steering
    channel of the running rollout whose report is REPORT (patcher/rollout/channel.py); the
    rollout reads it before its next host or step and at every scrape. Exit 0 once written;
    2 (one `error:` and `hint:`, nothing written) for bad input: no such report, a run that
    has ended or takes no such steer now, a channel that is not the run owner's own file."""
    from patcher.errors import UsageError
    from patcher.rollout import channel
    from patcher.rollout.report import run_of

    verb, rest = args.specs[0], args.specs[1:]
    example = f"e.g. vpatch rollout {verb} ~/.local/state/vpatch/rollouts/3f9c0a1b2c3d.json"
    if len(rest) != 1:
        raise UsageError(f"`vpatch rollout {verb}` needs one REPORT (the rollout's)", example)
    report = rest[0]
    done = channel.write(report, run_of(report), verb)
    rec = done.record
    doc = {
        **rec.to_json(),
        "report": report,
        "channel": done.path,
        "controller": {"pid": done.pid, "running": done.alive},
    }
    if args.json:
        from patcher.output.report import emit

        emit(doc)
        return 0
    from patcher.output.inert import clean

    print(clean(f"rollout {rec.run}: {verb} written ({rec.by()}): {_STEERED[verb]}"))
    if not done.alive:
        print(
            clean(
                f"note: its controller (pid {done.pid}) is not running on this machine: the "
                "steer is read when `vpatch rollout ... --resume REPORT` goes on with the run"
            ),
            file=sys.stderr,
        )
    return 0


def _watch(args: argparse.Namespace) -> int:
    from patcher.commands._rolloutwatch import watch

    return watch(args.specs[1:])


WORDS: dict[str, Callable[[argparse.Namespace], int]] = {
    RELEASE: release,
    _htmlreport.WORD: _htmlreport.report,
    **dict.fromkeys(STEERS, steer),
    WATCH: _watch,
}
