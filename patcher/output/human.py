"""The human rendering of a RunResult (rich): tables, coloured diffs, the fleet progress bar.

Its own module so that rich (~0.1 s to import) is loaded only when a person reads the output:
`--json`, `--quiet`, `vpatch ensure` and `vpatch exec` (a pre-deploy hook, on every start of a
server) never pay for it. `patcher.output.report` is the entry point; it imports this lazily.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from patcher.output import colour, progress
from patcher.output.inert import clean, line
from patcher.result import GOOD, HostResult, PatchResult, RolloutStep, RunResult

_STYLE = {
    "applied": "green",
    "already_applied": "green",
    "satisfied_upstream": "cyan",
    "rolled_back": "green",
    "would_roll_back": "yellow",
    "would_apply": "yellow",
    "not_applied": "yellow",
    "skipped": "dim",
}


# What an `ephemeral` patch is (a container's: HostResult.ephemeral), said once per host.
EPHEMERAL = (
    "ephemeral: the patches live in the container's writable layer: kept over a container "
    "restart, gone when it is re-created from its image (bake them in: `vpatch wheel`)"
)
# A pod's (transport kubectl): the kubelet restarts a container as a new one of its image.
EPHEMERAL_POD = (
    "ephemeral: the patches live in the pod's container filesystem: gone at its next restart "
    "(keep the venv on a volume that an initContainer fills with `vpatch ensure`, or bake a "
    "wheel: `vpatch wheel`)"
)


def render_human(result: RunResult, show_diff: bool = False, out: TextIO | None = None) -> None:
    """One host: its details. A fleet: a summary table, then details of hosts that are not ok
    (or of every host with --diff), then totals."""
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    console = colour.console(out, highlight=False, soft_wrap=True)
    many = len(result.hosts) > 1
    if many:
        console.print(summary_table(result))
    for host in result.hosts:
        if not many or show_diff or not host.ok:
            _host(console, result.command, host, show_diff)
    bad = [h.target for h in result.hosts if not h.ok]
    total = len(result.hosts)
    counts: dict[str, int] = {}
    for h in result.hosts:
        for p in h.patches:
            counts[p.outcome] = counts.get(p.outcome, 0) + 1
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    if bad:
        msg = f"{result.command}: {len(bad)} of {total} host(s) not ok: {line(', '.join(bad))}"
        console.print(Text(msg + (f" [{tally}]" if tally else ""), "bold red"))
    else:
        msg = f"{result.command}: ok ({total} host(s))"
        console.print(Text(msg + (f" [{tally}]" if tally else ""), "bold green"))


def summary_table(result: RunResult) -> Table:
    """target | version | one column per spec (outcome + probes passed) | time."""
    ids: list[str] = []
    for h in result.hosts:
        for p in h.patches:
            if p.id not in ids:
                ids.append(p.id)
    table = Table(show_edge=False, pad_edge=False, box=None)
    table.add_column("target", style="bold")
    table.add_column("version")
    for sid in ids:
        table.add_column(line(sid))  # a journal's id: the environment's owner wrote it
    steps = any(h.rollout_step is not None for h in result.hosts)
    if steps:  # status: where each host's last `vpatch rollout` got to
        table.add_column("last rollout step")
    table.add_column("time", justify="right")
    for h in result.hosts:
        by_id = {p.id: p for p in h.patches}
        versions = sorted({p.version for p in h.patches if p.version})
        # Text, not str: a str cell is rich markup, and `[...]` in a name would vanish.
        cells: list[Text | str] = [Text(line(h.target)), Text(line(", ".join(versions)) or "-")]
        for sid in ids:
            found = by_id.get(sid)
            missing = Text("error" if h.error else "-", "red")
            cells.append(_cell(result.command, found) if found else missing)
        if steps:
            cells.append(_step_cell(h.rollout_step))
        cells.append(f"{h.seconds:.2f}s")
        table.add_row(*cells)
    return table


def _step_cell(st: RolloutStep | None) -> Text:
    if st is None:
        return Text("-", "dim")
    how = st.verdict or "stopped after it"
    return Text(line(f"{st.step} {'ok' if st.ok else 'failed'}, {how}"), _step_style(st))


def _step_style(st: RolloutStep) -> str:
    return "green" if st.verdict == "kept" else "yellow" if st.verdict != "attention" else "red"


def _cell(command: str, p: PatchResult) -> Text:
    style = _STYLE.get(p.outcome, "green" if p.outcome in GOOD[command] else "red")
    text = Text(p.outcome, style)
    if p.probes:
        ok = sum(pr.ok for pr in p.probes)
        text.append(f" {ok}/{len(p.probes)}", "green" if ok == len(p.probes) else "red")
    return text


class Bar(progress.HostsProgress):
    """A transient rich bar on stderr: hosts done / total, failures, elapsed."""

    def __init__(self) -> None:
        self.bar = RichProgress(
            TextColumn("[bold]hosts"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=colour.console(sys.stderr),
            transient=True,
        )
        self.task = self.bar.add_task("hosts", total=0, failed=0)
        self.failed = 0

    def start(self, total: int) -> None:
        self.bar.update(self.task, total=total)
        self.bar.start()

    def advance(self, result: HostResult) -> None:
        self.failed += not result.ok
        self.bar.update(self.task, advance=1, failed=self.failed)

    def stop(self) -> None:
        self.bar.stop()


def _host(console: Console, command: str, host: HostResult, show_diff: bool) -> None:
    head = Text(line(host.target), "bold")
    if host.python:
        head.append(f"  {clean(host.python)}", "dim")
    if host.uid is not None:
        who = " (the environment's owner; dropped from root)" if host.dropped_from == 0 else ""
        head.append(f"  as uid {host.uid}{who}", "dim")
    head.append(f"  {host.seconds:.2f}s", "dim")
    console.print(head)
    if host.error:
        console.print(Text(f"  error: {clean(host.error)}", "red"))
    for note in [] if progress.quiet() else host.notes:  # -q: results and errors only
        console.print(Text(f"  note: {clean(note)}", "yellow"))
    for warning in [] if progress.quiet() else host.warnings:
        console.print(Text(f"  warning: {clean(warning)}", "yellow"))
    _patches(console, command, host, show_diff)
    if host.rollout_step is not None:
        st = host.rollout_step
        how = f"verdict {st.verdict}" if st.verdict else "stopped after it (--resume continues)"
        say = f"  last rollout step: {st.step} {'ok' if st.ok else 'failed'}, {how} "
        say += f"(run {st.run}, {st.at}): {st.detail}"
        console.print(Text(line(say), _step_style(st)))
    for a in host.attention:  # bare status: what needs a person (patcher/plan/monitor.py)
        console.print(Text(line(f"  needs attention: {a.state}: {a.subject}: {a.message}"), "red"))
        console.print(Text(line(f"      run: {a.todo}"), "red"))
    for proc in host.restart_required:
        # Started before the write, the changed package loaded: it still runs the old code.
        since = f" (started {proc['started']})" if proc.get("started") else ""
        why = f" ({proc['why']})" if proc.get("why") else ""
        say = f"  restart required: pid {proc.get('pid')}{since} {proc.get('cmdline', '')}{why}"
        console.print(Text(line(say), "yellow"))


def _patches(console: Console, command: str, host: HostResult, show_diff: bool) -> None:
    if not host.patches and not host.error:
        console.print(Text("  nothing recorded", "dim"))
    for p in host.patches:
        _patch(console, command, p, show_diff, host.ephemeral)
    if host.ephemeral and host.patches and not progress.quiet():
        note = EPHEMERAL_POD if host.transport == "kubectl" else EPHEMERAL
        console.print(Text(line(f"  note: {note}"), "yellow"))


def _patch(
    console: Console, command: str, p: PatchResult, show_diff: bool, ephemeral: bool = False
) -> None:
    style = _STYLE.get(p.outcome, "green" if p.outcome in GOOD[command] else "red")
    head = Text("  ")
    head.append(f"{p.outcome:<19}", style)
    head.append(line(p.id), "bold")
    head.append(line(f"  {p.package} {p.version or '-'}"), "dim")
    if ephemeral:
        head.append("  ephemeral", "yellow")
    console.print(head)
    if p.message:
        console.print(Text(f"      {clean(p.message)}"))
    for f in p.files:
        console.print(
            Text(line(f"      {f.path}  {f.before_sha256[:12]} -> {f.after_sha256[:12]}"), "dim")
        )
        if show_diff and f.diff:
            diff = Syntax(clean(f.diff), "diff", theme="ansi_dark", background_color="default")
            console.print(diff)
    for pr in p.probes:
        mark = Text("      ok   " if pr.ok else "      FAIL ", "green" if pr.ok else "red")
        mark.append(f"{clean(pr.name)} ({pr.seconds:.1f}s)")
        if not pr.ok:
            mark.append(f": {clean(pr.detail)}", "red")
        elif pr.detail and pr.detail != "passed":  # e.g. the metrics probe's numbers
            mark.append(f": {clean(pr.detail)}", "dim")
        console.print(mark)
