"""`vpatch exec` (ensure on the command's python, then become the command) and `vpatch hook
systemd` (a drop-in whose ExecStartPre runs `vpatch ensure` before every start).

The ensure itself is patcher.run.ensure (logic); what a hook prints is patcher.commands._ensureview.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from patcher.commands import _targets
from patcher.commands._help import SPEC_HELP
from patcher.errors import HostError, UsageError
from patcher.exitcodes import ExitCode

if TYPE_CHECKING:
    from patcher.plan.base import Options
    from patcher.result import HostResult
    from patcher.run.exchange import RunContext
    from patcher.specs.model import PatchSpec

_STATE_DIR_HELP = "journal/backup dir (default: <prefix>/.vpatch)"


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    """The options of `vpatch exec` or `vpatch hook`."""
    if name == "hook":
        p.add_argument("kind", choices=["systemd"], help="the init system the hook is for: systemd")
    p.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    if name == "exec":
        p.add_argument(
            "--python", metavar="PATH", help="interpreter to patch (default: the one CMD runs on)"
        )
        _targets.ensure_level(p)
        p.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")
        p.add_argument("--state-dir", metavar="DIR", help=_STATE_DIR_HELP)
        return
    p.add_argument("--service", required=True, help="unit name, e.g. vllm (vllm.service)")
    p.add_argument(
        "--python", metavar="PATH", required=True, help="absolute path of the service's python"
    )
    _targets.ensure_level(p)
    p.add_argument("--state-dir", metavar="DIR", help=_STATE_DIR_HELP)
    p.add_argument("--vpatch", metavar="PATH", help="vpatch the unit runs (default: this one)")
    p.add_argument(
        "--privileged", action="store_true", help="run ensure as root even with User= ('+')"
    )


def run(args: argparse.Namespace) -> int:
    if args.command == "hook":
        extra = [*(["--level", args.level] if args.level else [])]
        extra += ["--state-dir", os.path.abspath(args.state_dir)] if args.state_dir else []
        vp = [args.vpatch] if args.vpatch else None
        text = systemd_dropin(args.service, args.specs, args.python, extra, vp, args.privileged)
        print(text, end="")
        return ExitCode.OK
    return _exec(args, args.exec_argv)


def _exec(args: argparse.Namespace, command: list[str] | None) -> int:
    """ensure, then become CMD; CMD never starts unless every spec is in place."""
    if command is None:
        raise UsageError("exec needs `--` then the command", "vpatch exec SPEC -- vllm serve M")
    from patcher.commands import _ensureview
    from patcher.result import RunResult
    from patcher.run import ensure
    from patcher.run.exchange import RunContext
    from patcher.specs import catalog

    specs = catalog.load_all(args.specs)
    exe = resolve_command(command)
    python = exec_python(exe, args.python)
    opts = ensure.ensure_options(args.level, args.force)
    ctx = RunContext()
    host = _ensure_local(specs, python, opts, args.state_dir, ctx)
    # stdout belongs to the command: the hook's lines go to stderr (the service's log).
    _ensureview.render_ensure(RunResult("ensure", host.ok, [host]), sys.stderr, sys.stderr)
    if not host.ok:
        print(f"error: not starting {command[0]}: patches not in place", file=sys.stderr)
        return ExitCode.UNSUPPORTED if ctx.unsupported else ExitCode.FAILED
    exec_command(exe, command)


def _ensure_local(
    specs: list[PatchSpec], python: str, opts: Options, state_dir: str | None, ctx: RunContext
) -> HostResult:
    """`ensure` on this machine's `python` (what `exec` runs before it becomes the command)."""
    from patcher.inventory.targets import Target
    from patcher.run import engine, ensure
    from patcher.transports import open_transport

    try:
        transport = open_transport(Target("local", "local", python=python, local=True))
    except HostError as exc:
        return engine.connect_error("local", exc)
    try:
        return ensure.ensure(specs, transport, opts, state_dir, ctx=ctx)
    finally:
        transport.close()


# ---------------------------------------------------------------------------------------------
# exec: ensure, then become the command (same PID: signals and exit status are the command's)

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def resolve_command(command: list[str]) -> str:
    """Absolute path of the program, found like execvp would (PATH, no shell), before anything
    is touched: a typo must not cost a patch run first."""
    if not command:
        raise UsageError("exec needs a command after `--`", "e.g. vpatch exec SPEC -- vllm serve M")
    exe = shutil.which(command[0])
    if exe is None:
        raise UsageError(
            f"exec: command {command[0]!r} not found (PATH or not executable)",
            "give the program's absolute path, e.g. /srv/venv/bin/vllm",
        )
    return os.path.abspath(exe)


