"""Every `vpatch` subcommand: a lazy registry, name -> (module, one-line help), as pip's
`commands_dict`. Importing this package imports no command module: `vpatch --help` lists the
commands from COMMANDS alone, and `vpatch apply ...` builds and imports `hosts` only (not the
matrix, wheel or authoring code, nor their imports: tests/unit/test_startup.py pins that).

A command module has `add_options(parser, name)` (the options of subcommand `name`: one module
may serve several, e.g. hosts: apply, verify, rollback, status, ensure) and `run(args) -> int`
(the exit status, a `patcher.exitcodes.ExitCode`). Commands never import each other: what
several share lives in the `_`-modules here (`_targets`: target, SSH, Ray and fleet options and
the targets built from them), which are not commands.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, NamedTuple, NoReturn, Protocol

from patcher import __version__
from patcher.commands import _help
from patcher.errors import UsageError
from patcher.output import colour, progress

if TYPE_CHECKING:
    from types import ModuleType


class Command(NamedTuple):
    module: str  # under patcher.commands
    help: str  # the line `vpatch --help` shows
    usage: str | None = None  # when argparse's own would mislead (exec's `-- CMD`)


# In the order `vpatch --help` lists them.
COMMANDS: dict[str, Command] = {
    "apply": Command("hosts", "apply specs (then verify) on the targets"),
    "verify": Command("hosts", "check that specs are in effect on the targets"),
    "rollback": Command("hosts", "restore exact bytes (no SPEC: everything vpatch applied)"),
    "rollout": Command(
        "rollout",
        "apply, restart, wait for health, gate on live metrics; roll back if worse",
        "vpatch rollout SPEC... [options]\n"
        "       vpatch rollout release HOST... --run ID [target options]\n"
        "       vpatch rollout report REPORT --html FILE\n"
        "       vpatch rollout pause|resume|promote|abort REPORT [--json]",
    ),
    "status": Command("hosts", "what vpatch applied on the targets and whether it holds"),
    "ensure": Command("hosts", "apply what is missing, verify; exit 0 only when in place"),
    "exec": Command(
        "hooks",
        "ensure on the command's python, then exec the command (same PID)",
        "vpatch exec SPEC... [--python PATH] [options] -- CMD [ARGS...]",
    ),
    "hook": Command("hooks", "print a pre-start hook that runs `vpatch ensure`"),
    "check": Command("repo", "validate spec files offline (patch repos, pre-commit)"),
    "catalog": Command("repo", "list the spec ids SPEC can name, and where each is from"),
    "schema": Command("repo", "print the JSON Schema of the spec format"),
    "matrix": Command(
        "matrix", "check a spec against every release of its package (no host needed)"
    ),
    "diff": Command(
        "authoring", "show every file of a package that differs from pip's RECORD, as a diff"
    ),
    "capture": Command(
        "authoring", "write a spec that reproduces a host's hand edits of a package"
    ),
    "backport": Command(
        "authoring", "turn an upstream fix (a unified diff) into a spec for older releases"
    ),
    "wheel": Command(
        "wheel", "build a patched wheel of a release (for images, lock files, indexes)"
    ),
    "completion": Command("completion", "print a shell completion script"),
}


class CommandModule(Protocol):
    def add_options(self, parser: argparse.ArgumentParser, name: str) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def load(name: str) -> CommandModule:
    """The module of command `name` (imported now, on first use)."""
    module: ModuleType = importlib.import_module(f"patcher.commands.{COMMANDS[name].module}")
    found: CommandModule = module
    return found


class Parser(argparse.ArgumentParser):
    """Bad usage is a UsageError (one `error:` + `hint:`, exit 2; JSON with --json), never
    argparse's own exit."""

    def error(self, message: str) -> NoReturn:
        see = f"see `{self.prog} --help`"
        unknown = message.removeprefix("unrecognized arguments: ")
        if unknown != message:  # options this parser does not have: the closest one it has
            from patcher import suggest

            longs = [o for o in self._option_string_actions if o.startswith("--")]
            for word in unknown.split():
                if word.startswith("--") and (
                    close := suggest.closest(word.partition("=")[0], longs)
                ):
                    raise UsageError(message, f"did you mean {close[0]}? ({see})")
        raise UsageError(message, see)


def build_parser(
    commands: Collection[str] | None = None, only: bool = False
) -> argparse.ArgumentParser:
    """The CLI: every subcommand listed; the options built (and the module imported) only of
    `commands` (None: all, for the docs and the completion scripts). Building every
    subcommand's options costs more than anything else before the first host is contacted.
    `only`: the other subcommands are not even listed, for a command line whose command word
    is known (parse): it is parsed by its own subparser, whose prog, usage, help and errors
    do not depend on its siblings, and 16 unused parsers cost ~2 ms before the first host's
    session starts."""
    parser = Parser(prog="vpatch", description="Declarative, verified, reversible source patches.")
    parser.add_argument("--version", action="version", version=f"vpatch {__version__}")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout (as the command's own --json)",
    )
    global_options(parser)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands", parser_class=Parser
    )
    built: dict[str, argparse.ArgumentParser] = {}
    for name, cmd in COMMANDS.items():
        if only and name not in (commands or ()):
            continue
        p = sub.add_parser(name, help=cmd.help, usage=cmd.usage)
        if commands is None or name in commands:
            load(name).add_options(p, name)
            global_options(p)
            built[name] = p
    _help.describe(parser, built)
    return parser


QUIET_HELP = (
    "only results, the summary and errors: no progress, no note/warning lines (before or "
    "after COMMAND)"
)
VERBOSE_HELP = (
    "more detail on stderr: each host's agent command line, every agent exchange with its "
    "time, the agent's own stderr (before or after COMMAND)"
)


