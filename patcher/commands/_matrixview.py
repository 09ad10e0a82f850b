"""The release matrix for a person or a script (not a command): `vpatch matrix` shows it, and
`vpatch capture`/`backport` show theirs over the neighbouring releases."""

from __future__ import annotations

import io
import json
import sys
import threading
from typing import TextIO

from packaging.version import Version
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from patcher.output import colour
from patcher.output.inert import clean, line
from patcher.plan.verdicts import MATRIX_FAILING
from patcher.wheels.matrix import Matrix, MatrixProgress, Release

_STYLE = {
    "would_apply": "yellow",
    "satisfied_upstream": "cyan",
    "no_file": "magenta",
}


def render_json(matrix: Matrix, out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    json.dump(matrix.to_json(), out, indent=2)
    out.write("\n")


def render_human(matrix: Matrix, out: TextIO | None = None) -> None:
    """version | variant | outcome | message, then one summary line."""
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    # Piped or redirected: plain text, one row per line (for grep), no trailing blanks.
    tty = out.isatty()
    buf = io.StringIO()
    console = colour.console(
        out if tty else buf, highlight=False, soft_wrap=True, width=None if tty else 250
    )
    # every field may come from a spec, an index or a wheel: escaped (patcher.output.inert)
    n = len(matrix.releases)
    releases = f"{n} release" if n == 1 else f"{n} releases"
    console.print(
        Text(line(f"{matrix.spec}: {matrix.package} {matrix.versions}")) + Text(f" ({releases})")
    )
    table = Table(show_edge=False, pad_edge=False, box=None)
    for name in ("version", "variant", "outcome", "message"):
        table.add_column(name, no_wrap=name != "message")
    for r in matrix.releases:
        style = "red" if r.outcome in MATRIX_FAILING else _STYLE.get(r.outcome, "")
        variant = "-" if r.variant is None else str(r.variant)
        # Text, not str: a message quoting code (`[...]`, `[bold]`) is not rich markup.
        cells = (line(r.version), variant, line(r.outcome), clean(r.message))
        table.add_row(Text(cells[0]), Text(cells[1]), Text(cells[2], style), Text(cells[3]))
    console.print(table)
    counts: dict[str, int] = {}
    for r in matrix.releases:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    if matrix.ok:
        console.print(Text(f"matrix: ok [{tally}]", "bold green"))
    else:
        bad = [r.version for r in matrix.releases if r.outcome in MATRIX_FAILING]
        console.print(
            Text(line(f"matrix: spec does not fit {', '.join(bad)} [{tally}]"), "bold red")
        )
    if matrix.no_wheel:
        n = len(matrix.no_wheel)
        what = f"{n} release has" if n == 1 else f"{n} releases have"
        console.print(
            Text(
                line(
                    f"{what} no wheel for {', '.join(matrix.platforms)} (not examined): "
                    f"{', '.join(matrix.no_wheel)}"
                ),
                "yellow",
            )
        )
    if not tty:
        out.write("".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()))


class Bar(MatrixProgress):
    """Releases decided / total on stderr, with what is downloading now."""

    def __init__(self) -> None:
        self.bar = RichProgress(
            TextColumn("[bold]releases"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[fetching]}"),
            TimeElapsedColumn(),
            console=colour.console(sys.stderr),
            transient=True,
        )
        self.task = self.bar.add_task("releases", total=0, fetching="")
        self.active: list[str] = []
        self.lock = threading.Lock()

    def start(self, total: int) -> None:
        self.bar.update(self.task, total=total)
        self.bar.start()

    def fetching(self, version: Version) -> None:
        with self.lock:
            self.active.append(str(version))
            self._show()

    def done(self, release: Release) -> None:
        with self.lock:
            if release.version in self.active:
                self.active.remove(release.version)
            self.bar.update(self.task, advance=1)
            self._show()

    def _show(self) -> None:
        text = f"downloading {', '.join(self.active)}" if self.active else ""
        self.bar.update(self.task, fetching=text)

    def stop(self) -> None:
        self.bar.stop()


def progress_for(quiet: bool) -> MatrixProgress:
    """A live bar on a terminal; silence under --json or when stderr is a pipe or file."""
    return MatrixProgress() if quiet or not sys.stderr.isatty() else Bar()