def interpreter_for(exe: str) -> str | None:
    """The python `exe` runs on: itself if it is a python, else its shebang's (a console script
    such as `vllm` starts with `#!/srv/venv/bin/python`). None when it cannot tell.

    Symlinks are not resolved: a venv's bin/python is a symlink, and resolving it would name the
    base interpreter, whose site-packages is not the venv's."""
    if _PYTHON.fullmatch(os.path.basename(exe)):
        return exe
    try:
        with open(exe, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    lines = head.split(b"\n")
    if not lines[0].startswith(b"#!"):
        return None
    words = lines[0][2:].decode("utf-8", "replace").split()
    # pip's launcher for paths a shebang cannot hold: `#!/bin/sh` + `'''exec' "/p y/python" ...`
    if words == ["/bin/sh"] and len(lines) > 1 and lines[1].startswith(b"'''exec' "):
        words = shlex.split(lines[1][len(b"'''exec' ") :].decode("utf-8", "replace"))[:1]
    elif words and os.path.basename(words[0]) == "env":
        found = [w for w in words[1:] if not w.startswith("-") and "=" not in w][:1]
        words = [shutil.which(found[0]) or found[0]] if found else []
    if words and _PYTHON.fullmatch(os.path.basename(words[0])) and os.path.isabs(words[0]):
        return words[0]
    return None


def exec_python(exe: str, python: str | None) -> str:
    """The interpreter to ensure: --python if given, else the one the command runs on."""
    if python:
        return python
    found = interpreter_for(exe)
    if found is None:
        raise UsageError(
            f"exec: cannot tell which python {exe} runs on (not a python, no python shebang)",
            "pass --python with the interpreter of the environment the command serves from",
        )
    return found


def exec_command(exe: str, command: list[str]) -> NoReturn:
    """Replace this process with the command: same PID, so a supervisor's signals reach the
    server and its exit status is the unit's.

    Python ignores SIGPIPE and SIGXFSZ at start-up, and ignored signals survive exec: put them
    back to default so the server starts as it would without vpatch in front of it."""
    sys.stdout.flush()
    sys.stderr.flush()
    for name in ("SIGPIPE", "SIGXFSZ"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    try:
        # process-start: the operator's server command, exec'd as given: it is what `vpatch
        # exec` runs in its place (same cwd and environment as without vpatch in front of it).
        os.execv(exe, command)
    except OSError as exc:
        raise HostError(
            f"exec: cannot run {exe}: {exc.strerror}", "check the command runs without vpatch"
        ) from None


# ---------------------------------------------------------------------------------------------
# systemd drop-in

_UNIT = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")
_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")


def systemd_quote(word: str) -> str:
    """One argument of an Exec*= line, read back by systemd as exactly `word`.

    systemd expands `%` specifiers and `$VAR` in every word and splits on spaces with its own
    quoting rules (not a shell's): `%%` and `$$` are literal, double quotes group, and backslash
    escapes inside them. Control characters have no safe spelling, so they are refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        raise UsageError(
            f"{word!r} holds a control character", "systemd lines cannot carry it safely"
        )
    if word and _SYSTEMD_SAFE.fullmatch(word):
        return word.replace("%", "%%")
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def vpatch_argv() -> list[str]:
    """How a unit should start this vpatch: its console script by absolute path, else
    `python -m patcher.cli` with this interpreter (systemd's PATH is not the user's)."""
    here = Path(sys.argv[0])
    if here.name == "vpatch" and here.exists():
        return [os.path.abspath(here)]
    sibling = Path(sys.executable).parent / "vpatch"
    if sibling.exists():
        return [os.path.abspath(sibling)]
    found = shutil.which("vpatch")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "patcher.cli"]


def _unit_name(service: str) -> str:
    name = service.removesuffix(".service")
    if not name or not _UNIT.fullmatch(name):
        raise UsageError(
            f"--service {service!r} is not a unit name", "e.g. --service vllm (for vllm.service)"
        )
    return name


def systemd_dropin(
    service: str,
    spec_args: list[str],
    python: str,
    extra: list[str] | None = None,
    vpatch: list[str] | None = None,
    privileged: bool = False,
) -> str:
    """The text of `<service>.service.d/vpatch.conf`. Specs are validated now and named by
    absolute path (a unit runs in /); the interpreter must be an absolute path too."""
    name = _unit_name(service)
    if vpatch and not os.path.isabs(vpatch[0]):
        raise UsageError(
            f"--vpatch {vpatch[0]!r} is not an absolute path",
            "e.g. --vpatch /opt/vpatch/bin/vpatch",
        )
    if not os.path.isabs(python):
        raise UsageError(
            f"--python {python!r} is not an absolute path",
            "a unit does not run with your PATH: pass e.g. --python /srv/venv/bin/python",
        )
    from patcher.specs import catalog

    catalogs = catalog.Catalog()
    catalogs.load_all(spec_args)  # bad spec -> exit 2 now, not a unit that never starts
    paths = [str(catalogs.resolve(a).resolve()) for a in spec_args]
    argv = [*(vpatch or vpatch_argv()), "ensure", *paths, "--python", python, *(extra or [])]
    cmdline = " ".join(systemd_quote(w) for w in argv)
    prefix = "+" if privileged else ""
    return "\n".join(
        [
            f"# /etc/systemd/system/{name}.service.d/vpatch.conf (from `vpatch hook systemd`)",
            f"# Before every start of {name}, vpatch makes sure the patches are in place",
            "# (re-applying them after an upgrade or a reinstall wiped them). If it cannot,",
            f"# the start fails and `journalctl -u {name}` has one line per problem.",
            "# After installing this file: systemctl daemon-reload",
            "[Service]",
            f"ExecStartPre={prefix}{cmdline}",
            "",
        ]
    )
