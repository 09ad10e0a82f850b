"""Which processes hold the changed code now ("restart required"): the rule, on facts as data.

procs.py reads /proc and nothing else; this module decides, from what it read, which processes
still run a module from before vpatch changed it. Kept apart so that the rule is one pure
function with golden cases (tests/cases/restart/), and the executor only reads.

A change (`changes`, built by procs.changes from the written paths): {"module": the top-level
import name the file belongs to ("vllm" for vllm/config/x.py; "google.protobuf" where `google`
is a namespace directory), "path": its directory under site-packages, "/"-terminated (or the
file itself for a top-level module), "at": when it was written (boot clock, seconds),
"every": True where every Python of the environment runs it at start (a `.pth` file,
`sitecustomize`, a module a `.pth` imports, or a path outside site-packages, whose importers
cannot be told)}.

A process (`procs`, one dict per process whose executable is the environment's interpreter
binary; procs._facts reads them): {"pid", "ppid", "started" (boot clock, seconds), "argv",
"bin" (argv[0], resolved as Python resolves it, lies in the environment's bin dir), "maps"
(the files it maps under the environment's site dirs), "cwd", "fds" (its cwd and open files
under those dirs), "script" (the text of the program file argv runs, its first
SCRIPT_BYTES, or ""), "script_path", "parent_argv"}; the last six only where `wanted` said
they are worth reading.

The rule: a process holds a change when it
1. is no vpatch agent nor an agent's child (a probe), and
2. is a Python of this environment: `bin`, or it maps a file under its site dirs, and
3. started before the change was written, and
4. has the changed package loaded, as far as that can be seen from outside:
   - it maps a file under the package's directory (an extension module: Python maps the
     `.so` files it imports, never `.py` source);
   - its cwd, or a file it has open, lies under that directory;
   - its program names the package: `-m PKG...`, a script file under the package's
     directory, `-c` code or a script file (a console script's text:
     `from vllm.entrypoints.cli.main import main`) that imports it;
   - it is a multiprocessing child (`spawn_main`, the forkserver) of a process that holds
     it (a forked child keeps its parent's argv, so the rules above see it as they see the
     parent);
   - or the change is one every Python of the environment runs (`every`).
What this cannot see: a pure-Python package imported indirectly (an application module that
gunicorn or uvicorn loads by name, a plugin, a lazy import) by a process whose own program
does not name it and that maps no extension module of that package. Such a process is not
listed; docs/verify.md says so to the operator.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from collections.abc import Callable
    from typing import Any

SCRIPT_BYTES = 64 * 1024  # of a program file read for its imports (console scripts: ~250 B)
_CMDLINE_MAX = 300

# Options of the interpreter that take a value (python --help): the value is no program.
_VALUED = "WX"
_LONG_VALUED = ("--check-hash-based-pycs",)
_SPAWNED = ("spawn_main(", "multiprocessing.forkserver")


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def _run(text: str, i: int, ok: Callable[[str], bool]) -> int:
    """The index after the run of characters from `i` that `ok` takes."""
    while i < len(text) and ok(text[i]):
        i += 1
    return i


def _statement_imports(part: str, found: set[str]) -> None:
    """`import a.b as c, d` / `from a.b import c` at the start of one statement (a line's, or
    after a `;`), spaces and tabs before it."""
    part = part.lstrip(" \t")
    if part.startswith("import") and part[6:7] in (" ", "\t"):
        end = _run(part, 6, lambda c: _word(c) or c in ". \t,")
        for item in part[6:end].split(","):
            words = item.split()
            if words:
                found.add(words[0])
    elif part.startswith("from") and part[4:5] in (" ", "\t"):
        start = _run(part, 4, lambda c: c in " \t")
        end = _run(part, start, lambda c: _word(c) or c == ".")
        after = _run(part, end, lambda c: c in " \t")
        if (
            end > start
            and after > end
            and part.startswith("import", after)
            and not _word(part[after + 6 : after + 7] or " ")
        ):
            found.add(part[start:end])


def _literal_imports(code: str, found: set[str]) -> None:
    """`__import__("a.b")` and `import_module("a.b")`: the calls that import by a literal."""
    for call in ("__import__(", "import_module("):
        at = code.find(call)
        while at >= 0:
            i = _run(code, at + len(call), str.isspace)
            if code[i : i + 1] in ("'", '"'):
                end = _run(code, i + 1, lambda c: _word(c) or c == ".")
                if end > i + 1 and code[end : end + 1] in ("'", '"'):
                    found.add(code[i + 1 : end])
            at = code.find(call, at + 1)


def imports(code: str) -> set[str]:
    """Every dotted module name `code` imports at a statement's start or by a literal. Plain
    string work, no `re`: the agent's commit runs this, and a static apply imports no module
    the interpreter had not loaded (tests/unit/test_agent_wire.py)."""
    found: set[str] = set()
    for line in code.split("\n"):
        for part in line.split(";"):
            _statement_imports(part, found)
    _literal_imports(code, found)
    return found


def pth_imports(text: str) -> set[str]:
    """Top-level modules a `.pth` file's import lines run (site.py executes a line that
    starts with `import`), e.g. `_virtualenv`, `_distutils_hack`, an editable finder."""
    found: set[str] = set()
    for raw in text.splitlines():
        if raw.startswith(("import ", "import\t")):
            found |= {name.split(".")[0] for name in imports(raw)}
    return found


def program(argv: list[str]) -> tuple[str, str]:
    """What the interpreter was told to run: ("m", module), ("c", code), ("script", path),
    or ("", "") (interactive, stdin, or a rewritten argv)."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return ("script", argv[i + 1]) if i + 1 < len(argv) else ("", "")
        if arg in _LONG_VALUED:
            i += 2
            continue
        if not arg.startswith("-") or arg == "-":
            return ("script", arg) if arg != "-" else ("", "")
        if arg.startswith("--"):
            i += 1
            continue
        j = 1
        while j < len(arg):
            flag = arg[j]
            if flag in "cm" or flag in _VALUED:
                value = arg[j + 1 :] or (argv[i + 1] if i + 1 < len(argv) else "")
                i += 1 if arg[j + 1 :] else 2
                if flag in "cm":
                    return (flag, value)
                break
            j += 1
        else:
            i += 1
    return ("", "")


