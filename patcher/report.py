"""Render a RunResult for people (rich; plain when not a TTY) or as one JSON document."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from patcher import fleet
from patcher.result import GOOD, HostResult, PatchResult, RunResult

_STYLE = {
    "applied": "green",
    "already_applied": "green",
    "satisfied_upstream": "cyan",
    "rolled_back": "green",
    "would_apply": "yellow",
    "not_applied": "yellow",
    "skipped": "dim",
}


# C0/C1 control characters except tab and newline, and DEL: text from specs and hosts (probe
# names and output, file paths, process titles) is shown escaped, so it cannot recolour, clear
# or rewrite the operator's terminal (JSON output escapes them by itself).
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def clean(text: str) -> str:
    """`text` with control characters (ESC above all) made visible as `\\xNN`."""
    return text.translate(_CONTROL)


def render_json(result: RunResult, out: TextIO = sys.stdout) -> None:
    json.dump(result.to_json(), out, indent=2)
    out.write("\n")


def write_report(result: RunResult, path: str) -> None:
    """`--report FILE`: the same JSON document, written atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        render_json(result, fh)
    os.replace(tmp, path)


def render_human(result: RunResult, show_diff: bool = False, out: TextIO = sys.stdout) -> None:
    """One host: its details. A fleet: a summary table, then details of hosts that are not ok
    (or of every host with --diff), then totals."""
    console = Console(file=out, highlight=False, soft_wrap=True)
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
        msg = f"{result.command}: {len(bad)} of {total} host(s) not ok: {', '.join(bad)}"
        console.print(Text(msg + (f" [{tally}]" if tally else ""), "bold red"))
    else:
        console.print(Text(f"{result.command}: ok ({total} host(s)) [{tally}]", "bold green"))


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
        table.add_column(sid)
    table.add_column("time", justify="right")
    for h in result.hosts:
        by_id = {p.id: p for p in h.patches}
        versions = sorted({p.version for p in h.patches if p.version})
        cells: list[Text | str] = [h.target, clean(", ".join(versions)) or "-"]
        for sid in ids:
            found = by_id.get(sid)
            missing = Text("error" if h.error else "-", "red")
            cells.append(_cell(result.command, found) if found else missing)
        cells.append(f"{h.seconds:.2f}s")
        table.add_row(*cells)
    return table


def _cell(command: str, p: PatchResult) -> Text:
    style = _STYLE.get(p.outcome, "green" if p.outcome in GOOD[command] else "red")
    text = Text(p.outcome, style)
    if p.probes:
        ok = sum(pr.ok for pr in p.probes)
        text.append(f" {ok}/{len(p.probes)}", "green" if ok == len(p.probes) else "red")
    return text


