"""Render a RunResult for people (rich; plain when not a TTY) or as one JSON document."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

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


def render_json(result: RunResult, out: TextIO = sys.stdout) -> None:
    json.dump(result.to_json(), out, indent=2)
    out.write("\n")


def render_human(result: RunResult, show_diff: bool = False, out: TextIO = sys.stdout) -> None:
    console = Console(file=out, highlight=False, soft_wrap=True)
    for host in result.hosts:
        _host(console, result.command, host, show_diff)
    bad = [h.target for h in result.hosts if not h.ok]
    total = len(result.hosts)
    if bad:
        console.print(
            Text(
                f"{result.command}: {len(bad)} of {total} host(s) not ok: {', '.join(bad)}",
                "bold red",
            )
        )
    else:
        console.print(Text(f"{result.command}: ok ({total} host(s))", "bold green"))


def _host(console: Console, command: str, host: HostResult, show_diff: bool) -> None:
    head = Text(host.target, "bold")
    if host.python:
        head.append(f"  {host.python}", "dim")
    head.append(f"  {host.seconds:.2f}s", "dim")
    console.print(head)
    if host.error:
        console.print(Text(f"  error: {host.error}", "red"))
    if not host.patches and not host.error:
        console.print(Text("  nothing recorded", "dim"))
    for p in host.patches:
        _patch(console, command, p, show_diff)
    for proc in host.restart_required:
        console.print(
            Text(f"  restart required: pid {proc.get('pid')} {proc.get('cmdline', '')}", "yellow")
        )


def _patch(console: Console, command: str, p: PatchResult, show_diff: bool) -> None:
    style = _STYLE.get(p.outcome, "green" if p.outcome in GOOD[command] else "red")
    line = Text("  ")
    line.append(f"{p.outcome:<19}", style)
    line.append(f"{p.id}", "bold")
    line.append(f"  {p.package} {p.version or '-'}", "dim")
    console.print(line)
    if p.message:
        console.print(Text(f"      {p.message}"))
    for f in p.files:
        console.print(
            Text(f"      {f.path}  {f.before_sha256[:12]} -> {f.after_sha256[:12]}", "dim")
        )
        if show_diff and f.diff:
            console.print(Syntax(f.diff, "diff", theme="ansi_dark", background_color="default"))
    for pr in p.probes:
        mark = Text("      ok   " if pr.ok else "      FAIL ", "green" if pr.ok else "red")
        mark.append(f"{pr.name} ({pr.seconds:.1f}s)")
        if not pr.ok:
            mark.append(f": {pr.detail}", "red")
        console.print(mark)
