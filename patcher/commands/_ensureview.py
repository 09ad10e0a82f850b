"""What `vpatch ensure` and `vpatch exec` print (not a command; both use it): a hook's output
lands in journald or a container's log, so it is terse and line based."""

from __future__ import annotations

import sys
from typing import TextIO

from patcher.output.inert import clean, line
from patcher.output.report import problems
from patcher.result import GOOD, HostResult, PatchResult, RunResult


def problem_lines(result: RunResult) -> list[str]:
    """One `error:` line per problem: a host that failed, or a spec not in the desired state
    (a spec that failed with its host's error is that error, said once)."""
    return [clean(f"error: {msg.splitlines()[0] if msg else msg}") for msg, _ in problems(result)]


def hint_line(result: RunResult) -> str | None:
    """The `hint:` that follows the error lines: the first problem's (report.problems)."""
    found = problems(result)
    return clean(f"hint: {found[0][1]}") if found else None


def _change_line(h: HostResult, p: PatchResult) -> str:
    probes = f", {sum(x.ok for x in p.probes)}/{len(p.probes)} checks passed" if p.probes else ""
    return line(f"{p.outcome}: {h.target}: {p.id} ({p.package} {p.version or '-'}){probes}")


def render_ensure(result: RunResult, out: TextIO | None = None, err: TextIO | None = None) -> None:
    """A line per spec written or checked, then a summary (ok) or one `error:` line per
    problem (err). The fast path (nothing written, nothing checked) prints the summary only."""
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    err = err or sys.stderr
    good = GOOD[result.command]
    for h in result.hosts:
        for p in h.patches:
            checked = all(x.ok for x in p.probes)
            if p.outcome in good and checked and (p.outcome == "applied" or p.probes):
                print(_change_line(h, p), file=out)
    errors = problem_lines(result)
    for problem in errors:
        print(problem, file=err)
    hint = hint_line(result)
    if hint:
        print(hint, file=err)
    counts: dict[str, int] = {}
    for h in result.hosts:
        for p in h.patches:
            counts[p.outcome] = counts.get(p.outcome, 0) + 1
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no specs"
    seconds = max((h.seconds for h in result.hosts), default=0.0)
    n = len(result.hosts)
    if errors:
        print(f"{result.command}: {len(errors)} problem(s) on {n} host(s) [{tally}]", file=err)
    else:
        print(f"{result.command}: ok, {n} host(s) [{tally}] in {seconds:.2f}s", file=out)
