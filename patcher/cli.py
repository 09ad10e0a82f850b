"""The process edge: argv in, one exit status out (patcher.exitcodes.ExitCode), and every
expected failure as one `error:` line plus a `hint:` (with --json, also one JSON document on
stdout), never a traceback. What each command does, and its options, is patcher.commands.

Exit codes: 0 every host in the desired state; 1 a host failed, drifted, missed an anchor or
was unreachable; 2 bad input or usage (nothing contacted, nothing written); 130 interrupted;
141 the reader of stdout went away.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from select import POLLERR, POLLOUT, poll

# Only what parsing and error reporting need is imported here. Every other module is imported
# by the command that uses it (issue 18: `vpatch apply` should reach its first host in about
# twice an interpreter's start): the registry imports one command module, that module what it
# uses when it runs: pydantic and the spec models come with the first spec loaded, paramiko
# with the first SSH target, rich only when a person reads the output, libcst only on a
# rewrite-cache miss. tests/unit/test_startup.py pins what an apply imports.
from patcher import commands
from patcher.errors import VpatchError
from patcher.exitcodes import ExitCode


def run(argv: Sequence[str]) -> int:
    """Run one command line; its exit status. Expected failures are raised (main says them)."""
    argv, command = _split_exec(list(argv))
    return commands.run(argv, command)


def _split_exec(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`vpatch exec SPEC... -- CMD ARGS`: what follows the first `--` is the command, never
    parsed by vpatch (`vllm serve --port 8000` must not meet vpatch's options)."""
    words = commands.leading_globals(argv)[0]  # `vpatch --json -q exec ...` too
    if words[:1] != ["exec"] or "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


def _wants_json(argv: Sequence[str]) -> bool:
    """--json (or an abbreviation argparse accepts) before any `--`: known even when parsing
    fails, so that error is a JSON document too."""
    for arg in argv:
        if arg == "--":
            return False
        if len(arg) >= 3 and "--json".startswith(arg):
            return True
    return False


def _format_word(argv: Sequence[str]) -> str | None:
    """The value of `--format` (or `--format=`, an abbreviation argparse accepts) before any
    `--`: known even when parsing fails, so that a check's bad input is UNKNOWN (exit 3, not
    the exit 2 Nagios reads as CRITICAL) and `--format json`'s is a JSON document."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        name, eq, value = arg.partition("=")
        if len(name) >= 3 and "--format".startswith(name):
            return value if eq else argv[i + 1] if i + 1 < len(argv) else None
    return None


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand the command line names (after any global options), if vpatch has it:
    the error document's `command`, known even when parsing failed."""
    words = commands.leading_globals(list(argv))[0]
    return words[0] if words and words[0] in commands.COMMANDS else None


def _fail(message: str, hint: str, code: int, as_json: bool, command: str | None) -> int:
    """`error:` and `hint:` on stderr, and with --json the same as one document on stdout;
    the exit status `code`."""
    from patcher.output.lines import put

    put(f"error: {message}", sys.stderr)
    if hint:
        put(f"hint: {hint}", sys.stderr)
    if as_json:
        from patcher.output.report import emit, error_document

        emit(error_document(message, hint, command))
    return code


def _unknown(message: str, hint: str) -> int:
    """A Nagios check that stopped before any state was known (bad input, Ctrl-C): its plugin
    line, `VPATCH UNKNOWN - error: ...`, on stdout, and UNKNOWN's exit status, 3 (the usual 2
    is CRITICAL to Nagios: a typo in an inventory would page as a broken fleet)."""
    from patcher.output.lines import put
    from patcher.plan import feeds, monitor

    put(feeds.usage_line(message, hint))
    return monitor.NAGIOS_UNKNOWN


def _reader_gone() -> bool:
    """Whether stdout or stderr is a pipe whose reader has exited (poll says POLLERR)."""
    poller = poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poller.register(stream.fileno(), POLLOUT)
        except (AttributeError, ValueError, OSError):
            continue  # replaced by something without a descriptor (tests), or closed
    return any(events & POLLERR for _fd, events in poller.poll(0))


def _quiet_exit() -> int:
    """The reader went away (`vpatch schema | head -2`): stop without a word, as a Unix tool
    killed by SIGPIPE does, and with its status (128 + 13). SIGPIPE itself stays ignored, as
    Python sets it: a dead agent's pipe must be an error vpatch reports, not its death."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())  # what is still buffered goes nowhere, silently
        except (AttributeError, ValueError, OSError):
            continue
    return ExitCode.READER_GONE


def main(argv: Sequence[str] | None = None) -> int:
    """`vpatch ARGV`: the exit status, every expected failure said as `error:` + `hint:`."""
    args = list(sys.argv[1:] if argv is None else argv)
    fmt = _format_word(args)
    nagios = fmt == "nagios"
    as_json = (_wants_json(args) or fmt == "json") and not nagios
    try:
        try:
            code = run(args)
        except VpatchError as exc:
            code = _fail(exc.message, exc.hint, exc.exit_code, as_json, _command_word(args))
            code = _unknown(exc.message, exc.hint) if nagios else code
        except KeyboardInterrupt:
            hint = "run `vpatch status` to see what state the targets are in"
            code = _fail("interrupted", hint, ExitCode.INTERRUPTED, as_json, _command_word(args))
            code = _unknown("interrupted", hint) if nagios else code
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        if not _reader_gone():
            raise  # an agent's pipe, not ours: a bug to see, not to hide
        return _quiet_exit()
    return int(code)


if __name__ == "__main__":
    from patcher.exitcodes import finish

    finish(main())
