"""vpatch's exit statuses, by name: what a script, a hook or a CI job branches on.

    OK            0    every target is in the desired state
    FAILED        1    a target failed, drifted, missed an anchor or was unreachable
    USAGE         2    bad input or usage: nothing was contacted, nothing written
    UNSUPPORTED   2    what a target holds cannot be patched (an editable install): as USAGE,
                       no run can succeed there as it is
    INTERRUPTED   130  Ctrl-C (128 + SIGINT, as a shell reports it)
    READER_GONE   141  stdout's reader exited (`vpatch schema | head`: 128 + SIGPIPE)

`patcher.errors` classes carry theirs as `exit_code` (1 or 2); these names say the same.
"""

from __future__ import annotations

import os
import sys
from enum import IntEnum
from typing import NoReturn


class ExitCode(IntEnum):
    """The status `vpatch` exits with; an int, so `sys.exit(ExitCode.USAGE)` is `exit 2`."""

    OK = 0
    FAILED = 1
    USAGE = 2
    UNSUPPORTED = 2
    INTERRUPTED = 130
    READER_GONE = 141


def of(ok: bool) -> ExitCode:
    """OK when `ok`, else FAILED: a command's usual last word."""
    return ExitCode.OK if ok else ExitCode.FAILED


def finish(code: int) -> NoReturn:
    """Exit now, skipping the interpreter's teardown: tearing down pydantic's schemas and every
    other module object costs ~25 ms, a tenth of a one-host apply, and serves nothing once a
    command has returned. By then every file vpatch wrote is closed (atomic writes), every
    child reaped (each transport is closed before its host's result exists), stdout and
    stderr flushed (cli.main); the one thread that can still run, the libcst prefetch
    (daemon), only imports."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # cli.main flushed and handled a closed reader already
    os._exit(code)