class _Bar(fleet.Progress):
    """A transient rich bar on stderr: hosts done / total, failures, elapsed."""

    def __init__(self) -> None:
        self.bar = RichProgress(
            TextColumn("[bold]hosts"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr),
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


@contextmanager
def progress_for(total: int, quiet: bool) -> Iterator[fleet.Progress]:
    """A live bar for fleets on a terminal; a silent stand-in otherwise (no control codes)."""
    if quiet or total < 2 or not sys.stderr.isatty():
        yield fleet.Progress()
        return
    bar = _Bar()
    try:
        yield bar
    finally:
        bar.stop()


def _host(console: Console, command: str, host: HostResult, show_diff: bool) -> None:
    head = Text(host.target, "bold")
    if host.python:
        head.append(f"  {clean(host.python)}", "dim")
    head.append(f"  {host.seconds:.2f}s", "dim")
    console.print(head)
    if host.error:
        console.print(Text(f"  error: {clean(host.error)}", "red"))
    if not host.patches and not host.error:
        console.print(Text("  nothing recorded", "dim"))
    for p in host.patches:
        _patch(console, command, p, show_diff)
    for proc in host.restart_required:
        # Started before the write: it still runs the code it imported then.
        since = f" (started {proc['started']})" if proc.get("started") else ""
        line = f"  restart required: pid {proc.get('pid')}{since} {proc.get('cmdline', '')}"
        console.print(Text(clean(line), "yellow"))


def _patch(console: Console, command: str, p: PatchResult, show_diff: bool) -> None:
    style = _STYLE.get(p.outcome, "green" if p.outcome in GOOD[command] else "red")
    line = Text("  ")
    line.append(f"{p.outcome:<19}", style)
    line.append(f"{p.id}", "bold")
    line.append(clean(f"  {p.package} {p.version or '-'}"), "dim")
    console.print(line)
    if p.message:
        console.print(Text(f"      {clean(p.message)}"))
    for f in p.files:
        console.print(
            Text(clean(f"      {f.path}  {f.before_sha256[:12]} -> {f.after_sha256[:12]}"), "dim")
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


# ---------------------------------------------------------------------------------------------
# The failure summary on stderr: whatever the rendering on stdout (table or --json), a failed run
# ends with one `error:` line per problem and one `hint:` line, like an input error (exit 2)
# does, so scripts and people see what went wrong without parsing the report.

# (words in the message, hint): the first match wins; the outcome's hint is the fallback.
_MESSAGE_HINTS = (
    ("is not installed", "is --python the interpreter of the environment that has the package?"),
    ("no variant's range", "add a [[variant]] for this version (`vpatch matrix SPEC` shows fits)"),
    ("is a symlink", "vpatch edits only regular files inside site-packages; reinstall the package"),
    ("is not a file of", "`file` must name a file of the spec's own package (see its RECORD)"),
    ("is not UTF-8", "the installed file is not UTF-8 text: reinstall the package"),
    ("cannot parse the file", "the installed file is not valid Python: reinstall the package"),
    ("is not a regular file", "`file` must name a regular .py file of the package"),
    ("differs from pip's RECORD", "find out who edited it; --force patches the file as it is"),
    ("verify failed", "the probe says the patch does not work here; nothing stays changed"),
)
_OUTCOME_HINTS = {
    "not_applicable": "the spec does not cover what is installed on this target",
    "anchor_missing": "the installed code is not what the spec expects (`vpatch matrix SPEC`)",
    "ambiguous": "narrow the edit's scope (Class.method) so its target matches once",
    "drifted": "`vpatch status` says what the file is now; --force overrides",
    "not_applied": "run `vpatch apply SPEC` on this target",
    "skipped": "an earlier host failed and the fleet policy stopped; fix it and run again",
    "failed": "the file is unchanged unless the message says otherwise; fix the cause, run again",
}


def problems(result: RunResult) -> list[tuple[str, str]]:
    """(message, hint) per host error or per spec not in the state the command asked for."""
    good = GOOD[result.command]
    out: list[tuple[str, str]] = []
    for h in result.hosts:
        msg = ""
        if h.error:  # "<msg> (hint: <hint>)", as engine._error_text joins them
            msg, sep, hint = h.error.partition(" (hint: ")
            where = "" if msg.startswith(f"{h.target}: ") else f"{h.target}: "
            out.append((where + msg, hint[:-1] if sep else "run `vpatch status` on this target"))
        for p in h.patches:
            bad = [pr for pr in p.probes if not pr.ok]
            if (p.outcome in good and not bad) or (msg and p.message == msg):
                continue  # good, or the host error again (a failed commit fails its specs)
            why = p.message or (f"{bad[0].name}: {bad[0].detail}" if bad else "")
            hint = next((t for words, t in _MESSAGE_HINTS if words in why), "")
            hint = hint or _OUTCOME_HINTS.get(p.outcome, "see the report above")
            out.append((f"{h.target}: {p.id}: {p.outcome}: {why}".rstrip(": "), hint))
    return out


def render_problems(result: RunResult, err: TextIO = sys.stderr) -> None:
    """`error:` per problem (first line of each message), then the first problem's `hint:`."""
    found = problems(result)
    for msg, _hint in found:
        print(f"error: {clean(msg.splitlines()[0] if msg else msg)}", file=err)
    if found:
        print(f"hint: {clean(found[0][1])}", file=err)
