"""The checker behind tests/unit/test_subprocess_isolation.py: every place in `patcher/` that
starts a process either starts a Python isolated or says, in a marker comment, why it is not
one of those.

A call that starts a process (`subprocess.run/Popen/call/check_call/check_output`, `os.exec*`,
`os.spawn*`, `os.posix_spawn*`, `asyncio.create_subprocess_*`) passes when

- its argv is `isolate.argv(...)`, or a list literal whose second word is `-I` or `-P`, AND it
  passes both `cwd=` and `env=` (a directory of vpatch's own, no `PYTHON*` variables); or
- a comment `# process-start: REASON` (a non-empty reason) sits on the call's first line or in
  the comment block right above it: the start is not a Python vpatch chose (ssh, the operator's own
  command) or is one isolated another way, and the reason says how.

Everything else is a finding (file, line, why). The checker is tested on bad snippets too, so
that it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

MARK = "# process-start:"
_SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
_ASYNCIO = {"create_subprocess_exec", "create_subprocess_shell"}


def _starter(node: ast.Call, from_subprocess: set[str]) -> str | None:
    """The name of the process-starting function this call is, or None."""
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        mod, name = f.value.id, f.attr
        if mod == "subprocess" and name in _SUBPROCESS:
            return f"subprocess.{name}"
        if mod == "os" and name.startswith(("exec", "spawn", "posix_spawn")):
            return f"os.{name}"
        if mod == "asyncio" and name in _ASYNCIO:
            return f"asyncio.{name}"
    if isinstance(f, ast.Name) and f.id in from_subprocess:
        return f"subprocess.{f.id}"
    return None


def _argv(node: ast.Call, starter: str) -> ast.expr | None:
    if starter.startswith("os."):  # os.execv(path, argv): the argv is the second argument
        return node.args[1] if len(node.args) > 1 else None
    if node.args:
        return node.args[0]
    return next((k.value for k in node.keywords if k.arg == "args"), None)


def _isolated_argv(arg: ast.expr | None, names: dict[str, list[ast.expr]]) -> bool:
    """Whether `arg` is an isolated argv; a name counts when every value the enclosing
    function (or module) assigns to it is one."""
    if isinstance(arg, ast.Name):
        values = names.get(arg.id, [])
        return bool(values) and all(_isolated_argv(v, {}) for v in values)
    if isinstance(arg, ast.Call):
        f = arg.func
        return (isinstance(f, ast.Attribute) and f.attr == "argv" and isinstance(f.value, ast.Name)
                and f.value.id == "isolate")  # fmt: skip
    if isinstance(arg, ast.List) and len(arg.elts) > 1:
        second = arg.elts[1]
        return isinstance(second, ast.Constant) and second.value in ("-I", "-P")
    return False


def _marked(lines: list[str], lineno: int) -> bool:
    """A marker with a reason on the call's line or in the comment block right above it."""
    texts = [lines[lineno - 1]]
    above = lineno - 2
    while above >= 0 and lines[above].lstrip().startswith("#"):
        texts.append(lines[above])
        above -= 1
    for text in texts:
        at = text.find(MARK)
        if at >= 0 and text[at + len(MARK) :].strip():
            return True
    return False


def _assigned(scope: ast.AST) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(n.value)
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and isinstance(n.target, ast.Name):
            out.setdefault(n.target.id, []).append(n.value or ast.Constant(None))
    return out


def _calls(tree: ast.Module) -> list[tuple[ast.Call, dict[str, list[ast.expr]]]]:
    """Every call, with the names assigned in its innermost enclosing function (or module)."""
    out: list[tuple[ast.Call, dict[str, list[ast.expr]]]] = []

    def visit(scope: ast.AST, names: dict[str, list[ast.expr]]) -> None:
        for child in ast.iter_child_nodes(scope):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, _assigned(child))
                continue
            if isinstance(child, ast.Call):
                out.append((child, names))
            visit(child, names)

    visit(tree, _assigned(tree))
    return out


def check_source(source: str, name: str = "<snippet>") -> list[str]:
    """Findings for one module's source."""
    tree = ast.parse(source)
    lines = source.splitlines()
    from_subprocess = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "subprocess"
        for a in n.names
        if a.name in _SUBPROCESS
    }
    found: list[str] = []
    for node, names in _calls(tree):
        starter = _starter(node, from_subprocess)
        if starter is None or _marked(lines, node.lineno):
            continue
        keywords = {k.arg for k in node.keywords}
        if not _isolated_argv(_argv(node, starter), names):
            found.append(f"{name}:{node.lineno}: {starter} of an argv not isolated (-I)")
        elif not {"cwd", "env"} <= keywords:
            found.append(f"{name}:{node.lineno}: {starter} without cwd= and env=")
    return found


def check_tree(root: Path) -> tuple[list[str], int]:
    """(findings, process starts seen) for every module under `root`."""
    findings: list[str] = []
    seen = 0
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        findings += check_source(source, str(path))
        seen += source.count("subprocess.") + source.count("os.exec")
    return findings, seen
