"""Render a RunResult as one JSON document, or for people (rich, in `patcher.output.human`, imported
only then), and the `error:`/`hint:` summary of a failed run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from patcher.output import jsontext
from patcher.output.inert import clean
from patcher.output.progress import HostsProgress
from patcher.result import GOOD, SCHEMA_VERSION, RunResult


def emit(doc: dict[str, Any], out: TextIO | None = None) -> None:
    """One JSON document (every `--json` output goes through here), in one write."""
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    out.write(jsontext.dumps(doc) + "\n")


def error_document(message: str, hint: str, command: str | None, **more: Any) -> dict[str, Any]:
    """What `--json` prints when vpatch stops on an error before (or instead of) a result: a
    script reading stdout gets a document on every exit, never an empty string to fail on.
    `command` and `ok` as every document has them, so a reader tells the kinds apart by the
    same two keys (`command` is None when the command line named no command vpatch knows)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "ok": False,
        "error": message,
        "hint": hint,
        **more,
    }


def render_json(result: RunResult, out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    emit(result.to_json(), out)


def write_report(result: RunResult, path: str) -> None:
    """`--report FILE`: the same JSON document, written atomically and never through a link
    planted at the name (patcher.safewrite)."""
    from patcher import safewrite

    safewrite.write(path, jsontext.dumps(result.to_json()) + "\n")


def render_human(result: RunResult, show_diff: bool = False, out: TextIO | None = None) -> None:
    """One host: its details. A fleet: a summary table, then details of hosts that are not ok
    (or of every host with --diff), then totals."""
    out = out or sys.stdout  # looked up now: a default would keep the stream of import time
    from patcher.output import human

    human.render_human(result, show_diff, out)


@contextmanager
def progress_for(total: int, quiet: bool) -> Iterator[HostsProgress]:
    """A live bar for fleets on a terminal; a silent stand-in otherwise (no control codes)."""

    if quiet or total < 2 or not sys.stderr.isatty():
        yield HostsProgress()
        return
    from patcher.output.human import Bar

    bar = Bar()
    try:
        yield bar
    finally:
        bar.stop()


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
    ("only as an edit outside vpatch", "`vpatch apply SPEC --adopt` records it as SPEC's"),
    (
        "differs from pip's RECORD",
        "find out who edited it (`vpatch diff PACKAGE`); --force patches the file as it is",
    ),
    ("verify failed", "the probe says the patch does not work here; nothing stays changed"),
    (
        "vpatch's journal has nothing of it to undo",
        "a baked spec leaves with its wheel: reinstall pip's wheel as the message says",
    ),
    (
        "is applied on none of the targets",
        "a mistyped id? `vpatch status` lists the ids applied on each target (rolled back "
        "already: nothing is left to do)",
    ),
)
_OUTCOME_HINTS = {
    "not_applicable": "the spec does not cover what is installed on this target",
    "anchor_missing": "the installed code is not what the spec expects (`vpatch matrix SPEC`)",
    "ambiguous": "say which place with `occurrence = N` on the edit (the places are listed, "
    "1 is the first in the file), or narrow its scope (Class.method)",
    "drifted": "`vpatch status` says what the file is now; --force overrides",
    "modified": "the file was edited outside vpatch; reinstall the package, or --force",
    "superseded": "the package was reinstalled or upgraded; the journal entry is retired",
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
        if h.error:
            msg = h.error
            where = "" if msg.startswith(f"{h.target}: ") else f"{h.target}: "
            out.append((where + msg, h.hint or "run `vpatch status` on this target"))
        for a in h.attention:  # bare status: each state that needs a person, what to run
            out.append((f"{h.target}: {a.subject}: {a.state}: {a.message}", a.todo))
        told = {a.subject for a in h.attention}
        for p in h.patches:
            if p.id in told:
                continue
            bad = [pr for pr in p.probes if not pr.ok]
            if (p.outcome in good and not bad) or (msg and p.message == msg):
                continue  # good, or the host error again (a failed commit fails its specs)
            why = p.message or (f"{bad[0].name}: {bad[0].detail}" if bad else "")
            hint = next((t for words, t in _MESSAGE_HINTS if words in why), "")
            hint = hint or _OUTCOME_HINTS.get(p.outcome, "see the report above")
            out.append((f"{h.target}: {p.id}: {p.outcome}: {why}".rstrip(": "), hint))
    return out


def render_problems(result: RunResult, err: TextIO | None = None) -> None:
    """`error:` per problem (first line of each message), then the first problem's `hint:`."""
    err = err or sys.stderr  # looked up now: a default would keep the stream of import time
    found = problems(result)
    for msg, _hint in found:
        print(f"error: {clean(msg.splitlines()[0] if msg else msg)}", file=err)
    if found:
        print(f"hint: {clean(found[0][1])}", file=err)