def everyone(module: str, pth: set[str]) -> bool:
    """Does every Python of the environment run `module` at start: `site` imports
    sitecustomize and usercustomize, and runs the import lines of `.pth` files (`pth`: the
    top-level names they import)?"""
    return module in ("sitecustomize", "usercustomize") or module.split(".")[0] in pth


def valid_changes(raw: Any, sites: list[str], most: int) -> list[dict[str, Any]] | None:
    """`changes` as a worker sent them to privsep's stage 0 (data from the environment's
    owner), kept only where well-formed: a path under one of `sites` (already checked to
    lie in the environment), a module name, a time; at most `most`. None: not a list
    (the environment-wide scan)."""
    if not isinstance(raw, list):
        return None
    out = []
    for c in raw[:most]:
        if not isinstance(c, dict):
            continue
        path, module, at = c.get("path"), c.get("module"), c.get("at")
        if not (isinstance(path, str) and isinstance(module, str)):
            continue
        if not isinstance(at, (int, float)) or isinstance(at, bool) or len(module) > 200:
            continue
        every = bool(c.get("every"))  # (its path only names it: any Python of the env holds it)
        if not every and ("/../" in path or not any(path.startswith(s) for s in sites)):
            continue
        out.append({"module": module, "path": path, "at": float(at), "every": every})
    return out


def is_agent(argv: list[str]) -> bool:
    """`python -I -c BOOT` (transports.bundle.BOOT imports vpatch_agent; no server does), or
    privsep's stage 0 (BOOT0 starts vpatch_agent.privsep), which may go on as the worker in
    its own process when it drops nothing."""
    for i in range(len(argv) - 1):  # (no itertools.pairwise: the agent runs on 3.9)
        if argv[i] == "-c" and (
            "import vpatch_agent\n" in argv[i + 1] or "vpatch_agent.privsep" in argv[i + 1]
        ):
            return True
    return False


