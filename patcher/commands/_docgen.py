"""Reference pages generated from the code itself, for the docs site (`make docs`).

A hand-written field table drifts the day someone adds a field; these cannot. The mkdocs hook
(`docs/_hooks.py`) replaces each `<!-- vpatch:NAME -->` line of a page with `render(NAME)`:

    spec-fields     every model of the spec format (from `PatchSpec.model_json_schema()`)
    cli             `--help` of every subcommand (from the argparse parser `vpatch` runs)
    result-json     the `--json` document of apply/verify/rollback/status (patcher.result)
    outcomes        outcomes and which ones count as success, per command
    status-states   bare `vpatch status`'s states, each one's exit code and what to run
    matrix-json     the `vpatch matrix --json` document (patcher.wheels.matrix)
    figure-NAME     a figure drawn from the code (patcher.commands._figures), as an image

and `manpage()` writes vpatch(1) from the same parser (the hook puts it at site/vpatch.1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, get_args

from patcher import result
from patcher.commands._figures import FIGURES, image
from patcher.commands._help import subcommands
from patcher.plan.verdicts import MATRIX_FAILING, MatrixOutcome
from patcher.specs.validate import PatchSpec
from patcher.wheels import matrix

MARKER = re.compile(r"^<!-- vpatch:([a-z-]+) -->$", re.MULTILINE)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type(prop: dict[str, Any]) -> str:
    """A JSON Schema property's type in words: `string`, `list of Probe`, `A | B`, ..."""
    if "$ref" in prop:
        name = str(prop["$ref"]).rsplit("/", 1)[-1]
        return "TOML value" if name == "JsonValue" else name
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " \\| ".join(_type(p) for p in prop[key])
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items", {})
        return f"list of {_type(items)}" if items else "list"
    if kind is None:
        return "any JSON value"
    return str(kind)


def _constraints(prop: dict[str, Any]) -> str:
    words = []
    for key, text in (
        ("minLength", "min length"),
        ("minItems", "at least"),
        ("minimum", ">="),
        ("maximum", "<="),
        ("exclusiveMinimum", ">"),
    ):
        if key in prop:
            words.append(f"{text} {prop[key]}")
    return ", ".join(words)


