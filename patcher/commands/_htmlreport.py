"""`vpatch rollout report REPORT --html FILE` and `vpatch rollout --report-html FILE`: a
rollout's report as one self-contained HTML page (patcher/output/htmlreport.py renders it),
written atomically and never through a link planted at FILE (patcher.safewrite)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from patcher.errors import UsageError

if TYPE_CHECKING:
    from patcher.result import RunResult

WORD = "report"  # `vpatch rollout report REPORT --html FILE` (the word where a SPEC goes)
EXAMPLE = "e.g. vpatch rollout report rollout.json --html rollout.html"


def options(g: argparse._ArgumentGroup) -> None:
    """The two options, in rollout's group."""
    g.add_argument(
        "--html",
        metavar="FILE",
        help="with `vpatch rollout report REPORT --html FILE`: write REPORT (a rollout's "
        "--report or live report) as one self-contained HTML page: per host the verdict, "
        "each gate's evidence and its chart per interval (canary vs control or baseline), "
        "the phases on a timeline",
    )
    g.add_argument(
        "--report-html",
        metavar="FILE",
        help="at the rollout's end, also write its report as that HTML page to FILE",
    )


def check(args: argparse.Namespace) -> None:
    """Before any host is contacted: `--html` belongs to `rollout report`, and FILE of
    `--report-html` can be written (its directory opens, nothing planted at the name)."""
    from patcher import safewrite

    if args.html is not None:
        raise UsageError(
            "--html goes with `vpatch rollout report REPORT --html FILE`",
            "on a rollout, --report-html FILE writes the page at its end",
        )
    if args.report_html is not None:
        safewrite.check(args.report_html, "--report-html")


def report(args: argparse.Namespace) -> int:
    """`vpatch rollout report REPORT --html FILE`: exit 0 once FILE is written; 2 on bad
    input (no such report, not a rollout's, no --html), with nothing written."""
    from patcher.output.htmlreport import render
    from patcher.rollout.report import read_document

    given = args.specs[1:]
    if len(given) != 1 or not args.html:
        raise UsageError("`vpatch rollout report` needs one REPORT and --html FILE", EXAMPLE)
    if args.json:
        raise UsageError("`vpatch rollout report` writes HTML, not a --json document", EXAMPLE)
    hint = "give a rollout's report: its --report FILE, else the file it named on stderr"
    doc = read_document(given[0], "vpatch rollout report", hint)
    _write(args.html, render(doc), "--html")
    from patcher.output.inert import line

    print(line(f"wrote {args.html} ({len(doc['hosts'])} host(s))"))
    return 0


def _write(path: str, page: str, what: str) -> None:
    from patcher import safewrite

    try:
        safewrite.write(path, page, what)
    except OSError as exc:
        raise UsageError(
            f"{what} {path}: cannot write it: {exc.strerror or exc}",
            "give a path in a directory you can write",
        ) from None


def at_end(result: RunResult, path: str | None) -> None:
    """`--report-html FILE` once the rollout ended (or was stopped): the page of its final
    report. A write that fails now is one warning: the rollout ran, its JSON report stands,
    and `vpatch rollout report` can write the page from it later."""
    if path is None:
        return
    from patcher.output.htmlreport import render
    from patcher.output.lines import warning

    doc: dict[str, Any] = result.to_json()
    try:
        _write(path, render(doc), "--report-html")
    except UsageError as exc:
        warning(f"{exc.message}; `vpatch rollout report REPORT --html FILE` writes it later")
