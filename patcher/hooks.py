"""Pre-start hooks: `ensure` (apply if needed, then verify), `exec` (ensure, then become the
server), and the systemd drop-in that runs `ensure` before every start.

A hook runs on every server start, so its common case is "everything is already in place" and
that case must cost one agent call: journal + sha256 say so (static), nothing is rewritten and
nothing is imported. Levels:

    default        static when nothing was written; `full` (import + probes) after a write,
                   and a failed check restores the previous bytes (as `apply` does)
    --level X      X after a write AND a verify at X of the specs already in place (e.g.
                   `--level full` in CI runs the probes even when nothing changed)

A probe imports its module itself, so after a write `full` costs no more than `import` when the
spec has probes (one fresh interpreter, ~8 s on vLLM), and it is the only check that can tell a
patch that imports from a patch that works.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TextIO

from patcher import catalog, engine
from patcher.engine import Level, Options, RunContext
from patcher.errors import HostError, UsageError
from patcher.inert import clean, line
from patcher.report import problems
from patcher.result import GOOD, HostResult, PatchResult, RunResult, host_ok
from patcher.spec import PatchSpec
from patcher.transport import LocalTransport, Transport

WRITE_LEVEL: Level = "full"
# Outcomes that say "in place without a write": the only ones `--level` re-checks.
_IN_PLACE = ("already_applied", "satisfied_upstream")


@dataclass(frozen=True)
class EnsureOptions(Options):
    """`level` checks what ensure writes; `recheck` (the explicit `--level`, if any) also checks
    the specs that were already in place. It is an `Options`, so the fleet code passes it on
    untouched."""

    recheck: Level | None = None


def ensure_options(level: Level | None, force: bool = False) -> EnsureOptions:
    return EnsureOptions(force=force, level=level or WRITE_LEVEL, recheck=level)


def ensure(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """`apply` semantics (it writes only what is missing, and a write is verified and undone if
    the check fails), plus a re-check of what was already in place when `--level` asks.
    Without `ctx` (engine.RunContext), the call is a run of its own."""
    started = time.monotonic()
    ctx = ctx if ctx is not None else RunContext()
    host = engine.apply(specs, transport, opts, state_dir, ctx=ctx)
    recheck = opts.recheck if isinstance(opts, EnsureOptions) else None
    if recheck is not None and host.error is None:
        _recheck(host, specs, transport, recheck, state_dir, ctx)
    host.ok = host_ok("ensure", host)
    host.seconds = round(time.monotonic() - started, 3)
    return host


def _recheck(
    host: HostResult,
    specs: list[PatchSpec],
    transport: Transport,
    level: Level,
    state_dir: str | None,
    ctx: RunContext,
) -> None:
    """Verify specs that were in place without a write; a failed check replaces the outcome."""
    by_id = {p.id: p for p in host.patches}
    todo = [s for s in specs if s.id in by_id and by_id[s.id].outcome in _IN_PLACE]
    if not todo:
        return
    checked = engine.verify(todo, transport, Options(level=level), state_dir, ctx=ctx)
    if checked.error is not None:
        host.error = checked.error
        return
    for v in checked.patches:
        mine = by_id[v.id]
        mine.probes = v.probes
        if v.outcome not in GOOD["verify"] or not all(p.ok for p in v.probes):
            mine.outcome, mine.message = v.outcome, v.message


def ensure_local(
    specs: list[PatchSpec],
    python: str,
    opts: Options,
    state_dir: str | None = None,
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """`ensure` on this machine's `python` (what `exec` runs before it becomes the command)."""
    try:
        transport = LocalTransport(python)
    except HostError as exc:
        return engine.connect_error("local", exc)
    try:
        return ensure(specs, transport, opts, state_dir, ctx=ctx)
    finally:
        transport.close()


# ---------------------------------------------------------------------------------------------
# Rendering: a hook's output lands in journald / container logs, so it is terse and line based.


def problem_lines(result: RunResult) -> list[str]:
    """One `error:` line per problem: a host that failed, or a spec not in the desired state
    (a spec that failed with its host's error is that error, said once)."""
    return [clean(f"error: {msg.splitlines()[0] if msg else msg}") for msg, _ in problems(result)]


def hint_line(result: RunResult) -> str | None:
    """The `hint:` that follows the error lines: the first problem's (report.problems)."""
    found = problems(result)
    return clean(f"hint: {found[0][1]}") if found else None


def _change_line(h: HostResult, p: PatchResult) -> str:
    probes = f", {sum(x.ok for x in p.probes)}/{len(p.probes)} checks passed" if p.probes else ""
    return line(f"{p.outcome}: {h.target}: {p.id} ({p.package} {p.version or '-'}){probes}")


def render_ensure(result: RunResult, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
    """A line per spec written or checked, then a summary (ok) or one `error:` line per
    problem (err). The fast path (nothing written, nothing checked) prints the summary only."""
    good = GOOD[result.command]
    for h in result.hosts:
        for p in h.patches:
            checked = all(x.ok for x in p.probes)
            if p.outcome in good and checked and (p.outcome == "applied" or p.probes):
                print(_change_line(h, p), file=out)
    errors = problem_lines(result)
    for problem in errors:
        print(problem, file=err)
    hint = hint_line(result)
    if hint:
        print(hint, file=err)
    counts: dict[str, int] = {}
    for h in result.hosts:
        for p in h.patches:
            counts[p.outcome] = counts.get(p.outcome, 0) + 1
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no specs"
    seconds = max((h.seconds for h in result.hosts), default=0.0)
    n = len(result.hosts)
    if errors:
        print(f"{result.command}: {len(errors)} problem(s) on {n} host(s) [{tally}]", file=err)
    else:
        print(f"{result.command}: ok, {n} host(s) [{tally}] in {seconds:.2f}s", file=out)


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
    catalog.load_all(spec_args)  # bad spec -> exit 2 now, not a unit that never starts
    paths = [str(catalog.resolve(a).resolve()) for a in spec_args]
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