COLOR_HELP = (
    "colour in the output for people: auto (on a terminal, unless NO_COLOR is set; "
    "CLICOLOR_FORCE forces it), always, never (default: auto; before or after COMMAND)"
)


def global_options(p: argparse.ArgumentParser) -> None:
    """-q, -v and --color: the same on `vpatch` and on every subcommand (`vpatch -q apply ...`
    is `vpatch apply ... -q`)."""
    group = p.add_argument_group("output")
    group.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    group.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    group.add_argument("--color", choices=colour.CHOICES, metavar="WHEN", help=COLOR_HELP)


class Globals(NamedTuple):
    """The global options given before the command word (`vpatch --json -q apply ...`)."""

    words: list[str]  # as given, for the top-level parser when there is no command
    json: bool
    quiet: bool
    verbose: int
    color: str | None = None  # --color WHEN / --color=WHEN, as given (its parser checks it)


def _global_word(arg: str) -> str | None:
    """Which global option `arg` is (json, quiet, verbose; `-vv` too), as argparse would read
    it before the command word; None for anything else (`--ver` could be --version)."""
    if len(arg) >= 3 and "--json".startswith(arg):
        return "json"
    if arg == "-q" or (len(arg) >= 3 and "--quiet".startswith(arg)):
        return "quiet"
    if (len(arg) >= 2 and arg[0] == "-" and set(arg[1:]) == {"v"}) or (
        len(arg) >= 6 and "--verbose".startswith(arg)
    ):
        return "verbose"
    return None


def _color_word(argv: list[str], i: int) -> tuple[int, str | None] | None:
    """`--color WHEN` (two words) or `--color=WHEN` at argv[i], abbreviated as argparse would
    take it everywhere (`--col`: `--co` is also --connect-timeout): (words it takes, WHEN), or
    None when argv[i] is no --color."""
    name, eq, value = argv[i].partition("=")
    if not (len(name) >= 5 and "--color".startswith(name)):
        return None
    if eq:
        return 1, value
    return (2, argv[i + 1]) if i + 1 < len(argv) else (1, None)


def leading_globals(argv: list[str]) -> tuple[list[str], Globals]:
    """The global options before the command word, taken off (abbreviations argparse would
    accept too); the rest of argv."""
    i, json, quiet, verbose, color = 0, False, False, 0, None
    while i < len(argv):
        if (took := _color_word(argv, i)) is not None:
            color = took[1]
            i += took[0]
            continue
        if (kind := _global_word(argv[i])) is None:
            break
        json |= kind == "json"
        quiet |= kind == "quiet"
        if kind == "verbose":
            verbose += argv[i].count("v") if not argv[i].startswith("--") else 1
        i += 1
    return argv[i:], Globals(argv[:i], json, quiet, verbose, color)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line, options and positionals in any order (`status A --python X B`): the
    subcommand's own parser reads the rest intermixed, as a person types it. argparse cannot do
    that across subparsers, so the command word is looked up first."""
    argv, lead = leading_globals(list(argv))
    first = argv[0] if argv and not argv[0].startswith("-") else None
    if first is not None and first not in COMMANDS:
        from patcher import suggest

        close = suggest.did_you_mean(first, COMMANDS, "`vpatch {}`")
        raise UsageError(
            f"unknown command {first!r}",
            f"{close} (`vpatch --help` lists every command)"
            if close
            else f"the commands are {', '.join(COMMANDS)} (`vpatch --help` says what each does)",
        )
    parser = build_parser([first], only=True) if first in COMMANDS else build_parser(())
    sub = _help.subcommands(parser)[first] if first in COMMANDS else None
    if sub is None:
        return parser.parse_args([*lead.words, *argv])
    if lead.json and not any("--json" in a.option_strings for a in sub._actions):
        raise UsageError(
            f"vpatch {first} has no JSON output (--json)", f"run `vpatch {first}` without --json"
        )
    if sub.usage is None:
        # parse_intermixed_args sets usage to its own formatted text, which argparse then
        # %-formats: a `%` in a metavar (`--batch N|P%`) would crash `--help`. Escaped here.
        sub.usage = sub.format_usage().removeprefix("usage: ").replace("%", "%%")
    if lead.color is not None and lead.color not in colour.CHOICES:
        sub.error(
            f"argument --color: invalid choice: {lead.color!r} (choose from auto, always, never)"
        )
    args = sub.parse_intermixed_args(argv[1:])
    args.command = first
    args.color = args.color or lead.color
    args.json = getattr(args, "json", False) or lead.json or getattr(args, "format", "") == "json"
    args.quiet = args.quiet or lead.quiet
    args.verbose += lead.verbose
    if args.quiet and args.verbose:
        raise UsageError("-q/--quiet and -v/--verbose contradict each other", "give one of them")
    return args


def run(argv: Sequence[str], command: Sequence[str] | None = None) -> int:
    """Parse `argv`, then run the command; `command` is exec's CMD (what followed `--`)."""
    args = parse(argv)
    # a monitoring format's stdout is a document, and a Nagios check's stderr is shown too
    fmt = getattr(args, "format", None)
    quiet = args.quiet or fmt == "nagios"
    progress.configure(quiet, args.verbose, args.json or fmt in ("prometheus", "nagios"))
    colour.configure(args.color)
    args.exec_argv = None if command is None else list(command)
    if getattr(args, "wheelhouse", None):
        from patcher.wheels import wheelhouse

        args.wheelhouse = wheelhouse.checked(args.wheelhouse)  # bad input: exit 2 before work
    return load(args.command).run(args)