def wanted(proc: dict[str, Any], changes: list[dict[str, Any]] | None, at: float) -> bool:
    """Whether a process's costly facts (maps, fds, script, parent) are worth reading: it is
    no agent and started before the newest change (or `at`, for the environment-wide scan)."""
    newest = max([c["at"] for c in changes] or [-1.0]) if changes is not None else at
    return not is_agent(proc["argv"]) and proc["started"] < newest


def _of_env(proc: dict[str, Any]) -> bool:
    return (
        not is_agent(proc["argv"])
        and not is_agent(proc.get("parent_argv") or [])
        and bool(proc.get("bin") or proc.get("maps"))
    )


def _under(paths: list[str], where: str) -> str | None:
    """The first of `paths` that is `where` or lies under it (a directory, "/"-terminated)."""
    for p in paths:
        if p and (p == where or p + "/" == where or (where.endswith("/") and p.startswith(where))):
            return p
    return None


def _named(proc: dict[str, Any], change: dict[str, Any]) -> str:
    """Why the process's own program names the change's package ("" when it does not)."""
    mod, where = change["module"], change["path"]
    kind, what = program(proc["argv"])
    if kind == "m" and (what == mod or what.startswith(mod + ".")):
        return "runs -m %s" % what
    if kind == "c" and _imports_mod(what, mod):
        return "its -c code imports %s" % mod
    if kind == "script":
        path = proc.get("script_path") or what
        if _under([path], where):
            return "runs %s" % path
        if _imports_mod(proc.get("script") or "", mod):
            return "its program %s imports %s" % (path, mod)
    return ""


def _imports_mod(code: str, mod: str) -> bool:
    return any(name == mod or name.startswith(mod + ".") for name in imports(code))


def _evidence(proc: dict[str, Any], change: dict[str, Any]) -> str:
    """Why `proc` has the change's package loaded, from its own facts ("" when nothing says)."""
    if change.get("every"):
        name = change.get("module") or change.get("path")
        return "every Python of the environment runs %s" % name if name else "of the environment"
    where = change["path"]
    hit = _under(proc.get("maps") or [], where)
    if hit:
        return "maps %s" % hit
    hit = _under(proc.get("fds") or [], where)
    if hit:
        return "has %s open" % hit
    if _under([proc.get("cwd") or ""], where):
        return "works in %s" % proc["cwd"]
    return _named(proc, change)


def decide(
    procs: list[dict[str, Any]], changes: list[dict[str, Any]] | None, at: float
) -> list[dict[str, Any]]:
    """The processes that hold a change now, oldest first: {"pid", "started", "cmdline",
    "why"}. `changes` None: every Python of the environment started before `at` (what
    `vpatch rollout --resume` compares: the server, not a package)."""
    cands = {p["pid"]: p for p in procs if _of_env(p)}
    why: dict[int, str] = {}
    held: dict[int, float] = {}  # pid -> when the change it holds was written
    for pid, p in cands.items():
        for c in changes if changes is not None else [{"every": True, "at": at}]:
            said = _evidence(p, c) if p["started"] < c["at"] else ""
            if said:
                why[pid], held[pid] = said, c["at"]
                break
    grew = changes is not None
    while grew:  # multiprocessing children of holders, a generation per pass
        grew = False
        for pid, p in cands.items():
            parent = p.get("ppid")
            if pid in why or parent not in why or not _spawned(p["argv"]):
                continue
            if p["started"] < held[parent]:
                why[pid], held[pid] = "a multiprocessing child of pid %d" % parent, held[parent]
                grew = True
    found = sorted((cands[pid]["started"], pid) for pid in why)
    return [
        {
            "pid": pid,
            "started": started,
            "cmdline": " ".join(cands[pid]["argv"])[:_CMDLINE_MAX],
            "why": why[pid],
        }
        for started, pid in found
    ]


def _spawned(argv: list[str]) -> bool:
    kind, code = program(argv)
    return kind == "c" and any(s in code for s in _SPAWNED)