def _model_table(name: str, schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    lines = [f"### `{name}`", ""]
    if schema.get("description"):
        lines += [" ".join(str(schema["description"]).split()), ""]
    lines += ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
    for field, prop in schema.get("properties", {}).items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        meaning = " ".join(filter(None, [prop.get("description", ""), _constraints(prop)]))
        row = [
            f"`{field}`",
            _type(prop),
            "yes" if field in required else "",
            default,
            _cell(meaning),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def _refs(node: Any) -> list[str]:
    """Names of the models `node` refers to, in the order a reader meets them."""
    if isinstance(node, dict):
        own = [str(node["$ref"]).rsplit("/", 1)[-1]] if "$ref" in node else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def spec_fields() -> str:
    """The file's top level first, then each model where a reader first meets it (breadth
    first: Variant, its edit ops, Probe, ...). Aliases without fields (JsonValue) are types."""
    schema = PatchSpec.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    out = _model_table("PatchSpec (the file)", schema)
    queue, seen = _refs(schema.get("properties", {})), set()
    while queue:
        name = queue.pop(0)
        if name in seen or "properties" not in defs.get(name, {}):
            continue
        seen.add(name)
        out += _model_table(name, defs[name])
        queue += _refs(defs[name].get("properties", {}))
    return "\n".join(out)


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps at $COLUMNS: fixed while the help is formatted, so the text is the same
    on every terminal."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


# The CLI reference's code blocks are at most this many characters wide: the site's content
# column holds about 80 monospace characters at 1,400 px, so 72 leaves room for a wider font
# (tests/unit/test_site.py measures every block of the built page in headless Chromium).
COLUMN = 72


def cli() -> str:
    """The CLI reference: per command (`vpatch` first) what it does, its usage wrapped to the
    site's column (`COLUMN`), a table of its options per argparse group (one stable anchor per
    option, `#apply--level`, `option_anchor`, with its help and its default) and its examples.
    Not `--help` verbatim: that is 100 columns of aligned text, wider than the page's column;
    the man page and `--help` keep that layout."""
    from patcher.commands import build_parser
    from patcher.commands._help import COMMANDS, TOP_EPILOG

    parser = build_parser()
    subs = subcommands(parser)
    words, _, example = TOP_EPILOG.partition("\n\nexample:\n")
    parts = ["## `vpatch`", "", _md_text(parser.description or ""), ""]
    parts += _usage(parser) + _option_tables("vpatch", parser)
    parts += ["**commands**", "", "| command | what it does |", "|---|---|"]
    for name, sub_action in _subactions(parser):
        parts.append(f"| [`{name}`](#vpatch-{name}) | {_cell(_md_text(sub_action.help or ''))} |")
    parts += ["", _md_text(" ".join(words.split())), ""]
    parts += _examples([line.strip() for line in example.splitlines()])
    for name, sub in subs.items():
        text, examples = COMMANDS[name]
        parts += [f"## `vpatch {name}`", "", _md_text(text), ""]
        parts += _usage(sub) + _option_tables(name, sub) + _examples(examples)
    return "\n".join(parts)


def _subactions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    """(name, the pseudo-action whose help `vpatch --help` lists) for every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [(a.dest, a) for a in action._get_subactions()]
    return []


def _md_text(text: str) -> str:
    """Help words as Markdown: backtick spans kept, `[`, `*`, `_` and `<` outside them literal
    (`[user@]host[:port]` is no link, `min_tokens_per_s_ratio` no emphasis)."""
    pieces = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(pieces), 2):
        pieces[i] = re.sub(r"([\\\[\]*_])", r"\\\1", pieces[i]).replace("<", "&lt;")
    return "".join(pieces)


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    with _columns(COLUMN + 2):  # argparse leaves 2 columns of COLUMNS free
        usage = parser.format_usage().strip()
    return ["```text", usage, "```", ""]


def _option_tables(command: str, parser: argparse.ArgumentParser) -> list[str]:
    """One table per argparse group (`options`, `ssh`, `fleet`, `output`, ...), as --help
    groups them; the subcommand list of `vpatch` itself is its own table."""
    shown = set(map(id, documented_actions(parser)))
    out: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if id(a) in shown]
        if actions:
            out += [f"**{_md_text(group.title or 'options')}**", ""]
            out += _option_table(command, actions)
    return out


def _examples(lines: list[str]) -> list[str]:
    if not lines:
        return []
    wrapped = [w for line in lines for w in _wrap_command(line, COLUMN)]
    return ["Example:", "", "```sh", *wrapped, "```", ""]


def _wrap_command(line: str, width: int) -> list[str]:
    """A shell line over `width` characters as continued lines (` \\`, then 4 spaces), broken
    only between words, a quoted word whole and an option next to its value."""
    if len(line) <= width:
        return [line]
    words = re.findall(r"(?:'[^']*'|\"[^\"]*\"|\S)+", line)
    units: list[str] = []
    for word in words:
        if units and units[-1].startswith("-") and " " not in units[-1] and word[:1] != "-":
            units[-1] += " " + word
        else:
            units.append(word)
    out, current = [], ""
    for unit in units:
        if current and len(current) + 1 + len(unit) + 2 > width:
            out.append(current + " \\")
            current = "    " + unit
        else:
            current = f"{current} {unit}" if current else unit
    return [*out, current]


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options and positionals a reference page lists (not the subcommand word itself)."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction) and a.help != argparse.SUPPRESS
    ]


def option_anchor(command: str, action: argparse.Action) -> str:
    """The anchor of an option on the CLI reference page: the command, then its longest
    option string (`apply--level`, `vpatch--json`), or `-` and the positional's metavar
    (`apply-spec`). Stable: it changes only when the option is renamed."""
    if action.option_strings:
        return command + max(action.option_strings, key=len)
    name = action.metavar if isinstance(action.metavar, str) else action.dest
    return f"{command}-{name.lower()}"


def _option_default(action: argparse.Action) -> str:
    value = action.default
    if action.nargs == 0 or value is None or value is argparse.SUPPRESS or value in ("", [], ()):
        return ""
    return f"`{value}`"


def _option_table(command: str, actions: list[argparse.Action]) -> list[str]:
    rows = ["| option | meaning | default |", "|---|---|---|"]
    for action in actions:
        anchor = option_anchor(command, action)
        head = _option_head_md(action)
        meaning = (action.help or "").replace("%%", "%").replace("<", "&lt;")
        rows.append(
            f"| [{head}](#{anchor}){{#{anchor}}} | {_cell(meaning)} | {_option_default(action)} |"
        )
    return [*rows, ""]


def _option_head_md(action: argparse.Action) -> str:
    """`--level {static,import,full}`, `-q, --quiet`, `SPEC`: as --help writes it."""
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    value = _value_name(action)
    return f"`{names} {value}`" if names else f"`{value}`"


def _value_name(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


def _dataclass_table(cls: type[Any]) -> list[str]:
    lines = [f"### `{cls.__name__}`", ""]
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(f"{cls.__name__}("):  # skip the auto-generated signature
        lines += [" ".join(doc.split()), ""]
    lines += ["| key | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        if not f.repr:
            continue
        if f.default is not dataclasses.MISSING:
            default = f"`{json.dumps(f.default)}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{json.dumps(f.default_factory())}`"
        else:
            default = ""
        lines.append(f"| `{f.name}` | `{_cell(str(f.type))}` | {default} |")
    return [*lines, ""]


def result_json() -> str:
    classes = [
        result.RunResult,
        result.HostResult,
        result.PatchResult,
        result.FileChange,
        result.ProbeResult,
    ]
    return "\n".join(line for cls in classes for line in _dataclass_table(cls))


def outcomes() -> str:
    names = get_args(result.Outcome)
    commands = list(result.GOOD)
    lines = [
        "| outcome | " + " | ".join(f"`{c}`" for c in commands) + " |",
        "|---|" + "---|" * len(commands),
    ]
    for name in names:
        marks = ["ok" if name in result.GOOD[c] else "" for c in commands]
        lines.append(f"| `{name}` | " + " | ".join(marks) + " |")
    return "\n".join(lines) + "\n"


def matrix_json() -> str:
    rows = ["| outcome | exit 1? |", "|---|---|"]
    for name in get_args(MatrixOutcome):
        rows.append(f"| `{name}` | {'yes' if name in MATRIX_FAILING else ''} |")
    return "\n".join(_dataclass_table(matrix.Release) + rows) + "\n"


# ---------------------------------------------------------------------------------------------
# vpatch(1): the man page, from the parser `vpatch` runs (what --help says, in roff)


def _roff(text: str) -> str:
    """Text for a roff line: backslashes and hyphens escaped, a leading `.` or `'` (a request)
    made literal."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + out if out[:1] in (".", "'") else out


def _roff_lines(text: str) -> list[str]:
    return [_roff(line) if line.strip() else ".PP" for line in text.splitlines()]


def _option_head(action: Any) -> str:
    """`\\fB\\-\\-level\\fR \\fILEVEL\\fR`: the option strings in bold, the value in italics."""
    names = ", ".join(f"\\fB{_roff(o)}\\fR" for o in action.option_strings)
    if action.nargs == 0:
        return names
    names += " " if names else ""
    return f"{names}\\fI{_roff(_value_name(action))}\\fR"


def manpage() -> str:
    """vpatch(1): NAME, SYNOPSIS, DESCRIPTION, then per command its description, usage,
    positionals and options (each default said as `--help` says it), examples, EXIT STATUS."""
    from patcher import __version__
    from patcher.commands import build_parser
    from patcher.commands._help import COMMANDS, TOP_EPILOG, help_with_default

    parser = build_parser()
    out = [
        f'.TH VPATCH 1 "" "vpatch {_roff(__version__)}" "User Commands"',
        ".SH NAME",
        "vpatch \\- declarative, verified, reversible source patches for installed Python packages",
        ".SH SYNOPSIS",
        "\\fBvpatch\\fR [\\fB\\-\\-json\\fR] [\\fB\\-q\\fR | \\fB\\-v\\fR] \\fICOMMAND\\fR "
        "[\\fIoptions\\fR] [\\fISPEC\\fR...]",
        ".SH DESCRIPTION",
        *_roff_lines(TOP_EPILOG.split("\n\nexample:")[0]),
        ".SH COMMANDS",
    ]
    for name, sub in subcommands(parser).items():
        text, examples = COMMANDS[name]
        out += [f".SS {_roff(name)}", _roff(text), ".PP", ".nf"]
        with _columns(80):
            usage = sub.format_usage().strip()
        out += [_roff(line) for line in usage.splitlines()]
        out += [".fi"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            head = _option_head(action)
            helptext = help_with_default(action).replace("%%", "%")
            out += [".TP", head, _roff(" ".join(helptext.split()))]
        out += [".PP", "Example:", ".PP", ".nf", *(_roff(f"  {e}") for e in examples), ".fi"]
    out += [
        ".SH EXIT STATUS",
        ".TP",
        "0",
        "the desired state everywhere (every host answered, every spec in a good outcome)",
        ".TP",
        "1",
        "a target failed (its error says why)",
        ".TP",
        "2",
        "bad input or usage: nothing was contacted or written",
        ".SH SEE ALSO",
        "\\fBvpatch COMMAND \\-\\-help\\fR; the documentation site built by \\fBmake docs\\fR",
    ]
    return "\n".join(out) + "\n"


def status_states() -> str:
    """Bare `vpatch status` as a monitor: every state, its exit code, what to run
    (patcher.plan.monitor.STATES, one golden case per row in tests/cases/status/)."""
    from patcher.plan import monitor

    rows = ["| state | exit | means | what to run |", "|---|---|---|---|"]
    for st in monitor.STATES:
        todo = _cell(st.todo) if st.todo else "nothing"
        rows.append(f"| `{st.name}` | {st.exit} | {_cell(st.means)} | {todo} |")
    return "\n".join(rows) + "\n"


def host_states() -> str:
    """A host's `state` in one word, worst first, with what a Nagios check makes of it
    (patcher.plan.monitor.HOST_STATES and NAGIOS; the feeds' golden cases in
    tests/cases/feeds/)."""
    from patcher.plan import feeds, monitor

    means = {s.name: s.means for s in monitor.STATES}
    means[monitor.OK] = "answered, and nothing on it needs a person"
    means[monitor.UNREACHABLE] = (
        "no connection: refused, timed out, no route, a name that does not resolve"
    )
    means[monitor.ERROR] = (
        "reached, but no state read: authentication, the host key, the interpreter, the agent"
    )
    rows = ["| state | Nagios | means |", "|---|---|---|"]
    for name in monitor.HOST_STATES:
        code = monitor.NAGIOS[name]
        rows.append(f"| `{name}` | {code} {feeds.WORDS[code]} | {_cell(means[name])} |")
    return "\n".join(rows) + "\n"


def prometheus_metrics() -> str:
    """Every metric of `vpatch status --format prometheus` (patcher.plan.feeds.METRICS)."""
    from patcher.plan import feeds

    rows = ["| metric | labels | value |", "|---|---|---|"]
    for name, (text, labels) in feeds.METRICS.items():
        shown = ", ".join(f"`{label}`" for label in labels) or "none"
        rows.append(f"| `{name}` | {shown} | {_cell(text)} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "spec-fields": spec_fields,
    "status-states": status_states,
    "host-states": host_states,
    "prometheus-metrics": prometheus_metrics,
    "cli": cli,
    "result-json": result_json,
    "outcomes": outcomes,
    "matrix-json": matrix_json,
}


def expand(markdown: str, base: str = "") -> str:
    """Replace every `<!-- vpatch:NAME -->` line; an unknown NAME is an error (strict docs).
    `figure-NAME` is the image of a figure (`_figures.FIGURES`, rendered into the site as
    figures/NAME.svg), linked from a page `base` (`../` per folder) below the root."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name.startswith("figure-") and name[len("figure-") :] in FIGURES:
            return image(name[len("figure-") :], base)
        if name not in GENERATORS:
            known = [*GENERATORS, *(f"figure-{f}" for f in FIGURES)]
            raise KeyError(f"unknown docs marker vpatch:{name} (known: {', '.join(known)})")
        return GENERATORS[name]()

    return MARKER.sub(one, markdown)
